"""Training checkpoints with orbax's CheckpointManager: state pytree plus JSON metadata.

The state is the tutor's params and the optimizer state; the metadata holds the
step, what fixes the run's data order (pedrl.rl.loop's `data_meta`: seed, batch
size, ...), the tutor's architecture and a checksum of every state leaf, so a
restart resumes the same run, stops with a clear error when the workdir belongs
to another model, and never trains on a corrupt file.

A step that cannot be used (missing or truncated files, unreadable metadata,
a checksum that does not match) is reported with its path and moved to
`checkpoints.broken/`; the step before it is tried. A state with a non-finite
value is never saved. Reading a trained tutor's params for evaluation, serving or
export (and the checksums both share) is pedrl.runs'.
"""
import os
import shutil
import time
from typing import Any

import jax
import orbax.checkpoint as ocp
from absl import logging

from pedrl import distributed, runs, sharding
from pedrl.models.config import ModelConfig
from pedrl.runs import CheckpointError, checksums, verify
from pedrl.rl import update


def model_fingerprint(cfg: ModelConfig) -> dict:
  """What must match between a checkpoint and the tutor it is restored into."""
  return {k: getattr(cfg, k) for k in ("model_type", "vocab_size", "hidden_size", "num_layers",
                                       "num_heads", "num_kv_heads", "intermediate_size")}


_all_finite = jax.jit(update.all_finite)


def is_finite(state: Any) -> bool:
  return bool(sharding.to_host(_all_finite(state)))


def _size(n: float) -> str:
  return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


class Checkpoints:
  def __init__(self, workdir: str, keep: int = 3) -> None:
    self.directory = os.path.join(os.path.abspath(workdir), "checkpoints")
    self.broken_directory = self.directory + ".broken"
    self.manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))
    # Restores read with a checkpointer of this process alone: orbax's restore ends at a
    # barrier of every process, which a process whose read failed (its shard file damaged)
    # never reaches; the others would wait there while it asks them whether to go on, and
    # every later collective would pair with the wrong one. Whether a step is usable is
    # agreed after each read instead (`restore`).
    me = jax.process_index()
    self.reader = ocp.Checkpointer(
        ocp.CompositeCheckpointHandler(),
        multiprocessing_options=ocp.options.MultiprocessingOptions(primary_host=me,
                                                                   active_processes={me}))

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def step_path(self, step: int) -> str:
    return os.path.join(self.directory, str(step))

  def save(self, step: int, state: Any, meta: dict) -> None:
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
    # Process 0's disk decides for all: processes that decided apart would part ways here.
    need = sum(x.nbytes for x in jax.tree.leaves(state))
    free = distributed.on_main_process(self._free_bytes)
    if need > free:
      raise CheckpointError(f"not enough space to save step {step} to {self.step_path(step)}: "
                            f"the state is {_size(need)}, {_size(free)} free on that disk")
    try:
      with runs.orbax_errors_muted():
        self.manager.save(step, args=ocp.args.Composite(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)
        self.manager.wait_until_finished()
    except Exception as e:  # A failed write of any kind ends the run with one line.
      raise CheckpointError(f"saving step {step} to {self.step_path(step)} failed ({runs.one_line(e)});"
                            f" {_size(self._free_bytes())} free on that disk") from None

  def _free_bytes(self) -> float:
    """Free space where the checkpoints go (unbounded for paths disk_usage cannot see)."""
    try:
      return shutil.disk_usage(self.directory).free
    except OSError:
      return float("inf")

  def _read(self, step: int, **items) -> Any:
    """This process's read of `items` (orbax restore args) of step `step`: no collective."""
    return self.reader.restore(self.step_path(step), args=ocp.args.Composite(**items))

  def restore(self, state_like: Any, model_fingerprint: dict) -> tuple[int, Any, dict] | None:
    """(step, state, meta) of the newest step that restores and verifies, shaped and sharded
    like `state_like`; None when there is no checkpoint.

    Newer steps that fail are logged with their path and the reason, then moved to
    `checkpoints.broken/` (kept for inspection, out of orbax's way). CheckpointError
    when steps exist but none can be used, or when they belong to another model.
    Several processes read apart and agree after each stage whether the step stands, so
    a read that fails on one process only passes the step over on all of them.
    """
    failures = []
    target = jax.tree.map(ocp.utils.to_shape_dtype_struct, state_like)

    def agreed(step: int, stage) -> tuple[Any, bool]:
      """stage() on every process; (its value, True) unless it failed on any process."""
      value, why = None, None
      try:
        value = stage()
      except CheckpointError:
        raise
      except Exception as e:  # Whatever a damaged directory makes orbax raise.
        why = runs.one_line(e)
      if distributed.any_process(why is not None):
        why = why or "it failed on another process"
        failures.append((step, why))
        logging.warning("checkpoint %s cannot be used (%s); trying the step before",
                        self.step_path(step), why)
        return None, False
      return value, True

    def read_meta(step):
      meta = self._read(step, meta=ocp.args.JsonRestore())["meta"]
      if not isinstance(meta, dict):
        raise ValueError(f"the metadata is {type(meta).__name__}, not an object")
      return meta

    for step in sorted(self.manager.all_steps(), reverse=True):
      with runs.orbax_errors_muted():
        meta, ok = agreed(step, lambda: read_meta(step))
        if not ok:
          continue
        if meta.get("model") != model_fingerprint:  # The same file, read alike everywhere.
          raise CheckpointError(
              f"{self.directory}: the checkpoint at step {step} is of another model "
              f"({meta.get('model')}), not this run's tutor ({model_fingerprint}); use a new "
              "workdir")
        state, ok = agreed(step, lambda: self._read(
            step, state=ocp.args.StandardRestore(target))["state"])
        if not ok:
          continue
      want = meta.get("checksums")
      if want is None:
        logging.warning("%s has no checksums (saved before pedrl verified checkpoints); "
                        "restored unverified", self.step_path(step))
      elif not agreed(step, lambda: verify(state, want))[1]:  # Global sums: alike everywhere.
        continue
      self._set_aside([s for s, _ in failures])
      return step, state, meta
    if failures:
      raise CheckpointError(
          f"no checkpoint in {self.directory} can be restored: " + "; ".join(
              f"step {s}: {why}" for s, why in failures) +
          ". Move the directory away to start afresh.")
    return None

  def _set_aside(self, steps) -> None:
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

  def close(self) -> None:
    self.manager.close()
    self.reader.close()
