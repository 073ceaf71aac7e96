"""A training run's workdir as the jobs after training read it: its saved steps and the
trained tutor's params, checked against the checksums training saved with them.

Below pedrl.rl and pedrl.eval: evaluation, serving and export read a trained
tutor without the training code; pedrl.rl.checkpoint writes and restores the
whole train state with the same checksums and errors.
"""
from collections.abc import Iterator
import contextlib
import dataclasses
import json
import logging as std_logging
import os
import re
from typing import Any

import jax
import jax.numpy as jnp
import orbax.checkpoint as ocp
from absl import logging

from pedrl import models, sharding
from pedrl.models import decoder, hf_checkpoint


class CheckpointError(ValueError):
  """A workdir's checkpoint does not fit this run, cannot be read, or cannot be written."""


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


def checksums(state: Any) -> dict:
  """{leaf path: checksum of its values}: independent of how orbax lays out the files."""
  values = sharding.to_host(_leaf_checksums(state))
  return {jax.tree_util.keystr(path): int(v)
          for path, v in jax.tree_util.tree_leaves_with_path(values)}


def verify(state: Any, saved: dict) -> None:
  """ValueError unless `state`'s checksums equal `saved` (from a step's metadata)."""
  got = checksums(state)
  bad = sorted(k for k in set(saved) | set(got) if saved.get(k) != got.get(k))
  if bad:
    raise ValueError(f"{len(bad)} of {len(saved)} arrays differ from their saved checksums "
                     f"(first: {bad[0]})")


def one_line(e: BaseException) -> str:
  """An exception as one line (orbax and tensorstore messages run to many), ending with
  the operating system's reason when there is one (tensorstore puts it last)."""
  text = str(e).strip()
  head = text.splitlines()[0][:200] if text else ""
  code = getattr(e, "errno", None)
  if code is None and (m := re.search(r"os_error_code='?(\d+)", text)):
    code = int(m.group(1))
  return f"{type(e).__name__}: {head}" + (f" [{os.strerror(code)}]" if code else "")


class _OrbaxErrors(std_logging.Filter):
  """Orbax logs a failed write with its traceback from a worker thread, then raises: the
  raise reaches `save`, which reports it in one line; the log records are dropped."""

  def filter(self, record):
    return record.levelno < std_logging.ERROR or "/orbax/" not in record.pathname


@contextlib.contextmanager
def orbax_errors_muted() -> Iterator[None]:
  logger, quiet = std_logging.getLogger("absl"), _OrbaxErrors()
  logger.addFilter(quiet)
  try:
    yield
  finally:
    logger.removeFilter(quiet)


def training_run(workdir: str) -> tuple[str, bool, list]:
  """(the tutor's base checkpoint path, the run's scan_layers, its saved steps) of a
  training workdir, from its config.json and checkpoints/ without reading any params."""
  config_path = os.path.join(workdir, "config.json")
  try:
    with open(config_path) as f:
      run = json.load(f)
    base, scan = run["tutor"]["path"], run.get("scan_layers", True)
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise CheckpointError(f"{config_path}: not a training workdir's config ({one_line(e)})") from None
  directory = os.path.join(os.path.abspath(workdir), "checkpoints")
  if not os.path.isdir(directory):
    raise CheckpointError(f"{workdir}: no checkpoints/ directory")
  manager = ocp.CheckpointManager(directory)
  steps = sorted(manager.all_steps())
  manager.close()
  return base, scan, steps


@dataclasses.dataclass(frozen=True)
class TrainedTutor:
  """A tutor as a training run saved it, in the layout asked for."""
  base: str  # The base checkpoint directory: architecture, tokenizer, chat template.
  cfg: models.ModelConfig
  params: dict  # On the mesh asked for (None: the first device).
  step: int


def trained_tutor(workdir: str, step: int | None = None, scan_layers: bool = True,
                  mesh: jax.sharding.Mesh | None = None, **runtime: Any) -> TrainedTutor:
  """The tutor a training workdir saved at `step` (None: the latest), for evaluating,
  serving or exporting it without a copy.

  The run's config.json names the base checkpoint (architecture, tokenizer). The params
  are restored sharded over `mesh` (None: onto the first device), never whole on a host,
  in the dtype and layout the run saved them (float32 for a GRPO run's tutor, whatever
  the base's), checked against their saved checksums, and only then converted to
  `scan_layers` and to the dtype asked for (`runtime`'s, else the base checkpoint's). The
  optimizer state stays on disk.
  """
  base, saved_scan, steps = training_run(workdir)
  step = (steps[-1] if steps else None) if step is None else step
  if step is None or step not in steps:
    raise CheckpointError(f"{workdir}: no checkpoint at step {step}; saved steps: {steps}")
  shapes = hf_checkpoint.abstract_params(models.from_hf(base, scan_layers=saved_scan, **runtime))
  cfg = models.from_hf(base, scan_layers=scan_layers, **runtime)
  want = hf_checkpoint.abstract_params(cfg)
  placed = lambda tree: (sharding.param_shardings(tree, mesh) if mesh is not None else
                         jax.tree.map(lambda _: jax.sharding.SingleDeviceSharding(
                             jax.local_devices()[0]), tree))
  manager = ocp.CheckpointManager(
      os.path.join(os.path.abspath(workdir), "checkpoints"),
      item_handlers={"state": ocp.PyTreeCheckpointHandler(), "meta": ocp.JsonCheckpointHandler()})
  try:
    with orbax_errors_muted():
      try:
        # Each array as it was saved (its checksum is of those bits): the dtypes from the
        # step's own metadata, not the base checkpoint's.
        stored = manager.item_metadata(step)["state"].tree["params"]
        saved = jax.tree.map(lambda leaf, kept, where: jax.ShapeDtypeStruct(
            leaf.shape, kept.dtype, sharding=where), shapes, stored, placed(shapes))
        restored = manager.restore(step, args=ocp.args.Composite(
            state=ocp.args.PyTreeRestore(
                {"params": saved},
                restore_args=ocp.checkpoint_utils.construct_restore_args({"params": saved}),
                partial_restore=True),
            meta=ocp.args.JsonRestore()))
      except Exception as e:  # Whatever a damaged step directory makes orbax raise.
        raise CheckpointError(f"{workdir}: checkpoint step {step} cannot be read "
                              f"({one_line(e)})") from None
  finally:
    manager.close()
  params, meta = restored["state"]["params"], restored["meta"]
  sums = {k: v for k, v in (meta or {}).get("checksums", {}).items() if k.startswith("['params']")}
  if not sums:  # Checkpoints saved before pedrl wrote checksums have none.
    logging.warning("%s step %d has no checksums (saved before pedrl verified checkpoints); "
                    "restored unverified", workdir, step)
  else:
    try:
      verify({"params": params}, sums)
    except ValueError as e:
      raise CheckpointError(f"{workdir}: checkpoint step {step} is corrupt ({e})") from None
  if mesh is not None:
    hf_checkpoint.warn_if_heads_split(base, cfg, mesh.shape.get("tensor", 1))
  return TrainedTutor(base, cfg, _converted(params, saved_scan != scan_layers, want,
                                            placed(want)), step)


def _converted(params: dict, relayer: bool, want: Any, where: Any) -> dict:
  """`params` in the other layer layout if `relayer`, cast to `want`'s dtypes and placed as
  `where` says, in one program; as restored when nothing changes. (A cast cannot reuse the
  restored buffers: both copies are held while it runs, then the restored one is dropped.)"""
  same = jax.tree.map(lambda x, w: x.dtype == w.dtype, params, want) if not relayer else None
  if same is not None and all(jax.tree.leaves(same)):
    return params  # Restored in the saved layout and dtype, already placed as `where`.

  def convert(p):
    if relayer:
      p = (decoder.unstack_layers if "layers" in p else decoder.stack_layers)(p)
    return jax.tree.map(lambda x, w: x.astype(w.dtype), p, want)
  return jax.jit(convert, out_shardings=where)(params)
