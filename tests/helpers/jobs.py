"""Running the entry points on the testdata models from tests: commands, env, outputs."""
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# XLA:CPU's compile options for the suite's programs, by what a process spends its time on.
# Most of the suite compiles more than it runs: its own process (conftest) compiles hundreds
# of tiny programs and runs each a few times, and most tiny jobs it starts run a few steps of
# programs they compile first. For them LLVM level 0 halves XLA's part of a compile (the
# sampler's first call on the testdata qwen2: 11.0 s -> 5.7 s). Tiny jobs, level 0 against 1,
# cold (empty compilation cache) / warm, on two idle cores: evaluate 22 / 11 s against
# 32 / 10 s, rollout 21 / 10 s against 26 / 10 s, mathtutorbench 19 / 11 s against 25 / 11 s,
# pedagogical_rl 29 / 15 s against 32 / 14 s. A job whose tiny run is bound by running keeps
# level 1 (`run_bound=True`): the CPA job, hundreds of backbone calls, took 284 / 217 s at
# level 0 and 139 / 84 s at level 1. (UCO's tiny job, per-turn student scoring and
# embeddings, is the same cold at both, 32 s, but slower warm at level 0, 22 s against
# 14 s.) The whole suite (`.ci/run`, cold) ran in 18 min 12 s with every job but CPA's at
# level 0, where it took 20 min 48 s with every job at level 1 (and the docs' commands
# checked by one process per module, about 45 s more of one worker). Every kind uses XLA's
# older loop-fusion code generator (`--xla_cpu_use_fusion_emitters=false`): for programs
# this small the newer MLIR emitters take most of a compile, and without them the sampling and decoder-parity files compiled in
# 62.6 s where the sampling file alone took 86.3 s. XLA's HLO passes, which decide what a
# program computes, are the same under every choice; results move only in the last bits of
# float32 (a reduction's order), and the parity tests hold them to transformers' under these
# flags. A real model's programs run longest: SmolLM2-135M decodes 1.7-2.4x slower at level
# 0, so the real tier's processes keep XLA's default level (`optimized=True`), with the
# older emitters too: its rollout took 41 s cold where XLA's defaults took 51 s.
# $PEDRL_TEST_CPU_XLA_FLAGS replaces every kind's flags ("": XLA's defaults everywhere), to
# compare.
_OVERRIDE = os.environ.get("PEDRL_TEST_CPU_XLA_FLAGS")
_FAST_COMPILE = "--xla_cpu_use_fusion_emitters=false"
CPU_XLA_FLAGS = (f"--xla_backend_optimization_level=0 {_FAST_COMPILE}"
                 if _OVERRIDE is None else _OVERRIDE)
RUN_BOUND_XLA_FLAGS = (f"--xla_backend_optimization_level=1 {_FAST_COMPILE}"
                       if _OVERRIDE is None else _OVERRIDE)
OPTIMIZED_XLA_FLAGS = _FAST_COMPILE if _OVERRIDE is None else _OVERRIDE


def xla_flags(devices: int = 1, optimized: bool = False, run_bound: bool = False) -> str:
  """XLA_FLAGS for a CPU process the suite starts, with `devices` simulated devices."""
  job = (OPTIMIZED_XLA_FLAGS if optimized else RUN_BOUND_XLA_FLAGS if run_bound
         else CPU_XLA_FLAGS)
  return " ".join(([job] if job else []) +
                  ([f"--xla_force_host_platform_device_count={devices}"] if devices > 1 else []))


def cmd(module, workdir, *overrides):
  """`python -m pedrl.experiments.MODULE` with its tiny config."""
  return [sys.executable, "-m", f"pedrl.experiments.{module}",
          f"--config=experiments/{module}.py:tiny", f"--workdir={workdir}", *overrides]


def env(optimized: bool = False, run_bound: bool = False):
  """One CPU device (the suite's conftest asks for 8 in its own process); `optimized`: at
  XLA's default optimization level (a real model's job); `run_bound`: at level 1 (a tiny
  job whose time is running, not compiling)."""
  return dict(os.environ, XLA_FLAGS=xla_flags(optimized=optimized, run_bound=run_bound),
              JAX_PLATFORMS="cpu")


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
