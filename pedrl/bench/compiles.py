"""Counting the XLA programs a block of code compiles (or loads from the persistent cache)."""
import contextlib
import dataclasses

import jax

COMPILE = "/jax/core/compile/backend_compile_duration"  # Every program made, cached or not.
CACHE_HIT = "/jax/compilation_cache/cache_hits"


@dataclasses.dataclass
class Programs:
  """The programs made in a block: each one's seconds (compiling it, or reading it from
  the persistent compilation cache) and how many came from that cache."""
  seconds: list = dataclasses.field(default_factory=list)
  cache_hits: int = 0

  def __len__(self) -> int:
    return len(self.seconds)


@contextlib.contextmanager
def compilations():
  """Programs made in the block, from jax's monitoring events."""
  out = Programs()

  def on_duration(event, secs, **_):
    if event == COMPILE:
      out.seconds.append(secs)

  def on_event(event, **_):
    if event == CACHE_HIT:
      out.cache_hits += 1
  jax.monitoring.register_event_duration_secs_listener(on_duration)
  jax.monitoring.register_event_listener(on_event)
  try:
    yield out
  finally:
    jax.monitoring.unregister_event_duration_listener(on_duration)
    jax.monitoring.unregister_event_listener(on_event)
