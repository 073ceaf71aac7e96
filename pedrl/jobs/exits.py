"""How a job ends: exit codes for schedulers, expected errors as one line, the flags
every job takes."""
from collections.abc import Callable
import functools
import signal
import sys
import traceback
from typing import Any

import ml_collections
from absl import app, flags, logging

from pedrl import cli, distributed, environ, logs, runs
from pedrl.clients import openai_compat
from pedrl.env import problems as problems_lib
from pedrl.env.dialogue import RecordError
from pedrl.eval import pedrm, shards
from pedrl.eval.mathtutorbench_harness import tasks as mtb_tasks
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
distributed.register_error(*EXPECTED_ERRORS)  # Raised alike on every process.


# The flags every job takes (--config, --workdir, --multihost): defined by pedrl.cli, which
# also checks them before a job's module is imported.
define_flags = cli.define_job_flags


def _end(code: int, line: str | None = None) -> None:
  """Ends the job with exit `code` after printing `line`. With several processes, the
  others are told first (they would wait for this one in their next collective) and this
  one does not wait for them at JAX's shutdown barrier."""
  if line is not None:
    print(line, file=sys.stderr)
  if distributed.started():
    distributed.fail_all((line or f"exited with status {code}").removeprefix("error: "))
    distributed.exit_now(code)
  sys.exit(code)


# What a collective's error says when another process is gone (gloo on CPUs, NCCL on GPUs).
_LOST_PEER = ("Connection reset by peer", "Connection closed by peer", "Gloo", "NCCL")


def _lost_peer(e: Exception) -> str:
  """The cause an error of several processes most likely has, when it shows one."""
  text = str(e)
  return ("another process ended (a collective with it failed): "
          if any(s in text for s in _LOST_PEER) else "")


def exits_cleanly(main: Callable[[list[str]], Any]) -> Callable[[list[str]], Any]:
  """Wraps an entry point's main: expected errors end it with `error: …` and an exit code;
  with several processes, any error ends them all (`_end`)."""
  @functools.wraps(main)
  def wrapped(argv):
    logs.quiet()  # Also when a main is called in process, not through cli.run.
    try:
      return main(argv)
    except EXPECTED_ERRORS as e:
      _end(EXIT_ERROR, f"error: {e}")
    except loop.TrainingDiverged as e:
      _end(EXIT_DIVERGED, f"error: {e}")
    except SystemExit as e:
      # 128 + N: a stop on a signal that every process agreed on; they exit together.
      code = e.code if isinstance(e.code, int) else (0 if e.code is None else EXIT_ERROR)
      if code == 0 or code >= 128 or not distributed.started():
        raise
      _end(code)
    except KeyboardInterrupt:  # SIGINT outside a loop's stop request (loading, compiling).
      if not distributed.started():
        raise
      _end(128 + signal.SIGINT, "error: stopped on SIGINT")
    except Exception as e:
      if not distributed.started():
        raise  # A bug: its traceback.
      traceback.print_exc()
      _end(EXIT_ERROR, f"error: {_lost_peer(e)}{runs.one_line(e)}")
  return wrapped


def launch_from_flags() -> environ.Launch:
  """The launch --coordinator_address, --num_processes and --process_id (or their JAX_*
  variables) describe; a partial or wrong one is a usage error."""
  try:
    return environ.launch(flags.FLAGS.coordinator_address, flags.FLAGS.num_processes,
                          flags.FLAGS.process_id)
  except ValueError as e:
    raise app.UsageError(str(e)) from None


def job_main(run: Callable[[ml_collections.ConfigDict, str], Any] | None = None, *,
             single_process: str | None = None) -> Callable:
  """An entry point's main from `run(config, workdir)` (its --config and --workdir): the
  multi-process runtime starts first (--multihost and the launch flags), before anything
  touches the devices, and errors end the job as `exits_cleanly` says.

  single_process: why the job runs as one process only; a launch of several is refused
  with it, before the runtime starts."""
  if run is None:
    return functools.partial(job_main, single_process=single_process)

  @exits_cleanly
  @functools.wraps(run)
  def main(argv):
    del argv
    launch = launch_from_flags()
    if single_process and distributed.starts_runtime(flags.FLAGS.multihost, launch):
      raise app.UsageError(f"{single_process}; run it as one process (--multihost=off)")
    distributed.initialize(flags.FLAGS.multihost, launch)
    return run(flags.FLAGS.config, flags.FLAGS.workdir)
  return main


def exit_on_signal(name: str | None, step_text: str) -> None:
  """After a run returned early on a signal: one log line, exit 128 + the signal's number."""
  if name is None:
    return
  logging.warning("stopping on %s at %s", name, step_text)
  print(f"stopped on {name} at {step_text}; run the same command again to resume",
        file=sys.stderr)
  sys.exit(128 + signal.Signals[name].value)
