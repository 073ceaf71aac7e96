"""Training checkpoints with orbax's CheckpointManager: state pytree plus JSON metadata.

The state is the tutor's params and the optimizer state; the metadata holds the
step, the data position and the tutor's architecture, so a restart resumes the
same run or stops with a clear error when the workdir belongs to another model.
"""
import os

import jax
import orbax.checkpoint as ocp


class CheckpointError(ValueError):
  """A workdir's checkpoint does not fit this run."""


class Checkpoints:
  def __init__(self, workdir: str, keep: int = 3):
    self.directory = os.path.join(os.path.abspath(workdir), "checkpoints")
    self.manager = ocp.CheckpointManager(
        self.directory, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True))

  def latest_step(self):
    return self.manager.latest_step()

  def save(self, step: int, state, meta: dict):
    self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), force=True)
    self.manager.wait_until_finished()

  def restore(self, state_like, model_fingerprint: dict):
    """(step, state, meta) of the latest checkpoint, shaped and sharded like `state_like`."""
    step = self.latest_step()
    meta = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
    if meta.get("model") != model_fingerprint:
      raise CheckpointError(
          f"{self.directory}: the checkpoint at step {step} is of another model "
          f"({meta.get('model')}), not this run's tutor ({model_fingerprint}); use a new workdir")
    target = jax.tree.map(ocp.utils.to_shape_dtype_struct, state_like)
    state = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(target)))["state"]
    return step, state, meta

  def close(self):
    self.manager.close()
