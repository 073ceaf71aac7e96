"""The `pedrl` console command: every command maps to its module, `--help` lists them and
exits 0, a mistake is one line before JAX is imported."""
import os
import subprocess
import sys

import pytest

from pedrl import commands
from tests.helpers import jobs


def test_every_command_names_a_module_that_runs_as_a_command():
  lines = [*(["train", m] for m, _ in commands.TRAINING),
           *(["bench", b] for b in commands.BENCHMARKS), *([c] for c, _, _ in commands.COMMANDS)]
  for line in lines:
    module, rest = commands.module_of([*line, "--x=1"])
    assert rest == ["--x=1"]
    path = os.path.join(jobs.ROOT, *module.split("."))
    source = open(path + ".py" if os.path.exists(path + ".py") else
                  os.path.join(path, "__main__.py")).read()
    assert '__name__ == "__main__"' in source or path.endswith("serve"), module
  assert commands.module_of(["train", "uco"])[0] == "pedrl.experiments.uco"
  assert commands.module_of(["check-parity"])[0] == "pedrl.tools.check_parity"


def test_help_lists_the_commands_and_exits_0(capsys):
  with pytest.raises(SystemExit) as e:
    commands.main(["--help"])
  assert e.value.code == 0
  out = capsys.readouterr().out
  for c, _, _ in commands.COMMANDS:
    assert f"\n  {c} " in out
  assert "train METHOD" in out and "    uco " in out and "bench NAME" in out


@pytest.mark.parametrize("args, line", [
    (["trian"], "error: unknown command 'trian' (did you mean train?)"),
    (["train"], "error: `pedrl train` needs a training method: one of uco, pedagogical_rl"),
    (["train", "ucoo"], "error: unknown training method 'ucoo' (did you mean uco?)"),
    (["--workdir=x"], "error: give a command"),
])
def test_a_mistake_is_one_line(args, line, capsys):
  with pytest.raises(SystemExit) as e:
    commands.main(args)
  assert e.value.code == 1
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and err[0].startswith(line), err


@pytest.mark.job
def test_a_jobs_mistake_is_found_before_jax_and_a_tool_runs(tmp_path):
  """Through the command's process: its early check as `python -m`'s, and a tool's output."""
  base = [sys.executable, "-X", "importtime", "-c", "from pedrl import commands; commands.main()"]
  r = subprocess.run([*base, "train", "thinking", "--config=experiments/uco.py:tiny",
                      f"--workdir={tmp_path / 'w'}"], cwd=tmp_path, env=jobs.env(),
                     capture_output=True, text=True, timeout=120)
  errors = [x for x in r.stderr.splitlines() if not x.startswith("import time:")]
  imported = [x.split("|")[-1].strip() for x in r.stderr.splitlines() if x.startswith("import time:")]
  assert r.returncode == 1 and len(errors) == 1, errors
  assert errors[0].startswith("error: --config=experiments/uco.py:tiny is a config of ")
  assert "jax" not in imported and not (tmp_path / "w").exists()
  r = subprocess.run([sys.executable, "-c", "from pedrl import commands; commands.main()",
                      "configs"], cwd=tmp_path, env=jobs.env(), capture_output=True, text=True,
                     timeout=120)
  assert r.returncode == 0 and "experiments/uco.py" in r.stdout, r.stderr
