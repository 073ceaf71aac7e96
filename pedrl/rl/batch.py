"""The GRPO training batch: each dialogue's tutor side as right-padded [N, T] arrays.

Built once per step from the dialogues, their token advantages and the frozen
reference's log-probs, and never changed after: the update reads rows of it.
"""
import jax
import numpy as np
from flax import struct

from pedrl.engine.shapes import bucket


@struct.dataclass
class TrainBatch:
  tokens: np.ndarray  # int32, the tutor's token sequence (Dialogue.tutor_ids), right-padded.
  attn_mask: np.ndarray  # bool, real tokens.
  loss_mask: np.ndarray  # bool, tokens the tutor sampled, in dialogues that count.
  advantages: np.ndarray  # float32, per token (pedrl.rl.advantages.token_advantages).
  old_logp: np.ndarray  # float32, the sampler's log-probs (same code path: first-pass ratio 1).
  ref_logp: np.ndarray  # float32, the frozen reference policy's log-probs.

  @property
  def rows(self) -> int:
    return self.tokens.shape[0]

  def take(self, rows) -> "TrainBatch":
    """The batch of rows `rows` (indices or a slice)."""
    return take_rows(self, rows)

  def padded(self, rows: int) -> "TrainBatch":
    """`rows` rows: filler copies of row 0 that carry no loss."""
    out = take_rows(self, fill_rows(self.rows, rows))
    return out.replace(loss_mask=np.where(np.arange(rows)[:, None] < self.rows, out.loss_mask,
                                          False))


def take_rows(tree, rows):
  """Rows `rows` of every [N, ...] array of a pytree."""
  return jax.tree.map(lambda v: np.asarray(v)[rows], tree)


def fill_rows(n: int, rows: int) -> np.ndarray:
  """Indices 0 … n−1, then 0 up to `rows` in all: pads a batch with copies of row 0."""
  fill = np.zeros(rows, np.int64)
  fill[:n] = np.arange(n)
  return fill


def tutor_sequences(dialogues):
  """(tokens, attn_mask) [N, T] of the dialogues' tutor sides (T bucketed: few compiles)."""
  width = bucket(max(len(d.tutor_ids) for d in dialogues))
  tokens = np.zeros((len(dialogues), width), np.int32)
  attn = np.zeros((len(dialogues), width), bool)
  for i, d in enumerate(dialogues):
    tokens[i, :len(d.tutor_ids)] = d.tutor_ids
    attn[i, :len(d.tutor_ids)] = True
  return tokens, attn


def build(dialogues, token_advantages, ref_logprobs) -> TrainBatch:
  """The batch of `dialogues`; `ref_logprobs(tokens, attn_mask)` gives the reference's
  log-probs. Dropped dialogues stay as rows (the batch keeps its shape) without loss."""
  tokens, attn = tutor_sequences(dialogues)
  loss_mask = np.zeros(tokens.shape, bool)
  advantages = np.zeros(tokens.shape, np.float32)
  old_logp = np.zeros(tokens.shape, np.float32)
  for i, (d, a) in enumerate(zip(dialogues, token_advantages)):
    k = len(d.tutor_ids)
    loss_mask[i, :k] = np.asarray(d.tutor_mask, bool) & (not d.dropped)
    advantages[i, :k] = a
    old_logp[i, :k] = d.tutor_logprobs
  return TrainBatch(tokens, attn, loss_mask, advantages, old_logp,
                    np.asarray(ref_logprobs(tokens, attn), np.float32))
