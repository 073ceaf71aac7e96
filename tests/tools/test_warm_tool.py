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

from tests.helpers import jobs

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
def test_after_warm_the_jobs_first_rollout_compiles_nothing(tmp_path):
  cache = str(tmp_path / "cache")
  out = _run([sys.executable, "-m", "pedrl.tools.warm",
              "--config=experiments/rollout.py:tiny"], cache)
  assert f"program_store={os.path.join(cache, 'pedrl-programs')}" in out, out
  assert " compiled=0 " not in out, out
  stored = sorted(f for f in _files(cache) if f.startswith("pedrl-programs"))
  assert stored, "the warm step stored no program"
  # The control: one program taken out of the store must be found missing, compiled and
  # stored again by the job (so the job reads and writes this folder's store); the store
  # compiles apart from jax's cache (programs._fresh), so nothing else appears.
  os.remove(os.path.join(cache, stored[0]))
  before = _files(cache)
  _run(jobs.cmd("rollout", str(tmp_path / "job")), cache)
  new = _files(cache) - before
  assert new == {stored[0]}, (
      f"after warm the job should have compiled {stored[0]} only: {sorted(new)}")


@pytest.mark.job
def test_warm_refuses_a_config_of_another_job():
  done = subprocess.run([sys.executable, "-m", "pedrl.tools.warm",
                         "--config=experiments/evaluate.py:tiny"], env=jobs.env(),
                        cwd=jobs.ROOT, capture_output=True, text=True, timeout=120)
  assert done.returncode == 1
  assert done.stderr.strip().splitlines()[-1].startswith("error: --config="), done.stderr
