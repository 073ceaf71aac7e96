r"""Compiles a job's first rollout ahead of time, so that the job reads its programs.

  python -m pedrl.tools.warm --config=experiments/rollout.py:tiny
  python -m pedrl.tools.warm --config=experiments/rollout.py:tiny --batches=2
  python -m pedrl.tools.warm --config=experiments/uco.py:paper --config.tutor.path=... \
      --compilation_cache=/shared/cache

A job's engine programs are keyed by the call's shapes, dtypes and placements, the
code and the devices (`pedrl.engine.programs`), not by the weights' values. This
tool reads the job's config as the job does (the same overrides), loads its tutor and
student on its mesh, and runs the job's first batch of dialogues (the same problems,
seed and settings; --batches=N: its first N, as a later batch's longer texts may need
other programs), the pre-dialogue solve attempts when the job makes them, and the
rewards when none of them calls an API. Every program they need lands in the program
store and jax's persistent compilation cache of --compilation_cache (the job's
default, ~/.cache/pedrl/jax or $PEDRL_COMPILATION_CACHE), where the job then finds
them. Rewards that call an API are skipped (they would be paid requests): their
local programs (the post-dialogue solve attempts) compile at the job's first batch.
A training job's update step is jitted outside the engine and not run here.

It prints how many programs were compiled and read, and where they are kept.
Run it on the devices the job will use, as one process: the programs are compiled
for that one process and those devices. A job of several processes is not warmed by
it: each of its processes keeps its own programs in the store (keyed by the process)
at the job's first start, and reads them at the next.
"""
import os
import time

from absl import app, flags
import jax
import ml_collections
from ml_collections import config_flags

from pedrl import cli
from pedrl.bench import compiles
from pedrl.engine import programs
from pedrl.env import rollout, solving
from pedrl.jobs import reward_factory, settings as settings_lib, workdir as workdir_lib
from pedrl.jobs.checks import check_paths, read_settings
from pedrl.jobs.exits import exits_cleanly
from pedrl.jobs.loading import load_party, load_problems, solver_party
from pedrl.rl import trainer

JOBS = ("pedrl.experiments.rollout",
        *(f"pedrl.experiments.{name}" for name in workdir_lib.TRAINING_ENTRY_POINTS))


def define_flags() -> None:
  config_flags.DEFINE_config_file("config", None, "The job's config file and variant, e.g. "
                                  "experiments/rollout.py:tiny; its overrides as the job's.")
  flags.DEFINE_integer("batches", 1, "How many of the job's first batches to run: a later "
                       "batch may need programs of other lengths.")


def first_batches(s: settings_lib.DialogueSettings, training: bool, batches: int) -> list:
  """[(problem uids, problems)] of the job's first `batches` batches: the rollout job's
  problems in order, the training job's draws of its first steps."""
  rows, _ = load_problems(s.problems, s.job.seed)
  b = s.job.batch_problems
  if training:
    chosen = [trainer.problems_for_step(rows, step, b, s.job.seed) for step in range(batches)]
  else:
    numbered = list(enumerate(rows))
    chosen = [numbered[lo:lo + b] for lo in range(0, min(len(rows), batches * b), b)]
  return [tuple(zip(*batch)) for batch in chosen]


def _store_files(directory: str | None) -> int:
  return sum(len(names) for _, _, names in os.walk(directory)) if directory else 0


def warm(c: ml_collections.ConfigDict, job: str, batches: int = 1) -> compiles.Programs:
  """Runs `job`'s first `batches` rollouts with config `c`; the programs they made."""
  training = job != "pedrl.experiments.rollout"
  s = read_settings(c, settings_lib.TrainingSettings if training else
                    settings_lib.DialogueSettings)
  check_paths(s)
  todo = first_batches(s, training, batches)
  # Rewards that call an API are not run (paid requests); the others are all local.
  local_rewards = not reward_factory.api_roles(s)
  mesh = s.mesh.make()
  # The trained tutor loads as the training job loads it (float32, its runtime fields).
  runtime = s.train.tutor_runtime() if training else {}
  with compiles.compilations() as made:
    tutor = load_party(s.tutor, mesh, s.job.scan_layers,
                       {"enable_thinking": s.rollout.thinking}, **runtime)
    student = load_party(s.student, mesh, s.job.scan_layers)
    solver = solver_party(student, s.solve)
    rewards = reward_factory.build_rewards(s, student, solver, mesh, {}) if local_rewards else None
    for uids, batch in todo:  # As the job runs a batch.
      dialogues = rollout.run(batch, s.job.group_size, tutor, student, s.rollout,
                              seed=s.job.seed, problem_uids=uids)
      if s.solve.pre_dialogue and not training:
        solving.pre_dialogue(batch, solver, s.solve, seed=s.job.seed)
      if rewards is not None:
        rewards(dialogues)
  return made


@exits_cleanly
def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
  if flags.FLAGS.config is None:
    cli.fail("--config is missing: the job's config file and variant, e.g. "
             "--config=experiments/rollout.py:tiny")
  name = flags.FLAGS["config"].config_filename
  job = cli.config_entry_point(name.partition(":")[0])
  if job not in JOBS:
    cli.fail(f"--config={name} is a config of {job or 'no job'}: warm compiles the first "
             f"rollout of {', '.join(j.rpartition('.')[2] for j in JOBS)}")
  if flags.FLAGS.batches < 1:
    cli.fail(f"--batches={flags.FLAGS.batches}: give at least 1")
  start = time.perf_counter()
  made = warm(flags.FLAGS.config, job, flags.FLAGS.batches)
  store = programs.store()
  compiled = len(made) - made.cache_hits - made.stored  # The rest were read.
  print(f"programs={len(made)} compiled={compiled} "
        f"from_compilation_cache={made.cache_hits} from_program_store={made.stored} "
        f"seconds={time.perf_counter() - start:.1f}")
  print(f"program_store={store.directory if store else 'off'} "
        f"({_store_files(store.directory if store else None)} files)")
  print(f"compilation_cache={jax.config.jax_compilation_cache_dir or 'off'}")


if __name__ == "__main__":
  define_flags()
  cli.run(main)
