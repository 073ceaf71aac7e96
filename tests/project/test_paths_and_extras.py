"""Path flags and tool arguments are found as config paths are (the current directory,
then pedrl's repository), and a command missing an optional package says which extra
brings it in one line, before it loads or computes anything."""
import os
import subprocess
import sys

import pytest

from pedrl import cli, paths
from tests.helpers import jobs

QWEN2 = os.path.join(jobs.ROOT, "testdata", "models", "qwen2")


def test_a_path_is_found_here_then_in_the_repository(tmp_path, monkeypatch, capsys):
  monkeypatch.chdir(tmp_path)
  assert paths.find("testdata/models/qwen2") == QWEN2
  assert cli.input_path("hf_dir", "testdata/models/qwen2", checkpoint=True) == QWEN2
  assert paths.find("testdata/none") == "testdata/none"  # Neither: as given.
  (tmp_path / "testdata" / "models" / "qwen2").mkdir(parents=True)
  assert paths.find("testdata/models/qwen2") == "testdata/models/qwen2"  # Here comes first.
  with pytest.raises(SystemExit):  # Here, but no checkpoint.
    cli.input_path("hf_dir", "testdata/models/qwen2", checkpoint=True)
  line = capsys.readouterr().err.strip()
  assert line == ("error: --hf_dir=testdata/models/qwen2: not a checkpoint directory (no "
                  "config.json), neither under the current directory nor in pedrl's repository")


def test_a_missing_extra_is_one_line_naming_it(monkeypatch, capsys):
  cli.require("the figures", "json")  # Installed: nothing happens.
  monkeypatch.setitem(sys.modules, "matplotlib", None)  # As if not installed.
  with pytest.raises(SystemExit) as e:
    cli.require("the figures", "matplotlib")
  assert e.value.code == 1
  assert capsys.readouterr().err.strip() == (
      'error: the figures needs matplotlib, which pedrl installs only with an extra: '
      'pip install "pedrl[plot]"')
  assert set(cli.EXTRAS.values()) <= {"plot", "test", "serve", "data", "embed"}


def _without(module: str, command: str, *args, cwd):
  """`python -m COMMAND ARGS` in a process where `module` cannot be imported."""
  code = (f"import runpy, sys; sys.modules[{module!r}] = None; sys.argv = ['x', *{list(args)!r}]; "
          f"runpy.run_module({command!r}, run_name='__main__', alter_sys=True)")
  return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=jobs.env(),
                        capture_output=True, text=True, timeout=300)


@pytest.mark.job
def test_commands_check_their_extras_and_find_their_paths_from_any_directory(tmp_path):
  analysis = tmp_path / "analysis"
  cases = [
      # check_parity, from another directory with the README's relative path: it finds the
      # checkpoint, then refuses at once without torch.
      (("torch", "pedrl.tools.check_parity", "--hf_dir=testdata/models/qwen2"),
       'check_parity\'s reference (transformers on PyTorch) needs torch, which pedrl installs '
       'only with an extra: pip install "pedrl[test]"'),
      (("matplotlib", "pedrl.experiments.analyze", "--config=experiments/analyze.py:tiny",
        f"--workdir={analysis}", f"--config.runs=A={tmp_path}"),
       'error: analyze\'s figures (--config.figures=False: the tables only) needs matplotlib'),
      (("matplotlib", "pedrl.tools.report", str(tmp_path)), "error: report's pareto.png"),
  ]
  for args, says in cases:
    r = _without(*args, cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and says in lines[-1] and "Traceback" not in r.stderr, r.stderr
  assert not analysis.exists()  # Refused before the workdir is made.
