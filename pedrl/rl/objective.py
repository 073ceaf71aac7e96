"""What a training objective gives the shared update: GRPO, SFT and (M)DPO are three.

The update (pedrl.rl.update.train_step) is one compiled program for any
objective: the batch is cut into micro-batches split over the mesh, each
micro-batch's share of the mini-batch loss is differentiated and summed with
its metric sums (a scan), the gradient is clipped and applied by AdamW, and a
non-finite loss, guarded metric or gradient skips the update. An objective
says only what is specific to it: how its batch is normalised, its loss on
one micro-batch, and which metrics its sums make.

An objective is a frozen dataclass of its settings (hashable: a static
argument of the compiled step). Its batch is a typed pytree of [N, ...] host
arrays (`Batch`): a row is a dialogue (GRPO, SFT) or a preference pair (DPO);
filler rows added to fill a micro-batch carry no loss. Its metrics are a typed
pytree of scalars (`LossStats`, a flax.struct dataclass) made inside the compiled
step; the update returns them in `pedrl.rl.update.UpdateMetrics`. Between its
own `loss` and `metrics` an objective passes named partial sums (a dict: the
scan adds them up whatever they are); nothing outside the objective reads them.
"""
import dataclasses
import typing
from typing import Protocol

import jax
import numpy as np
from flax import linen as nn

# A model's parameter tree and an optimizer's state: nested dicts of arrays. (optax.Params
# names the same, through a forward reference typing.get_type_hints cannot resolve.)
Params = typing.Any
OptState = typing.Any


class Batch(Protocol):
  """Rows of host arrays; each leaf's first axis is the row."""

  @property
  def rows(self) -> int: ...

  def take(self, rows: int | np.ndarray | slice) -> "Batch":
    """The batch of rows `rows` (indices or a slice)."""

  def padded(self, rows: int) -> "Batch":
    """`rows` rows: the batch, then filler rows that carry no loss."""


class LossStats(Protocol):
  """What an objective's loss measured in one update (GRPOMetrics, SFTMetrics, DPOMetrics)."""
  loss: jax.Array  # The mini-batch loss.

  def guarded(self) -> dict[str, jax.Array]:
    """The metrics whose non-finite value skips the update, by name (the gradient norm
    always does)."""

  def to_row(self) -> dict[str, float]:
    """The metrics as metrics.jsonl names them (host values)."""


class Objective(Protocol):
  """A training loss on a typed batch, split into exactly accumulating micro-batches."""
  micro_batch: int  # Rows per gradient computation (rounded up to the mesh's batch shards).

  def totals(self, batch: Batch) -> tuple:
    """Host scalars of the whole mini-batch that normalise every micro-batch's share
    (its token count, its rows), so that the shares add up to the mini-batch loss."""

  def loss(self, model: nn.Module, params: Params, part: Batch,
           totals: tuple) -> tuple[jax.Array, dict[str, jax.Array]]:
    """(this micro-batch's share of the mini-batch loss, {name: sum}): the sums add up
    over micro-batches into what `metrics` reads."""

  def metrics(self, sums: dict[str, jax.Array]) -> LossStats:
    """The update's metrics from the summed `sums` (their "loss": the mini-batch loss)."""


def fields_row(metrics: LossStats) -> dict[str, float]:
  """A metrics dataclass as a row, each field under its own name."""
  return {f.name: float(getattr(metrics, f.name)) for f in dataclasses.fields(metrics)}
