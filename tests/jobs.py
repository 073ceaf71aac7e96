"""Running the entry points on the testdata models from tests: commands, env, outputs."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cmd(module, workdir, *overrides):
  """`python -m pedrl.experiments.MODULE` with its tiny config."""
  return [sys.executable, "-m", f"pedrl.experiments.{module}",
          f"--config=experiments/{module}.py:tiny", f"--workdir={workdir}", *overrides]


def env():
  """One CPU device (the suite's conftest asks for 8 in its own process)."""
  return dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu")


def metrics(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]
