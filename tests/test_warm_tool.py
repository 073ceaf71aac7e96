"""`pedrl.tools.warm`: after it, the job's first rollout compiles nothing.

The check counts files: the program store writes one per program it compiles, and
jax's persistent cache (every program, `cli.use_compilation_cache`) one per program
it compiles; a program read from either writes none. So a job that adds no file to
its compilation cache folder compiled nothing.
"""
import os
import subprocess
import sys

import pytest

from tests import jobs

# One batch of one problem, two dialogues of at most two turns: the smallest first rollout.
SHAPES = ("--config.problems.limit=1", "--config.batch_problems=1", "--config.rollout.max_turns=2")


def _files(folder: str) -> set[str]:
  return {os.path.relpath(os.path.join(d, n), folder) for d, _, names in os.walk(folder)
          for n in names}


def _run(args, cache):
  done = subprocess.run([*args, f"--compilation_cache={cache}", *SHAPES], env=jobs.env(),
                        cwd=jobs.ROOT, capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  return done.stdout


@pytest.mark.job
@pytest.mark.parametrize("warmed", [True, False], ids=["warmed", "cold"])
def test_after_warm_the_jobs_first_rollout_compiles_nothing(tmp_path, warmed):
  cache = str(tmp_path / "cache")
  if warmed:
    out = _run([sys.executable, "-m", "pedrl.tools.warm",
                "--config=experiments/rollout.py:tiny"], cache)
    assert f"program_store={os.path.join(cache, 'pedrl-programs')}" in out, out
    assert " compiled=0 " not in out, out
  before = _files(cache) if os.path.isdir(cache) else set()
  _run(jobs.cmd("rollout", str(tmp_path / "job")), cache)
  new = _files(cache) - before
  if warmed:
    assert not new, f"the job compiled {len(new)} programs after warm: {sorted(new)}"
  else:  # Without the warm step the same check sees the job's programs compiled.
    assert any(f.startswith("pedrl-programs") for f in new), sorted(new)


@pytest.mark.job
def test_warm_refuses_a_config_of_another_job():
  done = subprocess.run([sys.executable, "-m", "pedrl.tools.warm",
                         "--config=experiments/evaluate.py:tiny"], env=jobs.env(),
                        cwd=jobs.ROOT, capture_output=True, text=True, timeout=120)
  assert done.returncode == 1
  assert done.stderr.strip().splitlines()[-1].startswith("error: --config="), done.stderr
