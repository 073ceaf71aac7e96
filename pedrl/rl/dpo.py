"""Multi-turn DPO over whole dialogues (MDPO; paper 003's preference baseline, A.3).

M-DPO (Xiong et al., 2025, "Building Math Agents with Multi-Turn Iterative
Preference Learning") is DPO (Rafailov et al., 2023) on trajectories: a
dialogue's log-ratio to the reference sums over the policy's own tokens only,
the other party's (here the student's, the system prompt and the template
tokens) masked out. A row of the batch is a pair: the chosen and the rejected
dialogue's tutor sides, and their summed log-probs under the frozen reference
(the initial tutor), computed once per batch.
"""
import dataclasses
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import linen as nn
from flax import struct

from pedrl.rl import batch as batch_lib, objective as objective_lib, update
from pedrl.rl.offline_data import TutorSequence
from pedrl.rl.settings import DPOSettings


def dpo_loss(chosen_logratio: jax.Array, rejected_logratio: jax.Array, beta: float) -> jax.Array:
  """−log σ(β·(Δ_w − Δ_l)), Δ = Σ_t log π(y_t)/π_ref(y_t) over the policy's tokens of a
  dialogue: Rafailov et al. 2023 eq. 7, with Xiong et al. 2025's M-DPO trajectory sums."""
  return -jax.nn.log_sigmoid(beta * (chosen_logratio - rejected_logratio))


def pair_terms(logp: jax.Array, loss_mask: jax.Array, ref_logp: jax.Array,
               beta: float) -> tuple[jax.Array, jax.Array, jax.Array]:
  """(DPO loss [N], implicit rewards β·Δ [N, 2], summed log-probs [N, 2]) of pairs from the
  policy's per-token log-probs [N, 2, T]: Δ sums log π − log π_ref over `loss_mask`."""
  summed = (logp * loss_mask).sum(-1)
  logratio = summed - ref_logp
  return dpo_loss(logratio[:, 0], logratio[:, 1], beta), beta * logratio, summed


@struct.dataclass
class PairBatch:
  """Preference pairs; axis 1 is (chosen, rejected)."""
  tokens: np.ndarray  # int32 [N, 2, T], the two dialogues' tutor sides, right-padded.
  attn_mask: np.ndarray  # bool [N, 2, T], real tokens.
  loss_mask: np.ndarray  # bool [N, 2, T], the tokens the log-ratio sums over.
  ref_logp: np.ndarray  # float32 [N, 2], the reference's summed log-probs of those tokens.
  valid: np.ndarray  # bool [N], pairs that count (filler rows do not).

  @property
  def rows(self) -> int:
    return self.tokens.shape[0]

  def take(self, rows: int | np.ndarray | slice) -> "PairBatch":
    return batch_lib.take_rows(self, rows)

  def padded(self, rows: int) -> "PairBatch":
    out = batch_lib.take_rows(self, batch_lib.fill_rows(self.rows, rows))
    return out.replace(valid=np.arange(rows) < self.rows)


@struct.dataclass
class DPOMetrics:
  """MDPO's metrics of one update, means over its pairs (TRL's DPOTrainer's, named as it
  logs them in `to_row`)."""
  loss: jax.Array
  chosen_reward: jax.Array  # β·Δ of the chosen dialogue.
  rejected_reward: jax.Array
  accuracy: jax.Array  # Share of pairs whose chosen reward is the higher.
  chosen_logp: jax.Array  # Σ log π of the chosen dialogue's tutor tokens.
  rejected_logp: jax.Array
  pairs: jax.Array  # Pairs counted.

  def guarded(self) -> dict[str, jax.Array]:
    return {"loss": self.loss}

  def to_row(self) -> dict[str, float]:
    return {"loss": float(self.loss), "rewards/chosen": float(self.chosen_reward),
            "rewards/rejected": float(self.rejected_reward),
            "rewards/margins": float(self.chosen_reward - self.rejected_reward),
            "rewards/accuracies": float(self.accuracy), "logps/chosen": float(self.chosen_logp),
            "logps/rejected": float(self.rejected_logp), "pairs": float(self.pairs)}


@dataclasses.dataclass(frozen=True)
class DPOObjective(DPOSettings):
  """The MDPO objective (pedrl.rl.objective) on a PairBatch: the mean DPO loss over pairs.
  Rewards are DPO's implicit ones, β·Δ, as TRL's DPOTrainer reports them."""

  def totals(self, batch: PairBatch) -> tuple:
    return (max(np.asarray(batch.valid).sum(), 1),)

  def loss(self, model: nn.Module, params: objective_lib.Params, part: PairBatch,
           totals: tuple) -> tuple[jax.Array, dict[str, jax.Array]]:
    (num_pairs,) = totals
    m, _, width = part.tokens.shape
    flat = lambda x: x.reshape(2 * m, width)
    logp = update.policy_logprobs(model, params, flat(part.tokens), flat(part.attn_mask), 1.0)
    losses, rewards, summed = pair_terms(logp.reshape(m, 2, width), part.loss_mask,
                                         part.ref_logp, self.beta)
    valid = part.valid.astype(jnp.float32)
    sums = {"pairs": valid.sum(),
            "chosen_reward_sum": (rewards[:, 0] * valid).sum(),
            "rejected_reward_sum": (rewards[:, 1] * valid).sum(),
            "correct_sum": ((rewards[:, 0] > rewards[:, 1]) * valid).sum(),
            "chosen_logp_sum": (summed[:, 0] * valid).sum(),
            "rejected_logp_sum": (summed[:, 1] * valid).sum()}
    return (losses * valid).sum() / num_pairs, sums

  def metrics(self, sums: dict) -> DPOMetrics:
    n = jnp.maximum(sums["pairs"], 1.0)
    return DPOMetrics(loss=sums["loss"], chosen_reward=sums["chosen_reward_sum"] / n,
                      rejected_reward=sums["rejected_reward_sum"] / n,
                      accuracy=sums["correct_sum"] / n, chosen_logp=sums["chosen_logp_sum"] / n,
                      rejected_logp=sums["rejected_logp_sum"] / n, pairs=sums["pairs"])


def build(pairs: Sequence[tuple[TutorSequence, TutorSequence]],
          ref_logprobs: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> PairBatch:
  """The batch of `pairs`, each (chosen, rejected) pedrl.rl.offline_data.TutorSequence;
  `ref_logprobs(tokens, attn_mask)` gives the reference's per-token log-probs of [N, T]
  rows (pedrl.rl.update.logprobs_in_chunks)."""
  b = batch_lib.from_sequences([s for pair in pairs for s in pair])
  ref = (np.asarray(ref_logprobs(b.tokens, b.attn_mask), np.float32) * b.loss_mask).sum(-1)
  shape = (len(pairs), 2, b.tokens.shape[1])
  return PairBatch(b.tokens.reshape(shape), b.attn_mask.reshape(shape),
                   b.loss_mask.reshape(shape), ref.reshape(len(pairs), 2),
                   np.ones(len(pairs), bool))
