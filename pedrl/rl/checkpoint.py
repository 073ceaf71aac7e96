"""Training checkpoints with orbax's CheckpointManager: state pytree plus JSON metadata.

The state is the tutor's params and the optimizer state; the metadata holds the
step, what fixes the run's data order (pedrl.rl.loop's `data_meta`: seed, batch
size, ...), the tutor's architecture and a checksum of every state leaf, so a
restart resumes the same run, stops with a clear error when the workdir belongs
to another model, and never trains on a corrupt file.

A step that cannot be used (missing or truncated files, unreadable metadata,
a checksum that does not match) is reported with its path and moved to
`checkpoints.broken/`; the step before it is tried. A state with a non-finite
value is never saved.
"""
import contextlib
import json
import logging as std_logging
import os
import re
import shutil
import time

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from absl import logging

from pedrl import distributed, models, sharding
from pedrl.models import decoder, hf_checkpoint
from pedrl.rl import update


class CheckpointError(ValueError):
  """A workdir's checkpoint does not fit this run, cannot be read, or cannot be written."""


def model_fingerprint(cfg) -> dict:
  """What must match between a checkpoint and the tutor it is restored into."""
  return {k: getattr(cfg, k) for k in ("model_type", "vocab_size", "hidden_size", "num_layers",
                                       "num_heads", "num_kv_heads", "intermediate_size")}


def _bits(x):
  """The bit patterns of `x` as uint32 (any dtype; 8-byte values as two words)."""
  if x.dtype == jnp.bool_ or x.dtype.itemsize == 1:
    return x.astype(jnp.uint32)
  width = {2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint32}[x.dtype.itemsize]
  return jax.lax.bitcast_convert_type(x, width).astype(jnp.uint32)


def _positions(shape):
  """Each element's flat index mod 2³², built from per-axis iotas (uint32 arithmetic wraps):
  no reshape, which would regather a sharded array, and no overflow past 2³² elements."""
  index = jnp.zeros(shape, jnp.uint32)
  for axis, size in enumerate(shape):
    index = index * jnp.uint32(size) + jax.lax.broadcasted_iota(jnp.uint32, shape, axis)
  return index


@jax.jit
def _leaf_checksums(tree):
  def one(x):
    bits = _bits(x)
    # Σ bits·(2i + 1) mod 2³²: the weights are odd, so changing any single value always
    # changes the sum, and moving values between positions changes it too.
    return jnp.sum(bits * (_positions(bits.shape) * 2 + 1), dtype=jnp.uint32)
  return jax.tree.map(one, tree)


def checksums(state) -> dict:
  """{leaf path: checksum of its values}: independent of how orbax lays out the files."""
  values = sharding.to_host(_leaf_checksums(state))
  return {jax.tree_util.keystr(path): int(v)
          for path, v in jax.tree_util.tree_leaves_with_path(values)}


_all_finite = jax.jit(update.all_finite)


def is_finite(state) -> bool:
  return bool(sharding.to_host(_all_finite(state)))


def verify(state, saved: dict) -> None:
  """ValueError unless `state`'s checksums equal `saved` (from a step's metadata)."""
  got = checksums(state)
  bad = sorted(k for k in set(saved) | set(got) if saved.get(k) != got.get(k))
  if bad:
    raise ValueError(f"{len(bad)} of {len(saved)} arrays differ from their saved checksums "
                     f"(first: {bad[0]})")


def _short(e: BaseException) -> str:
  """An exception as one line (orbax and tensorstore messages run to many), ending with
  the operating system's reason when there is one (tensorstore puts it last)."""
  text = str(e).strip()
  head = text.splitlines()[0][:200] if text else ""
  code = getattr(e, "errno", None)
  if code is None and (m := re.search(r"os_error_code='?(\d+)", text)):
    code = int(m.group(1))
  return f"{type(e).__name__}: {head}" + (f" [{os.strerror(code)}]" if code else "")


def _size(n: float) -> str:
  return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


class _OrbaxErrors(std_logging.Filter):
  """Orbax logs a failed write with its traceback from a worker thread, then raises: the
  raise reaches `save`, which reports it in one line; the log records are dropped."""

  def filter(self, record):
    return record.levelno < std_logging.ERROR or "/orbax/" not in record.pathname


@contextlib.contextmanager
def _orbax_errors_muted():
  logger, quiet = std_logging.getLogger("absl"), _OrbaxErrors()
  logger.addFilter(quiet)
  try:
    yield
  finally:
    logger.removeFilter(quiet)


class Checkpoints:
  def __init__(self, workdir: str, keep: int = 3):
    self.directory = os.path.join(os.path.abspath(workdir), "checkpoints")
    self.broken_directory = self.directory + ".broken"
    self.manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

  def latest_step(self):
    return self.manager.latest_step()

  def step_path(self, step: int) -> str:
    return os.path.join(self.directory, str(step))

  def save(self, step: int, state, meta: dict):
    """Writes `state` and `meta` (plus the state's checksums) as step `step`.

    Raises CheckpointError, with the path and the free space, when the state has a
    non-finite value, does not fit in the free space, or the write fails: one line, not
    a traceback.
    """
    if not is_finite(state):
      raise CheckpointError(f"refusing to save step {step} to {self.step_path(step)}: the "
                            "state has non-finite values (the last saved step is kept)")
    meta = dict(meta, checksums=checksums(state))
    # A write that fails part-way leaves tensorstore's other writes failing in the background
    # (tracebacks past our control); a disk too small for the state is told before writing.
    need, free = sum(x.nbytes for x in jax.tree.leaves(state)), self._free_bytes()
    if need > free:
      raise CheckpointError(f"not enough space to save step {step} to {self.step_path(step)}: "
                            f"the state is {_size(need)}, {_size(free)} free on that disk")
    try:
      with _orbax_errors_muted():
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)
        self.manager.wait_until_finished()
    except Exception as e:  # A failed write of any kind ends the run with one line.
      raise CheckpointError(f"saving step {step} to {self.step_path(step)} failed ({_short(e)});"
                            f" {_size(self._free_bytes())} free on that disk") from None

  def _free_bytes(self) -> float:
    """Free space where the checkpoints go (unbounded for paths disk_usage cannot see)."""
    try:
      return shutil.disk_usage(self.directory).free
    except OSError:
      return float("inf")

  def _restore_step(self, step: int, state_like, model_fingerprint: dict):
    meta = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    if not isinstance(meta, dict):
      raise ValueError(f"the metadata is {type(meta).__name__}, not an object")
    if meta.get("model") != model_fingerprint:
      raise CheckpointError(
          f"{self.directory}: the checkpoint at step {step} is of another model "
          f"({meta.get('model')}), not this run's tutor ({model_fingerprint}); use a new workdir")
    target = jax.tree.map(ocp.utils.to_shape_dtype_struct, state_like)
    state = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(target)))["state"]
    want = meta.get("checksums")
    if want is None:
      logging.warning("%s has no checksums (saved before pedrl verified checkpoints); "
                      "restored unverified", self.step_path(step))
    else:
      verify(state, want)
    return state, meta

  def restore(self, state_like, model_fingerprint: dict):
    """(step, state, meta) of the newest step that restores and verifies, shaped and sharded
    like `state_like`; None when there is no checkpoint.

    Newer steps that fail are logged with their path and the reason, then moved to
    `checkpoints.broken/` (kept for inspection, out of orbax's way). CheckpointError
    when steps exist but none can be used, or when they belong to another model.
    """
    failures = []
    for step in sorted(self.manager.all_steps(), reverse=True):
      try:
        state, meta = self._restore_step(step, state_like, model_fingerprint)
      except CheckpointError:
        raise
      except Exception as e:  # Whatever a damaged directory makes orbax raise.
        failures.append((step, _short(e)))
        logging.warning("checkpoint %s cannot be used (%s); trying the step before",
                        self.step_path(step), _short(e))
        continue
      self._set_aside([s for s, _ in failures])
      return step, state, meta
    if failures:
      raise CheckpointError(
          f"no checkpoint in {self.directory} can be restored: " + "; ".join(
              f"step {s}: {why}" for s, why in failures) +
          ". Move the directory away to start afresh.")
    return None

  def _set_aside(self, steps):
    """Moves broken steps out of the manager's directory (a later save may reuse the number)."""
    if not steps:
      return
    if distributed.is_main_process():
      os.makedirs(self.broken_directory, exist_ok=True)
      for step in steps:
        target = os.path.join(self.broken_directory, f"{step}.{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.move(self.step_path(step), target)
        logging.warning("moved the broken checkpoint %s to %s", self.step_path(step), target)
    distributed.barrier("checkpoints_set_aside")
    self.manager.reload()

  def close(self):
    self.manager.close()


def training_run(workdir: str) -> tuple[str, bool, list]:
  """(the tutor's base checkpoint path, the run's scan_layers, its saved steps) of a
  training workdir, from its config.json and checkpoints/ without reading any params."""
  config_path = os.path.join(workdir, "config.json")
  try:
    with open(config_path) as f:
      run = json.load(f)
    base, scan = run["tutor"]["path"], run.get("scan_layers", True)
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise CheckpointError(f"{config_path}: not a training workdir's config ({_short(e)})") from None
  directory = os.path.join(os.path.abspath(workdir), "checkpoints")
  if not os.path.isdir(directory):
    raise CheckpointError(f"{workdir}: no checkpoints/ directory")
  manager = ocp.CheckpointManager(directory)
  steps = sorted(manager.all_steps())
  manager.close()
  return base, scan, steps


def trained_tutor(workdir: str, step: int | None = None, scan_layers: bool = True, mesh=None,
                  **runtime):
  """(base checkpoint path, config, params, step) of the tutor a training workdir saved
  at `step` (None: the latest), for evaluating or exporting it without a copy.

  The run's config.json names the base checkpoint (architecture, tokenizer); the
  params are restored in the layout the run saved (its scan_layers), converted to
  `scan_layers`, checked against their saved checksums and placed on `mesh`
  (None: the first device). The optimizer state stays on disk.
  """
  base, saved_scan, steps = training_run(workdir)
  step = (steps[-1] if steps else None) if step is None else step
  if step is None or step not in steps:
    raise CheckpointError(f"{workdir}: no checkpoint at step {step}; saved steps: {steps}")
  manager = ocp.CheckpointManager(os.path.join(os.path.abspath(workdir), "checkpoints"))
  try:
    saved_cfg = models.from_hf(base, scan_layers=saved_scan, **runtime)
    abstract = hf_checkpoint.abstract_params(saved_cfg)
    target = {"params": abstract}
    with _orbax_errors_muted():
      try:
        restored = manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.PyTreeRestore(
                target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
                partial_restore=True),
            meta=ocp.args.JsonRestore()))
      except Exception as e:  # Whatever a damaged step directory makes orbax raise.
        raise CheckpointError(f"{workdir}: checkpoint step {step} cannot be read "
                              f"({_short(e)})") from None
  finally:
    manager.close()
  params, meta = restored["state"]["params"], restored["meta"]
  saved = {k: v for k, v in (meta or {}).get("checksums", {}).items() if k.startswith("['params']")}
  if not saved:  # Checkpoints saved before pedrl wrote checksums have none.
    logging.warning("%s step %d has no checksums (saved before pedrl verified checkpoints); "
                    "restored unverified", workdir, step)
  else:
    try:
      verify({"params": params}, saved)
    except ValueError as e:
      raise CheckpointError(f"{workdir}: checkpoint step {step} is corrupt ({e})") from None
  if saved_scan != scan_layers:
    params = (decoder.stack_layers if scan_layers else decoder.unstack_layers)(params)
  cfg = models.from_hf(base, scan_layers=scan_layers, **runtime)
  if mesh is not None:
    params = jax.device_put(params, sharding.param_shardings(params, mesh))
  return base, cfg, params, step
