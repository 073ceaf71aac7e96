"""Supervised fine-tuning on accepted dialogues (paper 003's SFT baseline, A.3).

The next-token loss of the tutor's tokens, averaged over every counted token of
the mini-batch (pedrl.rl.offline_data.sequence says which count: by default the
tutor's sampled tokens, the student's and the template's masked). The batch is
a `pedrl.rl.batch.SequenceBatch`, padded to a length bucket; no packing.
"""
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax import struct

from pedrl.rl import batch as batch_lib, objective as objective_lib, update
from pedrl.rl.settings import SFTSettings


def token_nll(logp: jax.Array, mask: jax.Array) -> jax.Array:
  """−Σ_t m_t log π(y_t | y_<t): the summed negative log-likelihood of the counted tokens
  (divided by the mini-batch's count, the mean next-token cross-entropy)."""
  return -(logp * mask.astype(jnp.float32)).sum()


@struct.dataclass
class SFTMetrics:
  loss: jax.Array  # Mean NLL per counted token.
  tutor_tokens: jax.Array  # Tokens counted.

  def guarded(self) -> dict[str, jax.Array]:
    return {"loss": self.loss}

  def to_row(self) -> dict[str, float]:
    return objective_lib.fields_row(self)


@dataclasses.dataclass(frozen=True)
class SFTObjective(SFTSettings):
  """The SFT objective (pedrl.rl.objective) on a SequenceBatch: mean NLL per counted token."""

  def totals(self, batch: batch_lib.SequenceBatch) -> tuple:
    return (max(np.asarray(batch.loss_mask).sum(), 1),)

  def loss(self, model: nn.Module, params: objective_lib.Params, part: batch_lib.SequenceBatch,
           totals: tuple) -> tuple[jax.Array, dict[str, jax.Array]]:
    (num_tokens,) = totals
    logp = update.policy_logprobs(model, params, part.tokens, part.attn_mask, 1.0)
    nll = token_nll(logp, part.loss_mask)
    return nll / num_tokens, {"tokens": part.loss_mask.sum().astype(jnp.float32)}

  def metrics(self, sums: dict) -> SFTMetrics:
    return SFTMetrics(loss=sums["loss"], tutor_tokens=sums["tokens"])
