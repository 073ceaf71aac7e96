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


def config(file: str, variant: str):
  """experiments/FILE.py:VARIANT as --config parses it (the ConfigDict a job reads)."""
  from absl import flags
  from ml_collections import config_flags
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=fv)
  fv(["test", f"--config={os.path.join(ROOT, 'experiments', file)}.py:{variant}"])
  return fv.config


def setting(s, name: str):
  """The value at a dotted path into typed settings (dataclasses and dicts)."""
  for key in name.split("."):
    s = s[key] if isinstance(s, dict) else getattr(s, key)
  return s
