"""What every training job shares, whatever its objective: GRPO (pedrl.rl.trainer), SFT
and MDPO (pedrl.jobs.offline).

A `Loop` holds the trained params and the optimizer state, applies an
objective's updates over a batch in mini-batches (pedrl.rl.update), saves and
restores checkpoints (verified, with fallback to the step before), keeps the
workdir's records in step with the checkpoint it resumes from, stops after
`max_bad_steps` steps of skipped (non-finite) updates, and on SIGINT/SIGTERM
finishes the step, saves and returns. A subclass says how a step gets its batch
(`train_step`) and what it records (`record`).

Data order is a function of (seed, step) (`items_for_step`): a run resumed from
a checkpoint at step s sees exactly the data of an uninterrupted run. The
checkpoint's metadata keeps what fixes that order, and the run's length where it
shapes the schedule (`data_meta`); a resume with other values is refused.
"""
import dataclasses
from collections.abc import Callable
from typing import Protocol, Sequence, TypeVar

import numpy as np
import optax
from absl import logging

from pedrl import distributed, sharding, stopping, streams
from pedrl.rl import checkpoint as checkpoint_lib, objective as objective_lib, update
from pedrl.rl.update import UpdateMetrics
# Re-exported: defined there, importable without JAX.
from pedrl.rl.settings import LoopSettings


class StepMetrics(Protocol):
  """What the loop reads of a step's metrics (pedrl.rl.trainer.StepMetrics for GRPO,
  pedrl.jobs.offline.OfflineStepMetrics for SFT and MDPO)."""
  step: int
  skipped_updates: int  # Updates of the step skipped as non-finite.
  skipped_values: dict[str, float]  # What the last skipped one measured ({}: none was).

  def to_row(self) -> dict:
    """The step's row of metrics.jsonl."""


class StepOutput(Protocol):
  """What a step hands `record`: its metrics, and whatever else the job writes."""
  metrics: StepMetrics


def skipped(updates: Sequence[UpdateMetrics]) -> tuple[int, dict[str, float]]:
  """(how many of `updates` were skipped, the values that decided the last skip)."""
  skips = [m for m in updates if bool(m.skipped)]
  return len(skips), (skips[-1].guarded() if skips else {})


class TrainingDiverged(RuntimeError):
  """Updates were non-finite `max_bad_steps` steps in a row; the weights were left as they were."""


T = TypeVar("T")


def items_for_step(items: Sequence[T], step: int, batch: int, seed: int,
                   total: int | None = None) -> list[tuple[int, T]]:
  """(positions, items) of step `step`: positions step·batch … of a sequence of seeded
  per-epoch permutations of `items`, cut at `total` positions (None: never)."""
  n = len(items)
  end = (step + 1) * batch if total is None else min((step + 1) * batch, total)
  out = []
  for pos in range(step * batch, end):
    epoch, i = divmod(pos, n)
    out.append((pos, items[int(streams.epoch_order(n, seed, epoch)[i])]))
  return out


def applied_updates(opt_state: objective_lib.OptState) -> int:
  """Optimizer updates applied so far (a skipped one is not): the lr schedule's clock."""
  state = optax.tree_utils.tree_get(opt_state, "ScaleByScheduleState")
  if state is None:
    raise ValueError("the optimizer has no learning-rate schedule state (optax "
                     "scale_by_schedule); build it with pedrl.rl.update.lr_schedule")
  return int(sharding.to_host(state.count))


class Loop:
  """The shared part of a training run; `run()` trains to `steps` (settings.steps).

  settings: LoopSettings with the run's `steps` (TrainSettings for GRPO,
  pedrl.jobs.settings.OfflineSettings for SFT and MDPO). objective: the
  update's (pedrl.rl.objective). seed: the run's (the config's top-level `seed`),
  which orders its data and mini-batches. The trained params are the tutor party's
  (`self.tutor.params`): GRPO's sampler reads them, the update replaces them (its
  input buffers are donated). A subclass implements `data_meta`, `train_step` and
  `record`."""

  def __init__(self, settings: LoopSettings, objective: objective_lib.Objective, tutor,
               optimizer, checkpoints, writer, model_fingerprint: dict, lr_schedule=None, *,
               seed: int) -> None:
    self.settings, self.objective, self.tutor, self.seed = settings, objective, tutor, seed
    self.optimizer, self.ckpt, self.writer = optimizer, checkpoints, writer
    # The optax schedule `optimizer` was built with (applied updates -> lr), for the
    # metrics' `lr`; None: no `lr` column.
    self.lr_schedule = lr_schedule
    self.fingerprint = model_fingerprint
    self.step, self.steps = 0, settings.steps  # Trained to `steps`.
    self.opt_state = update.init_optimizer(optimizer, tutor.params)
    self.stopped_by = None  # Set when run() returned early on a signal.
    self.last: StepMetrics | None = None  # The metrics of the last step run() ran.

  @property
  def params(self) -> objective_lib.Params:
    return self.tutor.params

  def _set_params(self, params) -> None:
    self.tutor = dataclasses.replace(self.tutor, params=params)

  # -- What a subclass provides --------------------------------------------------------------

  def data_meta(self) -> dict:
    """Checkpoint metadata that fixes the data order: a resume must match it."""
    raise NotImplementedError

  def train_step(self) -> StepOutput:
    """One step (its batch, its updates); returns what `record` writes."""
    raise NotImplementedError

  def record(self, out: StepOutput) -> None:
    raise NotImplementedError

  # -- Shared -------------------------------------------------------------------------------

  def restore_if_any(self) -> bool:
    """Restores the newest usable checkpoint (if any); metric rows and other records of
    later steps are dropped either way, since those steps run again."""
    restored = self.ckpt.restore({"params": self.params, "opt_state": self.opt_state},
                                 self.fingerprint)
    if restored is not None:
      step, state, meta = restored
      for key, value in self.data_meta().items():
        if key not in meta:  # Saved by a pedrl that did not record it.
          logging.warning("%s: step %d does not record %s; not compared with this config's %s",
                          self.ckpt.directory, step, key, value)
        elif meta[key] != value:
          raise checkpoint_lib.CheckpointError(
              f"{self.ckpt.directory}: the run was started with {key}={meta.get(key)}, this "
              f"config has {value}; resuming would change its data order or schedule. Use a "
              "new workdir.")
      self._set_params(state["params"])  # Frees the loaded weights.
      self.opt_state, self.step = state["opt_state"], int(step)
    self.writer.resume(self.step)
    return restored is not None

  def save(self) -> None:
    self.ckpt.save(self.step, {"params": self.params, "opt_state": self.opt_state},
                   {"step": self.step, **self.data_meta(), "model": self.fingerprint})

  def update(self, batch: objective_lib.Batch, passes: int = 1,
             mini: int = 0) -> list[UpdateMetrics]:
    """`passes` passes over `batch` in mini-batches of `mini` rows (0: the whole batch;
    seeded order), each one optimizer step of the objective; the metrics of each update."""
    model, mesh = self.tutor.sampler.model, self.tutor.sampler.mesh
    mini = mini or batch.rows
    order = streams.update_order(self.seed, self.step, batch.rows)
    out = []
    for _ in range(passes):
      for lo in range(0, batch.rows, mini):
        params, self.opt_state, m = update.train_step(
            model, self.params, self.opt_state, self.optimizer,
            batch.take(np.sort(order[lo:lo + mini])), self.objective, mesh)
        self._set_params(params)
        out.append(m)
    if not all(bool(m.params_finite) for m in out):
      raise TrainingDiverged(
          f"step {self.step + 1}: an update made some weights non-finite although its loss and "
          "gradients were finite (check the learning rate and adam_eps); nothing of it was "
          "saved")
    return out

  def step_lr(self, updates: Sequence[UpdateMetrics]) -> float | None:
    """The mean learning rate of this step's applied `updates` (0 if all were skipped)."""
    if self.lr_schedule is None:
      return None
    applied = sum(not bool(m.skipped) for m in updates)
    end = applied_updates(self.opt_state)
    return float(np.mean([self.lr_schedule(c) for c in range(end - applied, end)])
                 if applied else 0.0)

  def run(self, progress: Callable[[int, StepMetrics], None] | None = None) -> int:
    """Trains to `self.steps`. On SIGINT or SIGTERM it finishes the step, saves and
    returns early (`stopped_by` names the signal). Raises TrainingDiverged after
    max_bad_steps steps in a row with skipped updates (their weights unchanged; the
    last checkpoint is the last good state). `last` holds the last step's metrics."""
    bad = 0
    with stopping.StopRequest("the current step") as signals:
      while self.step < self.steps:
        out = self.train_step()
        metrics = self.last = out.metrics
        self.record(out)
        bad = bad + 1 if metrics.skipped_updates else 0
        values = ", ".join(f"{k}={v}" for k, v in metrics.skipped_values.items())
        if bad:
          logging.warning("step %d: %d updates skipped, non-finite %s (%d of max_bad_steps=%d "
                          "in a row)", self.step, metrics.skipped_updates, values, bad,
                          self.settings.max_bad_steps)
        if bad >= self.settings.max_bad_steps:
          raise TrainingDiverged(
              f"training diverged: steps {self.step - bad + 1}-{self.step} all had non-finite "
              f"{', '.join(metrics.skipped_values)} (last: {values}); their updates were "
              f"skipped. The last checkpoint is step {self.ckpt.latest_step()}. Lower the "
              "learning rate or check the data.")
        # Hosts may get a signal on either side of a step: they stop at the same one.
        stop = distributed.any_process(signals.requested is not None)
        # No periodic save inside a run of skipped updates: with `keep`, such checkpoints
        # could push out the last one before the trouble began.
        if ((self.step % self.settings.save_every == 0 and not bad) or self.step == self.steps
            or stop):
          self.save()
        if progress is not None:
          progress(self.step, metrics)
        if stop:
          self.stopped_by = signals.requested or "SIGTERM"  # Another host's signal.
          break
    return self.step

