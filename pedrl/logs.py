"""One logging setup for every entry point: short lines, routine noise hidden, at the
default verbosity.

A line is `HH:MM:SS message` (`HH:MM:SS warning: message` for a warning); with
--verbosity of 1 or more (absl's flag, also -v 1) it is absl's, with level, date,
thread and file:line. Hidden unless --verbosity is 1 or more: jax's INFO line
about the TPU backend it could not find on machines without one, orbax's INFO
lines (a dozen per checkpoint), httpx's line per API request and matplotlib's
(`generated new fontManager` on its first import). Warnings and errors always
show, each on its own line above the progress bars.
"""
import logging as std_logging
import sys
import time

from absl import flags, logging
from tqdm import tqdm

_QUIET_LIBRARIES = ("httpx", "httpx2", "matplotlib")


def verbose() -> bool:
  """--verbosity is 1 or more: every line, in absl's format."""
  return flags.FLAGS.is_parsed() and flags.FLAGS.verbosity >= 1


class _Noise(std_logging.Filter):

  def filter(self, record) -> bool:
    if record.levelno >= std_logging.WARNING or verbose():
      return True
    if record.name.split(".")[0] in _QUIET_LIBRARIES or "/orbax/" in record.pathname:
      return False
    return not (record.pathname.endswith("xla_bridge.py")
                and "Unable to initialize backend" in record.getMessage())


class _Short(logging.PythonFormatter):
  """The short line, or absl's when verbose."""

  def format(self, record) -> str:
    if verbose():
      return super().format(record)
    text = std_logging.Formatter.format(self, record)  # The message, and a traceback if any.
    level = f"{record.levelname.lower()}: " if record.levelno >= std_logging.WARNING else ""
    return f"{time.strftime('%H:%M:%S', time.localtime(record.created))} {level}{text}"


class _AboveBars:
  """absl's stream, printing through tqdm.write: a log line goes above the jobs' progress
  bars instead of into the middle of one."""

  def write(self, text: str) -> None:
    if text.strip():
      tqdm.write(text.rstrip("\n"), file=sys.stderr)

  def flush(self) -> None:
    sys.stderr.flush()

  def close(self) -> None:  # absl closes its stream at exit; stderr stays open.
    pass


def quiet() -> None:
  """Adds the filter and the short format to absl's handler and routes it above progress
  bars (once)."""
  handler = logging.get_absl_handler()
  if not any(isinstance(f, _Noise) for f in handler.filters):
    handler.addFilter(_Noise())
    handler.setFormatter(_Short())
  if handler.python_handler.stream is sys.stderr:
    handler.python_handler.stream = _AboveBars()
