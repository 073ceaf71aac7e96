"""Per-program XLA options for the engine's jitted functions.

On CPU, XLA hands dots to YNNPACK by default. At decode shapes (16 rows times
a weight matrix streamed from memory) its dots run ~20% slower than XLA's own
(`python -m pedrl.bench.sampling`, 2-core AMD EPYC), while its reductions are
faster, so the engine keeps YNNPACK for reductions only. The option is set per
program (never in XLA_FLAGS, which abort on unknown names) and dropped when
this jaxlib does not know it.

`compilations` measures how much of a block's time went to getting programs
(tracing, lowering, compiling, or reading them from the persistent cache or the
program store, `programs`) rather than running them: throughput figures leave it
out.
"""
import contextlib
import functools

import jax

from pedrl.engine import programs

CPU_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE"}


@functools.cache
def engine_options() -> dict:
  """The compiler options the engine's programs use on this backend ({} if none)."""
  if jax.default_backend() != "cpu":
    return {}
  try:
    jax.jit(lambda x: x + 1, compiler_options=CPU_OPTIONS).lower(1.0).compile()
  except Exception:  # An older or newer jaxlib without the option: use its defaults.
    return {}
  return dict(CPU_OPTIONS)


def jit(fn, **kwargs):
  """jax.jit with the engine's options, compiled on first call (backend known by then);
  its programs go through the program store when one is in use (`programs.use`)."""
  compiled = None
  found = programs.Programs(fn, kwargs)
  programs.code_digest(fn)  # Now, as the engine is imported: the code that will run.

  def get():
    nonlocal compiled
    if compiled is None:
      compiled = jax.jit(fn, compiler_options=engine_options() or None, **kwargs)
    return compiled

  @functools.wraps(fn)
  def call(*args, **kw):
    return found.run(get(), args, kw)

  call.jitted = lambda: compiled
  call.lower = lambda *args, **kw: get().lower(*args, **kw)  # The program the engine runs.
  # Distinct programs this function ran in this process (since `jax.clear_caches` and
  # `programs.forget`): through the store, or jax.jit's own.
  call.programs = lambda: len(found) + (compiled._cache_size() if compiled else 0)
  return call


# What jax reports for getting a program rather than running it, phases that do not
# overlap: tracing, lowering, compiling (which holds reading the persistent cache, so
# the cache's own retrieval event would count twice); and a program read from the store.
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration", programs.LOAD_EVENT)


@contextlib.contextmanager
def compilations(events=COMPILE_EVENTS):
  """The seconds of each of jax's `events` in the block (a list, filled as they come)."""
  seconds = []

  def listen(event, secs, **_):
    if event in events:
      seconds.append(secs)
  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    yield seconds
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)
