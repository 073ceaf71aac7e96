"""How a job ends: exit codes for schedulers, expected errors as one line, the flags
every job takes."""
import functools
import signal
import sys

from absl import app, flags, logging

from pedrl import cli, distributed, logs, runs
from pedrl.clients import openai_compat
from pedrl.env import problems as problems_lib
from pedrl.env.dialogue import RecordError
from pedrl.eval import pedrm, shards
from pedrl.eval.mathtutorbench import tasks as mtb_tasks
from pedrl.jobs.workdir import WorkdirError
from pedrl.rewards import judging, oracle as oracle_lib
from pedrl.rl import loop


# Exit codes, for schedulers: 0 done; 1 a configuration, input, endpoint or checkpoint error
# (one line on stderr); 3 training diverged; 128 + N stopped on signal N after saving
# (130 SIGINT, 143 SIGTERM): run the same command again to resume.
EXIT_ERROR, EXIT_DIVERGED = 1, 3
# A user's mistake or a failing service: one line, no traceback. Anything else is a bug.
EXPECTED_ERRORS = (app.UsageError, runs.CheckpointError, judging.JudgeError,
                   oracle_lib.OracleError, problems_lib.DataError, RecordError, WorkdirError,
                   shards.ShardError, pedrm.PedRMError, openai_compat.EndpointError,
                   mtb_tasks.TaskError)


# The flags every job takes (--config, --workdir, --multihost): defined by pedrl.cli, which
# also checks them before a job's module is imported.
define_flags = cli.define_job_flags


def exits_cleanly(main):
  """Wraps an entry point's main: expected errors end it with `error: …` and an exit code."""
  @functools.wraps(main)
  def wrapped(argv):
    logs.quiet()  # Also when a main is called in process, not through cli.run.
    try:
      return main(argv)
    except EXPECTED_ERRORS as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(EXIT_ERROR)
    except loop.TrainingDiverged as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(EXIT_DIVERGED)
  return wrapped


def job_main(run):
  """An entry point's main from `run(config, workdir)` (its --config and --workdir): the
  multi-process runtime starts first (--multihost), before anything touches the devices,
  and expected errors end the job as `exits_cleanly` says."""
  @exits_cleanly
  @functools.wraps(run)
  def main(argv):
    del argv
    distributed.initialize(flags.FLAGS.multihost)
    return run(flags.FLAGS.config, flags.FLAGS.workdir)
  return main


def exit_on_signal(name: str | None, step_text: str):
  """After a run returned early on a signal: one log line, exit 128 + the signal's number."""
  if name is None:
    return
  logging.warning("stopping on %s at %s", name, step_text)
  print(f"stopped on {name} at {step_text}; run the same command again to resume",
        file=sys.stderr)
  sys.exit(128 + signal.Signals[name].value)
