"""Per-program XLA options for the engine's jitted functions.

On CPU, XLA hands dots to YNNPACK by default. At decode shapes (16 rows times
a weight matrix streamed from memory) its dots run ~20% slower than XLA's own
(`python -m pedrl.bench.sampling`, 2-core AMD EPYC), while its reductions are
faster, so the engine keeps YNNPACK for reductions only. The option is set per
program (never in XLA_FLAGS, which abort on unknown names) and dropped when
this jaxlib does not know it.

On a GPU, XLA times several kernels for each fusion and convolution while it compiles
(autotuning): seconds of a cold start's compile time. $PEDRL_GPU_AUTOTUNE_LEVEL (0-4;
XLA's `xla_gpu_autotune_level`, 0: no autotuning, faster compiles and maybe slower
kernels; unset: XLA's default) sets it for the engine's programs, as a per-program
option too, so a jaxlib that does not know it only drops it, with a warning. The
options are part of the program store's key.

`compilations` measures how much of a block's time went to getting programs
(tracing, lowering, compiling, or reading them from the persistent cache or the
program store, `programs`) rather than running them: throughput figures leave it
out.
"""
from collections.abc import Callable, Iterator, Sequence
import contextlib
import functools
import os
from typing import Any

from absl import logging
import jax

from pedrl.engine import programs

CPU_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_REDUCE"}
GPU_AUTOTUNE_ENV = "PEDRL_GPU_AUTOTUNE_LEVEL"
GPU_AUTOTUNE_OPTION = "xla_gpu_autotune_level"


def gpu_autotune_level() -> int | None:
  """$PEDRL_GPU_AUTOTUNE_LEVEL as XLA's autotuning level (None: unset, XLA's default);
  a ValueError naming it for anything but 0-4."""
  value = os.environ.get(GPU_AUTOTUNE_ENV, "").strip()
  if not value:
    return None
  if value not in ("0", "1", "2", "3", "4"):
    raise ValueError(f"${GPU_AUTOTUNE_ENV}={value!r}: give XLA's GPU autotuning level, an "
                     "integer 0-4 (0: no autotuning), or leave it unset for XLA's default")
  return int(value)


def _backend() -> str:
  return jax.default_backend()


def _known(options: dict) -> bool:
  """Whether this jaxlib compiles a program with `options`."""
  try:
    jax.jit(lambda x: x + 1, compiler_options=options).lower(1.0).compile()
  except Exception:  # An older or newer jaxlib without the option.
    return False
  return True


@functools.cache
def engine_options() -> dict:
  """The compiler options the engine's programs use on this backend ({} if none)."""
  level = gpu_autotune_level()  # Checked on every backend: a typo fails on a CPU too.
  backend = _backend()
  if backend == "cpu":
    return dict(CPU_OPTIONS) if _known(CPU_OPTIONS) else {}  # Else this jaxlib's defaults.
  if backend in ("gpu", "cuda", "rocm") and level is not None:
    options = {GPU_AUTOTUNE_OPTION: level}
    if _known(options):
      return options
    logging.warning("%s=%d: this jaxlib does not know XLA's %s; compiling with its default",
                    GPU_AUTOTUNE_ENV, level, GPU_AUTOTUNE_OPTION)
  return {}


def jit(fn: Callable, **kwargs: Any) -> Callable:
  """jax.jit with the engine's options, compiled on first call (backend known by then);
  its programs go through the program store when one is in use (`programs.use`)."""
  compiled = found = None
  programs.code_digest(fn)  # Now, as the engine is imported: the code that will run.

  def get():
    nonlocal compiled, found
    if compiled is None:
      options = engine_options()
      # The store keys a program by its jit arguments: the options shape it too.
      found = programs.Programs(fn, {**kwargs, "compiler_options": options} if options
                                else kwargs)
      compiled = jax.jit(fn, compiler_options=options or None, **kwargs)
    return compiled

  @functools.wraps(fn)
  def call(*args, **kw):
    jitted = get()
    return found.run(jitted, args, kw)

  call.jitted = lambda: compiled
  call.lower = lambda *args, **kw: get().lower(*args, **kw)  # The program the engine runs.
  # Distinct programs this function ran in this process (since `jax.clear_caches` and
  # `programs.forget`): through the store, or jax.jit's own.
  call.programs = lambda: (len(found) + compiled._cache_size()) if compiled else 0
  return call


# What jax reports for getting a program rather than running it, phases that do not
# overlap: tracing, lowering, compiling (which holds reading the persistent cache, so
# the cache's own retrieval event would count twice); and a program read from the store.
COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                  "/jax/core/compile/jaxpr_to_mlir_module_duration",
                  "/jax/core/compile/backend_compile_duration", programs.LOAD_EVENT)


@contextlib.contextmanager
def compilations(events: Sequence[str] = COMPILE_EVENTS) -> Iterator[list[float]]:
  """The seconds of each of jax's `events` in the block (a list, filled as they come)."""
  seconds = []

  def listen(event, secs, **_) -> None:
    if event in events:
      seconds.append(secs)
  jax.monitoring.register_event_duration_secs_listener(listen)
  try:
    yield seconds
  finally:
    jax.monitoring.unregister_event_duration_listener(listen)
