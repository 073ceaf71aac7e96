"""SIGINT and SIGTERM as a request to stop at the next safe point (after a step or a batch).

A scheduler's SIGTERM (preemption) and a first Ctrl-C both let the job finish
what it is doing, save, and exit with 128 + the signal's number; a second
Ctrl-C stops at once, losing what was not saved.
"""
import signal

from absl import logging

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
  """Context manager; `requested` is the name of the first signal received, or None."""

  def __init__(self, what: str = "the current step") -> None:
    self.what, self.requested, self._previous = what, None, {}

  def _handle(self, signum, _):
    if self.requested is not None and signum == signal.SIGINT:
      raise KeyboardInterrupt  # The second Ctrl-C.
    self.requested = signal.Signals(signum).name
    logging.warning("%s: finishing %s, then saving and stopping (Ctrl-C again stops at once, "
                    "losing what was not saved)", self.requested, self.what)

  def __enter__(self):
    self._previous = {s: signal.signal(s, self._handle) for s in SIGNALS}
    return self

  def __exit__(self, *_) -> None:
    for s, handler in self._previous.items():
      signal.signal(s, handler)
