"""Running the entry points on the testdata models from tests: commands, env, outputs."""
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# XLA:CPU's compile options for the suite's programs. The suite's own processes (conftest)
# compile hundreds of tiny programs and run each a few times: LLVM level 0 halves XLA's part
# of a compile (the sampler's first call on the testdata qwen2: 11.0 s -> 5.7 s), and over
# the sampling tests it beats level 1 (63 s against 80 s cold). The jobs the suite starts run
# their programs step after step, often from the compilation cache, where level 0's slower
# code costs more than it saves: a tiny UCO job took 36 s cold / 20 s warm at level 0, 37 s
# / 14 s at level 1 and 41 s / 16 s at XLA's default (all on two idle cores). Both kinds
# also use XLA's older loop-fusion code generator (`--xla_cpu_use_fusion_emitters=false`):
# for programs this small the newer MLIR emitters take most of a compile, and without them
# the sampling and decoder-parity files compiled in 62.6 s where the sampling file alone
# took 86.3 s, and a tiny UCO job started in 31 s cold where it took 35 s (the same
# warm). XLA's HLO passes, which decide what a program computes, are the same either way;
# results move only in the last bits of float32 (a reduction's order), and the parity tests
# hold them to transformers' under these flags. A real model's programs run longest:
# SmolLM2-135M decodes 1.7-2.4x slower at level 0, so the real tier's processes keep XLA's
# default level (`optimized=True`), with the older emitters too: the real tier's SmolLM2
# rollout took 41 s cold where XLA's defaults took 51 s. $PEDRL_TEST_CPU_XLA_FLAGS replaces
# all three kinds' flags ("": XLA's defaults everywhere), to compare.
_OVERRIDE = os.environ.get("PEDRL_TEST_CPU_XLA_FLAGS")
_FAST_COMPILE = "--xla_cpu_use_fusion_emitters=false"
CPU_XLA_FLAGS = (f"--xla_backend_optimization_level=0 {_FAST_COMPILE}"
                 if _OVERRIDE is None else _OVERRIDE)
JOB_XLA_FLAGS = (f"--xla_backend_optimization_level=1 {_FAST_COMPILE}"
                 if _OVERRIDE is None else _OVERRIDE)
OPTIMIZED_XLA_FLAGS = _FAST_COMPILE if _OVERRIDE is None else _OVERRIDE


def xla_flags(devices: int = 1, optimized: bool = False) -> str:
  """XLA_FLAGS for a CPU process the suite starts, with `devices` simulated devices."""
  job = OPTIMIZED_XLA_FLAGS if optimized else JOB_XLA_FLAGS
  return " ".join(([job] if job else []) +
                  ([f"--xla_force_host_platform_device_count={devices}"] if devices > 1 else []))


def cmd(module, workdir, *overrides):
  """`python -m pedrl.experiments.MODULE` with its tiny config."""
  return [sys.executable, "-m", f"pedrl.experiments.{module}",
          f"--config=experiments/{module}.py:tiny", f"--workdir={workdir}", *overrides]


def env(optimized: bool = False):
  """One CPU device (the suite's conftest asks for 8 in its own process); `optimized`: at
  XLA's default optimization level (a real model's job)."""
  return dict(os.environ, XLA_FLAGS=xla_flags(optimized=optimized), JAX_PLATFORMS="cpu")


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
