"""Compiled programs kept on disk, found by what a call is, before jax traces anything.

JAX's persistent compilation cache keys a program by its lowered StableHLO, so a
job's second start still traces and lowers every jitted function to find its
programs: 2.8 s tracing and 0.9 s lowering of a 6.0 s warm warm-up on an H100
(`python -m pedrl.bench.rollout`, docs/performance.md). The store keys a program by
what the call is instead: the function, its static arguments, the structure,
shapes, dtypes and placements of its array arguments, and what else shapes the
program: the source files it can be traced from (`TRACED_CODE`, read when the
engine is imported), the versions of jax, jaxlib, flax, numpy and ml_dtypes, the
devices, jax's configuration when the first program is looked up and the calling
thread's jit settings, XLA_FLAGS. A hit deserializes the executable
(`jax.experimental.serialize_executable`) and runs it; a miss compiles the call
afresh and writes it. Each call pays ~0.2-0.6 ms for its key (the engine's calls run
for milliseconds to seconds).

Not in the key: code outside `TRACED_CODE` that a jitted function reaches through
its arguments (pedrl's engine functions reach none), and jax settings changed after
the first lookup that jax's own jit cache does not key on either. A call with
static arguments printed by address or passed by keyword, traced arguments, or under
`jax.disable_jit` skip the store. In a job of several processes each process keeps
its own executables (its index is in the key): jax writes its persistent cache from
process 0 only, so without the store every other host would compile every program at
each start. An unreadable file is compiled anew and replaced. The store is trusted
like jax's cache (loading an executable can run its code): a folder that another user
owns or can write is not used.
"""
from collections.abc import Callable, Sequence
import functools
import glob
import hashlib
import os
import pickle
import re
import tempfile
import threading
import time
from typing import Any
import weakref

from absl import logging
import jax
from jax.experimental import serialize_executable

from pedrl import environ

# A program read from the store, in jax's monitoring events (beside jax's own compile
# events, so a count of the programs a block made sees both).
LOAD_EVENT = "/pedrl/program_store/load_duration"
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# The code an engine program can be traced from: the engine, the models, the top-level
# modules they import; and the jitted function's own module.
TRACED_CODE = ("engine/**/*.py", "models/**/*.py", "__init__.py", "sharding.py", "streams.py")


@functools.cache
def sources_digest(root: str = _PACKAGE, patterns: Sequence[str] = TRACED_CODE,
                   extra: str = "") -> str:
  """sha256 of the .py files under `root` that `patterns` match, and of `extra` (a file
  path), paths and contents: an edit there changes every key."""
  paths = {p for pattern in patterns
           for p in glob.glob(os.path.join(root, pattern), recursive=True)}
  h = hashlib.sha256()
  for path in sorted(paths | ({os.path.abspath(extra)} if extra else set())):
    h.update(os.path.relpath(path, root).encode())
    with open(path, "rb") as f:
      h.update(hashlib.sha256(f.read()).digest())
  return h.hexdigest()


@functools.cache
def _environment() -> str:
  """What besides the call shapes its program: versions, devices, config, flags."""
  import flax
  import jaxlib
  import ml_dtypes
  import numpy
  versions = [m.__version__ for m in (jax, jaxlib, flax, numpy, ml_dtypes)]
  # The job's whole device list: a program of a pod's process is compiled for all of them;
  # and which process this is: each loads the executable compiled for its own devices.
  devices = [(d.id, d.platform, d.device_kind, d.process_index) for d in jax.devices()]
  devices.append(("process", jax.process_index(), jax.process_count()))
  platform = getattr(jax.local_devices()[0].client, "platform_version", "")
  config = sorted((k, repr(v)) for k, v in jax.config.values.items())
  flags = [os.environ.get(name) for name in ("XLA_FLAGS", "LIBTPU_INIT_ARGS")]
  return repr((versions, jax.default_backend(), platform, devices, config, flags))


def _context() -> str:
  """jax's settings of this thread that its own jit cache keys on (a
  `jax.default_matmul_precision` block, ...), objects printed by address left out."""
  try:
    from jax._src import config
    values = config.trace_context()
  except (ImportError, AttributeError):  # Not in this jax: its global config still counts.
    return ""
  return repr(tuple(r for r in map(repr, values) if " at 0x" not in r))


@functools.lru_cache(maxsize=256)
def _placement(sharding) -> str:
  """Where an argument lives: its sharding and the devices in their order."""
  devices = getattr(sharding, "_device_assignment", None) or sorted(
      d.id for d in sharding.device_set)
  return f"{sharding!r}@{[getattr(d, 'id', d) for d in devices]}"


def _argument(x) -> tuple:
  """What of an argument shapes the program: its type (shape, dtype, weak typing) and
  placement (none for host values, which jax puts on the default device)."""
  if isinstance(x, (bool, int, float, complex)):
    return (type(x).__name__,)  # Weakly typed scalars.
  sharding = getattr(x, "sharding", None)
  return (x.shape, str(x.dtype), getattr(x, "weak_type", False),
          "" if sharding is None else _placement(sharding))


def code_digest(fn: Callable) -> str:
  """The digest of the code `fn`'s programs are traced from (`TRACED_CODE` and fn's
  file), taken once per process: `compiler.jit` asks when the engine is imported, so
  keys describe the code that runs, even if the files change later."""
  return sources_digest(extra=getattr(getattr(fn, "__code__", None), "co_filename", ""))


@functools.lru_cache(maxsize=4096)
def _head(fn, options: str, statics: tuple, tree) -> str | None:
  """The printed function, jit options, static arguments (hashable, as jit requires)
  and argument structure; None if they print an address (no stable key)."""
  head = repr((fn.__module__, fn.__qualname__, options, statics, str(tree), code_digest(fn)))
  return None if " at 0x" in head else hashlib.sha256(head.encode()).hexdigest()


def call_key(fn: Callable, jit_kwargs: dict, args: tuple, kwargs: dict) -> str | None:
  """The store's key of fn(*args, **kwargs) jitted with `jit_kwargs`; None when the
  call has no stable key (an address in a static argument, static argument names)."""
  if "static_argnames" in jit_kwargs or kwargs or jax.config.jax_disable_jit:
    return None  # Keyword arguments may be static ones; no jit: jax.jit's own path.
  static = set(jit_kwargs.get("static_argnums", ()))
  statics = tuple((i, a) for i, a in enumerate(args) if i in static)
  dynamic = [a for i, a in enumerate(args) if i not in static]
  leaves, tree = jax.tree.flatten((dynamic, kwargs))
  if any(isinstance(x, jax.core.Tracer) for x in leaves):
    return None  # Called inside another transformation: jax.jit's own path.
  head = _head(fn, repr(sorted((k, repr(v)) for k, v in jit_kwargs.items())), statics, tree)
  if head is None:
    return None
  avals = [_argument(x) for x in leaves]
  return hashlib.sha256(repr((_environment(), _context(), head, avals)).encode()).hexdigest()


def _device_ids(compiled) -> list[int]:
  """The ids of the devices a compiled program runs on, in its order."""
  for sharding in jax.tree.leaves((compiled.input_shardings, compiled.output_shardings)):
    if assignment := getattr(sharding, "_device_assignment", None):
      return [d.id for d in assignment]
  return [jax.local_devices()[0].id]  # Host values go to this process's default device.


_STORED = re.compile(r"[0-9a-f]{64}\.pkl")  # A key's file; nothing else is removed.


class Store:
  """Executables under `directory`, one file per key (written whole, then renamed); past
  `max_bytes` (None or 0: no limit), a write removes the least recently used ones."""

  def __init__(self, directory: str, max_bytes: int | None = None) -> None:
    self.directory = directory
    self.max_bytes = max_bytes
    self._warned = False

  def _path(self, key: str) -> str:
    return os.path.join(self.directory, key[:2], key + ".pkl")

  def load(self, key: str) -> jax.stages.Compiled | None:
    """The stored program, or None (none, or unreadable: it is compiled again)."""
    path = self._path(key)
    if not os.path.exists(path):
      return None
    start = time.perf_counter()
    try:
      with open(path, "rb") as f:
        payload, in_tree, out_tree, device_ids = pickle.load(f)
      by_id = {d.id: d for d in jax.devices()}
      # The devices it was compiled for, in order (the key holds the arguments' devices):
      # by default jax would load it for all of them, and XLA aborts on a mismatch.
      program = serialize_executable.deserialize_and_load(
          payload, in_tree, out_tree, execution_devices=[by_id[i] for i in device_ids])
    except Exception as e:  # A file from another jaxlib, cut short, ...: compile anew.
      logging.warning("program store: %s is unreadable (%s: %s); compiling it again", path,
                      type(e).__name__, e)
      return None
    jax.monitoring.record_event_duration_secs(LOAD_EVENT, time.perf_counter() - start)
    try:
      os.utime(path)  # Its last use, for the eviction.
    except OSError:
      pass
    return program

  def save(self, key: str, compiled: jax.stages.Compiled) -> None:
    try:
      blob = pickle.dumps((*serialize_executable.serialize(compiled), _device_ids(compiled)))
    except Exception as e:  # Some executables cannot be serialized: they are just not kept.
      if not self._warned:
        self._warned = True
        logging.warning("program store: a program cannot be serialized (%s: %s); such "
                        "programs are compiled at every start", type(e).__name__, e)
      return
    path, tmp = self._path(key), None
    try:
      os.makedirs(os.path.dirname(path), exist_ok=True)
      fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
      with os.fdopen(fd, "wb") as f:
        f.write(blob)
      os.replace(tmp, path)
    except OSError as e:  # A full disk, a quota: the call goes on, the program is not kept.
      logging.warning("program store: could not write %s (%s)", path, e)
      if tmp and os.path.exists(tmp):
        os.unlink(tmp)
      return
    self._evict(keep=path)

  def _evict(self, keep: str) -> None:
    """Removes the least recently used programs until the store is under max_bytes, and
    temporary files a killed write left (over an hour old)."""
    if not self.max_bytes:
      return
    files, now = [], time.time()
    for folder, _, names in os.walk(self.directory):
      for name in names:
        path = os.path.join(folder, name)
        try:
          st = os.stat(path)
          if name.endswith(".tmp") and now - st.st_mtime > 3600:
            os.unlink(path)
        except OSError:  # Removed meanwhile by another process.
          continue
        if _STORED.fullmatch(name) and path != keep:
          files.append((st.st_mtime, st.st_size, path))
    try:
      total = os.path.getsize(keep)
    except OSError:  # Another process's eviction took it already.
      total = 0
    total += sum(size for _, size, _ in files)
    for _, size, path in sorted(files):
      if total <= self.max_bytes:
        break
      try:
        os.unlink(path)
        total -= size
      except OSError:
        pass


ENV = "PEDRL_PROGRAM_STORE"  # "off": none; a directory: there instead.
FOLDER = "pedrl-programs"  # The store's place in jax's compilation cache directory.
_UNSET = object()
_store = _UNSET


def use(directory: str | None, limit: int | None = -1) -> None:
  """Keeps the engine's programs in `directory` (None, "" or "off": none), in at most
  `limit` bytes (None or 0: no limit; -1: $PEDRL_PROGRAM_STORE_MAX_GIB, 4 GiB unless
  set). Without a call: $PEDRL_PROGRAM_STORE, else the `pedrl-programs` folder of jax's
  compilation cache directory when one is set (`cli.use_compilation_cache`), looked up
  when the first program is needed."""
  global _store
  if not directory or directory == "off":
    _store = None
    return
  _store = Store(directory, environ.program_store_max_bytes() if limit == -1 else limit)


def reset() -> None:
  """Forgets `use`: the next lookup finds the store's directory again."""
  global _store
  _store = _UNSET


def _trusted(directory: str) -> bool:
  """Whether a store folder is the user's own: created if missing; refused (with a
  warning) when another user owns it or others may write it."""
  try:
    os.makedirs(directory, mode=0o700, exist_ok=True)
    st = os.stat(directory)
  except OSError as e:
    logging.warning("program store: %s is not usable (%s); programs are not kept", directory, e)
    return False
  if (hasattr(os, "getuid") and st.st_uid != os.getuid()) or st.st_mode & 0o022:
    logging.warning("program store: %s is not the user's own folder (owner or write "
                    "permissions); programs are not kept", directory)
    return False
  return True


def store() -> Store | None:
  """The store in use, if any (in a job of several processes, each process's own
  executables: `_environment` keys them by the process)."""
  global _store
  if _store is _UNSET:
    chosen = os.environ.get(ENV)
    if chosen is None and jax.config.jax_compilation_cache_dir:
      chosen = os.path.join(jax.config.jax_compilation_cache_dir, FOLDER)
    use(chosen if chosen in (None, "", "off") or _trusted(chosen) else None)
  return _store


def _fresh(lowered):
  """The lowered program compiled by XLA now, neither read from nor written to jax's
  persistent cache: on XLA:CPU (jaxlib 0.10) an executable that jax read from its cache
  (in this process or earlier in it) serializes without its kernels, and the stored copy
  fails when it runs ("Function ... not found"). An option that changes jax's cache key
  and nothing else keeps it from being found there; this thread's minimum compile time
  for writing it, from being written. The option is the same on every process of a job,
  so their compiles of one program agree (a GPU's autotuning may share results between
  them); it differs per compile only where jax cannot be kept from writing the entry."""
  try:
    from jax._src import config
    unwritten = config.persistent_cache_min_compile_time_secs(float("inf"))
  except (ImportError, AttributeError):  # Not in this jax: written, never read again.
    nonce = f"pedrl-program-store-{os.getpid()}-{time.time_ns()}"
    return lowered.compile(compiler_options={"xla_dump_emitter_re": nonce})
  with unwritten:  # Never written to jax's cache, so never read from it either.
    return lowered.compile(compiler_options={"xla_dump_emitter_re": "pedrl-program-store"})


_every = weakref.WeakSet()


def forget() -> None:
  """Drops the programs found in this process (as `jax.clear_caches` drops jax's):
  the next calls look in the store again, as a new process would."""
  for p in list(_every):
    p._found.clear()


class Programs:
  """One jitted function's programs through the store: `run(jitted, args, kwargs)`
  finds (in this process, then on disk) or compiles the call's program and runs it."""

  def __init__(self, fn, jit_kwargs: dict) -> None:
    self.fn, self.jit_kwargs = fn, jit_kwargs
    self._found = {}
    self._lock = threading.Lock()
    _every.add(self)

  def __len__(self) -> int:
    """Programs found or compiled through the store in this process."""
    return len(self._found)

  def run(self, jitted: Callable, args: tuple, kwargs: dict) -> Any:
    disk = store()
    key = None if disk is None else call_key(self.fn, self.jit_kwargs, args, kwargs)
    if key is None:
      return jitted(*args, **kwargs)
    program = self._found.get(key)
    if program is None:
      with self._lock:
        program = self._found.get(key) or disk.load(key)
        if program is None:
          program = _fresh(jitted.lower(*args, **kwargs))
          disk.save(key, program)
        self._found[key] = program
    static = set(self.jit_kwargs.get("static_argnums", ()))
    return program(*(a for i, a in enumerate(args) if i not in static), **kwargs)
