"""Counting the XLA programs a block of code compiles (or loads from the persistent cache)."""
import contextlib
import dataclasses
from collections.abc import Iterator

import jax

from pedrl.engine import compiler, programs

COMPILE = "/jax/core/compile/backend_compile_duration"  # Every program made, cached or not.
CACHE_HIT = "/jax/compilation_cache/cache_hits"
STORED = programs.LOAD_EVENT  # A program read from the program store: no tracing at all.
# Before a program is compiled or found in the persistent cache, jax traces the function
# to a jaxpr and lowers it to StableHLO (the cache's key): a warm start pays both.
TRACE = "/jax/core/compile/jaxpr_trace_duration"
LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"


@dataclasses.dataclass
class Programs:
  """The programs made in a block: each one's seconds (compiling it, or reading it from
  the persistent compilation cache or the program store), how many came from that
  cache and from the store, and the seconds of tracing and lowering the block's jitted
  functions to find or compile them (a program from the store needs neither)."""
  seconds: list = dataclasses.field(default_factory=list)
  cache_hits: int = 0
  stored: int = 0
  traced: float = 0.0
  lowered: float = 0.0

  def __len__(self) -> int:
    return len(self.seconds)


@contextlib.contextmanager
def compilations() -> Iterator[Programs]:
  """Programs made in the block: the engine's compile-event listener
  (`engine.compiler.compilations`) for their seconds, plus jax's cache-hit events."""
  out = Programs()

  def on_event(event, **_) -> None:
    if event == CACHE_HIT:
      out.cache_hits += 1

  def on_duration(event, secs, **_) -> None:
    if event == STORED:
      out.stored += 1
    elif event == TRACE:
      out.traced += secs
    elif event == LOWER:
      out.lowered += secs
  jax.monitoring.register_event_listener(on_event)
  jax.monitoring.register_event_duration_secs_listener(on_duration)
  try:
    with compiler.compilations((COMPILE, STORED)) as seconds:
      out.seconds = seconds  # Filled as the block compiles.
      yield out
  finally:
    jax.monitoring.unregister_event_listener(on_event)
    jax.monitoring.unregister_event_duration_listener(on_duration)
