"""The command line's mistakes: one `error:` line, exit code 1, no workdir made; and
--helpshort shows the entry point's own flags."""
import os
import subprocess
import sys

import pytest

from tests import jobs


def _uco(tmp_path, *args, cwd=jobs.ROOT):
  workdir = tmp_path / "run"
  out = subprocess.run([sys.executable, "-m", "pedrl.experiments.uco", *args,
                        f"--workdir={workdir}"], cwd=cwd, env=jobs.env(), capture_output=True,
                       text=True, timeout=300)
  return out, workdir


@pytest.mark.parametrize("args, says", [
    (["--config=experiments/uco.py:tinyy"],
     ["variant 'tinyy'", "valid: paper, lam=<float>", "no_progress, tiny"]),
    (["--config=experiments/pedagogical_rl.py:lamda"], ["unknown variant 'lamda'", "hard, think"]),
    (["--config=experiments/nope.py:tiny"], ["experiments/nope.py", "No such file"]),
    (["--config=experiments/nope.py:tiny", "--config.rl.lr=1"], ["experiments/nope.py"]),
    (["--config=experiments/uco.py:tiny", "--config.rl.lr=abc"], ["--config.rl.lr=abc", "'abc'"]),
    (["--config=experiments/uco.py:tiny", "--config.rl.lrr=1"],
     ["--config.rl.lrr: --config.rl has no key 'lrr'", "lr,"]),
    (["--config=experiments/uco.py:tiny", "--steps=3"], ["Unknown command line flag 'steps'"]),
])
def test_a_mistake_is_one_line_and_makes_no_workdir(tmp_path, args, says):
  out, workdir = _uco(tmp_path, *args)
  assert out.returncode == 1
  lines = out.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
  for text in says:
    assert text in lines[0]
  assert not os.path.exists(workdir)


def test_a_missing_workdir_flag_is_one_line():
  out = subprocess.run([sys.executable, "-m", "pedrl.experiments.uco",
                        "--config=experiments/uco.py:tiny"], cwd=jobs.ROOT, env=jobs.env(),
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 1
  assert out.stderr.strip().splitlines() == [
      "error: flag --workdir=None: Flag --workdir must have a value other than None. "
      "(--helpshort lists the flags)"]


def test_helpshort_lists_the_entry_points_flags():
  out = subprocess.run([sys.executable, "-m", "pedrl.experiments.rollout", "--helpshort"],
                       cwd=jobs.ROOT, env=jobs.env(), capture_output=True, text=True, timeout=300)
  for flag in ("--config:", "--workdir:", "--multihost:"):
    assert flag in out.stdout + out.stderr
