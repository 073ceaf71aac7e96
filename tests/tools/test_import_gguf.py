"""`pedrl.tools.import_gguf`'s folders: a default name per file, and a folder reused only for
the file it was imported from (the conversion itself runs in the `real` tier)."""
import hashlib
import os
import subprocess
import sys

import pytest

from pedrl.tools import import_gguf


@pytest.mark.parametrize("name, folder", [
    ("Qwen2.5-7B-Instruct-Q4_K_M.gguf", "Qwen2.5-7B-Instruct-Q4_K_M"),
    ("Qwen2.5-1.5B-Instruct.Q8_0.gguf", "Qwen2.5-1.5B-Instruct.Q8_0"),
    ("Llama-3.2-1B-Instruct.GGUF", "Llama-3.2-1B-Instruct"),
    ("model", "model")])
def test_the_default_folder_keeps_every_dot_of_the_name(name, folder):
  assert import_gguf.default_name(f"/models/{name}") == folder


def _folder(parent, marker: str):
  """A finished import's folder, its marker holding `marker`."""
  out = parent / "Qwen2.5-7B"
  out.mkdir(parents=True)
  (out / "model.safetensors").write_bytes(b"weights of an earlier import")
  (out / import_gguf.DONE).write_text(marker)
  return out


def _snapshot(folder):
  return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_a_folder_is_reused_only_for_the_file_it_was_imported_from(tmp_path, monkeypatch):
  gguf = tmp_path / "a.gguf"
  gguf.write_bytes(b"GGUF one file")
  digest = hashlib.sha256(gguf.read_bytes()).hexdigest()
  def no_conversion(*args):
    raise AssertionError("converted again")
  monkeypatch.setattr(import_gguf, "convert", no_conversion)

  same = _folder(tmp_path / "same", digest + "\n")
  assert import_gguf.import_gguf(str(gguf), str(same)) == str(same)
  older = _folder(tmp_path / "older", "")  # A marker from before digests were recorded.
  assert import_gguf.import_gguf(str(gguf), str(older)) == str(older)

  other = _folder(tmp_path / "other", "0" * 64 + "\n")
  before = _snapshot(other)
  with pytest.raises(ValueError, match=r"holds an import of another GGUF file .*pass another --out"):
    import_gguf.import_gguf(str(gguf), str(other))
  assert _snapshot(other) == before


@pytest.mark.job
def test_the_command_refuses_a_folder_of_another_file_in_one_line(tmp_path):
  gguf = tmp_path / "Qwen2.5-7B.gguf"
  gguf.write_bytes(b"GGUF another file")
  cache = tmp_path / "cache"
  _folder(cache, "f" * 64)  # Where --gguf=Qwen2.5-7B.gguf goes by default.
  before = _snapshot(cache / "Qwen2.5-7B")
  proc = subprocess.run([sys.executable, "-m", "pedrl.tools.import_gguf", f"--gguf={gguf}"],
                        capture_output=True, text=True, timeout=120,
                        env={**os.environ, "PEDRL_MODEL_CACHE": str(cache)})
  assert proc.returncode == 1 and proc.stdout == ""
  assert proc.stderr.strip().splitlines() == [
      f"error: {cache / 'Qwen2.5-7B'} holds an import of another GGUF file "
      f"(SHA-256 ffffffffffff…, this one's {hashlib.sha256(b'GGUF another file').hexdigest()[:12]}…): "
      "pass another --out, or remove that folder"]
  assert _snapshot(cache / "Qwen2.5-7B") == before
