"""One logging setup for every entry point: routine noise hidden at the default verbosity.

Hidden unless --verbosity is 1 or more (absl's flag, also -v 1): jax's INFO line
about the TPU backend it could not find on machines without one, orbax's INFO
lines (a dozen per checkpoint) and httpx's line per API request. Warnings and
errors always show, each on its own line above the progress bars.
"""
import logging as std_logging
import sys

from absl import flags, logging
from tqdm import tqdm


class _Noise(std_logging.Filter):

  def filter(self, record) -> bool:
    if record.levelno >= std_logging.WARNING:
      return True
    if flags.FLAGS.is_parsed() and flags.FLAGS.verbosity >= 1:
      return True
    if record.name.split(".")[0] in ("httpx", "httpx2") or "/orbax/" in record.pathname:
      return False
    return not (record.pathname.endswith("xla_bridge.py")
                and "Unable to initialize backend" in record.getMessage())


class _AboveBars:
  """absl's stream, printing through tqdm.write: a log line goes above the jobs' progress
  bars instead of into the middle of one."""

  def write(self, text: str):
    if text.strip():
      tqdm.write(text.rstrip("\n"), file=sys.stderr)

  def flush(self):
    sys.stderr.flush()

  def close(self):  # absl closes its stream at exit; stderr stays open.
    pass


def quiet() -> None:
  """Adds the filter to absl's handler and routes it above progress bars (once)."""
  handler = logging.get_absl_handler()
  if not any(isinstance(f, _Noise) for f in handler.filters):
    handler.addFilter(_Noise())
  if handler.python_handler.stream is sys.stderr:
    handler.python_handler.stream = _AboveBars()
