r"""Seconds each tiny job and tool of the README's Jobs table takes, cold and warm.

  python -m pedrl.bench.jobs                     # every job, in the table's order
  python -m pedrl.bench.jobs --only=uco,rollout  # some (and the jobs they read from)

Each command runs as the README shows it (`python -m …`, the tiny config, the testdata
models), in a fresh process with its workdir under --root instead of /tmp:

- cold: an empty compilation cache (`$PEDRL_COMPILATION_CACHE`, jax's programs and the
  engine's program store), so the time includes compiling every program;
- warm: the same command again into a new workdir, with the cache the cold run filled:
  the start a user sees from the second run on.

A job that reads another's workdir (SFT and MDPO the baselines' data, the analysis two
evaluations, the tools a training or evaluation run) reads the cold run's. The table
gives wall seconds and the load average before each run, so a loaded machine shows;
the README's times are this table's, run on an idle machine. Not timed here: the
server (`pedrl.bench.serve` gives its time to ready, cold and warm), the learning
check and the benchmarks, which run for minutes by design.
"""
from collections.abc import Sequence
import dataclasses
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

from absl import flags

from pedrl import cli

flags.DEFINE_list("only", [], "Names of the jobs to time (default: all); those they read "
                  "from run first.")
flags.DEFINE_string("root", None, "Folder for the workdirs and caches (default: a new "
                    "temporary folder, removed afterwards).")
flags.DEFINE_bool("warm", True, "Also time each job a second time, warm.")
FLAGS = flags.FLAGS


@dataclasses.dataclass(frozen=True)
class Job:
  name: str
  command: str  # As the README's Jobs table shows it.
  reads: tuple[str, ...] = ()  # Jobs whose workdir it reads.
  in_table: bool = True  # False: run only for another's sake (a second evaluation).


# The README's Jobs table, in its order (tests/bench/test_bench_jobs.py keeps the two equal).
JOBS = (
    Job("uco", "python -m pedrl.experiments.uco --config=experiments/uco.py:tiny "
        "--workdir=/tmp/pedrl_uco"),
    Job("pedagogical_rl", "python -m pedrl.experiments.pedagogical_rl "
        "--config=experiments/pedagogical_rl.py:tiny --workdir=/tmp/pedrl_ped"),
    Job("thinking", "python -m pedrl.experiments.thinking --config=experiments/thinking.py:tiny "
        "--workdir=/tmp/pedrl_think"),
    Job("baseline_data", "python -m pedrl.experiments.baseline_data "
        "--config=experiments/baselines.py:tiny --workdir=/tmp/pedrl_baselines"),
    Job("sft", "python -m pedrl.experiments.sft --config=experiments/sft.py:tiny "
        "--workdir=/tmp/pedrl_sft --config.data.workdir=/tmp/pedrl_baselines",
        ("baseline_data",)),
    Job("mdpo", "python -m pedrl.experiments.mdpo --config=experiments/mdpo.py:tiny "
        "--workdir=/tmp/pedrl_mdpo --config.data.workdir=/tmp/pedrl_baselines",
        ("baseline_data",)),
    Job("rollout", "python -m pedrl.experiments.rollout --config=experiments/rollout.py:tiny "
        "--workdir=/tmp/pedrl_rollout"),
    Job("evaluate", "python -m pedrl.experiments.evaluate --config=experiments/evaluate.py:tiny "
        "--workdir=/tmp/pedrl_eval"),
    Job("evaluate_b", "python -m pedrl.experiments.evaluate "
        "--config=experiments/evaluate.py:tiny,thinking --workdir=/tmp/pedrl_eval_b",
        in_table=False),
    Job("reasoning", "python -m pedrl.experiments.evaluate "
        "--config=experiments/evaluate.py:tiny,reasoning --workdir=/tmp/pedrl_reason"),
    Job("analyze", "python -m pedrl.experiments.analyze --config=experiments/analyze.py:tiny "
        "--workdir=/tmp/pedrl_analysis --config.runs=A=/tmp/pedrl_eval,B=/tmp/pedrl_eval_b",
        ("evaluate", "evaluate_b")),
    Job("mathtutorbench", "python -m pedrl.experiments.mathtutorbench "
        "--config=experiments/mathtutorbench.py:tiny --workdir=/tmp/pedrl_mtb"),
    Job("cpa", "python -m pedrl.experiments.cpa --config=experiments/cpa.py:tiny "
        "--workdir=/tmp/pedrl_cpa"),
    Job("report", "python -m pedrl.tools.report /tmp/pedrl_eval", ("evaluate",)),
    Job("plot", "python -m pedrl.tools.plot /tmp/pedrl_uco", ("uco",)),
    Job("export", "python -m pedrl.tools.export --workdir=/tmp/pedrl_uco --out=/tmp/pedrl_tutor",
        ("uco",)),
    Job("show_trace", "python -m pedrl.tools.show_trace /tmp/pedrl_cpa/cpa/seed42 "
        "--task=pedagogy_following --index=0", ("cpa",)),
    Job("check_parity", "python -m pedrl.tools.check_parity --hf_dir=testdata/models/qwen2"),
    Job("configs", "python -m pedrl.tools.configs"),
)
# The table's other rows are timed by their own benchmarks or run for minutes by design.
NOT_TIMED = ("pedrl.serve", "pedrl.bench.")
BY_NAME = {j.name: j for j in JOBS}


def selected(names: Sequence[str]) -> list[Job]:
  """The jobs named and, before them, those whose workdirs they read, in table order."""
  unknown = sorted(set(names) - set(BY_NAME))
  if unknown:
    cli.fail(f"--only: no job {', '.join(unknown)}; the jobs: {', '.join(BY_NAME)}")
  want = set(names or BY_NAME)
  while True:
    more = {r for n in want for r in BY_NAME[n].reads} - want
    if not more:
      return [j for j in JOBS if j.name in want]
    want |= more


def argv(job: Job, root: str, run: str) -> list[str]:
  """The job's command with its own outputs (a workdir, a tool's --out) in ROOT/RUN/X
  for /tmp/pedrl_X, and the workdirs it reads in ROOT/cold/X (the cold runs')."""
  out = []
  for a in shlex.split(job.command):
    own = a.partition("=")[0] in ("--workdir", "--out")
    out.append(a.replace("/tmp/pedrl_", os.path.join(root, run if own else "cold", "")))
  if out[0] == "python":
    out[0] = sys.executable
  return out


def timed(cmd: list[str], cache: str, cwd: str) -> tuple[float, str]:
  """(wall seconds, the last line of stderr when it failed, else "")."""
  env = dict(os.environ, PEDRL_COMPILATION_CACHE=cache)
  start = time.perf_counter()
  done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
  seconds = time.perf_counter() - start
  why = "" if done.returncode == 0 else (done.stderr.strip().splitlines() or ["failed"])[-1]
  return seconds, why


def main(argv_: Sequence[str]) -> int:
  del argv_
  jobs = selected(FLAGS.only)
  root = FLAGS.root or tempfile.mkdtemp(prefix="pedrl_bench_jobs_")
  repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  import jax  # Only its version, for the header.
  print(f"# {time.strftime('%Y-%m-%d')}, {platform.machine()} with {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, jax {jax.__version__}")
  print("| job | cold s | warm s | load before (cold, warm) |\n|---|---|---|---|")
  failed = []
  for job in jobs:
    cache = os.path.join(root, "cache", job.name)
    shutil.rmtree(cache, ignore_errors=True)
    row = [job.name]
    loads = []
    for run in ("cold", "warm") if FLAGS.warm else ("cold",):
      loads.append(f"{os.getloadavg()[0]:.1f}")
      seconds, why = timed(argv(job, root, run), cache, repo)
      row.append((f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.1f}") if not why
                 else "failed")
      if why:
        failed.append(f"{job.name} ({run}): {why}")
        break
    row += [""] * (3 - len(row))
    print(f"| {' | '.join(row)} | {', '.join(loads)} |", flush=True)
  if not FLAGS.root:
    shutil.rmtree(root, ignore_errors=True)
  for line in failed:
    print(f"failed: {line}", file=sys.stderr)
  return 1 if failed else 0


if __name__ == "__main__":
  cli.run(main)
