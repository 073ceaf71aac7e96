"""One logging setup for every entry point: routine noise hidden at the default verbosity.

Hidden unless --verbosity is 1 or more (absl's flag, also -v 1): jax's INFO line
about the TPU backend it could not find on machines without one, orbax's INFO
lines (a dozen per checkpoint) and httpx's line per API request. Warnings and
errors always show.
"""
import logging as std_logging

from absl import app, flags, logging


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


def quiet() -> None:
  """Adds the filter to absl's handler (once)."""
  handler = logging.get_absl_handler()
  if not any(isinstance(f, _Noise) for f in handler.filters):
    handler.addFilter(_Noise())


def run(main) -> None:
  """`absl.app.run(main)` with the quiet setup."""
  quiet()
  app.run(main)
