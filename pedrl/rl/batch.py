"""Training batches: dialogues' tutor sides as right-padded [N, T] arrays.

`SequenceBatch` is the tokens and the tokens that count (SFT's batch);
`TrainBatch` adds what GRPO's loss reads. A GRPO batch is built once per step
from the dialogues, their token advantages and the frozen reference's log-probs,
and never changed after: the update reads rows of it.
"""
from collections.abc import Callable, Sequence
from typing import TypeVar

import jax
import numpy as np
from flax import struct

from pedrl.engine.shapes import bucket
from pedrl.env.dialogue import Dialogue
from pedrl.rl.offline_data import TutorSequence

T = TypeVar("T")


@struct.dataclass
class SequenceBatch:
  tokens: np.ndarray  # int32, the tutor's token sequence (Dialogue.tutor_ids), right-padded.
  attn_mask: np.ndarray  # bool, real tokens.
  loss_mask: np.ndarray  # bool, the tokens the loss counts.

  @property
  def rows(self) -> int:
    return self.tokens.shape[0]

  def take(self, rows: int | np.ndarray | slice) -> "SequenceBatch":
    """The batch of rows `rows` (indices or a slice)."""
    return take_rows(self, rows)

  def padded(self, rows: int) -> "SequenceBatch":
    """`rows` rows: filler copies of row 0 that carry no loss."""
    out = take_rows(self, fill_rows(self.rows, rows))
    return out.replace(loss_mask=np.where(np.arange(rows)[:, None] < self.rows, out.loss_mask,
                                          False))


@struct.dataclass
class TrainBatch(SequenceBatch):
  """GRPO's: loss_mask holds the tokens the tutor sampled, in dialogues that count."""
  advantages: np.ndarray  # float32, per token (pedrl.rl.advantages.token_advantages).
  # float32, the policy's log-probs before the step's updates: the training forward's, or
  # the sampler's (GRPOSettings.old_logprobs).
  old_logp: np.ndarray
  ref_logp: np.ndarray  # float32, the frozen reference policy's log-probs.


def take_rows(tree: T, rows: int | np.ndarray | slice) -> T:
  """Rows `rows` of every [N, ...] array of a pytree."""
  return jax.tree.map(lambda v: np.asarray(v)[rows], tree)


def fill_rows(n: int, rows: int) -> np.ndarray:
  """Indices 0 … n−1, then 0 up to `rows` in all: pads a batch with copies of row 0."""
  fill = np.zeros(rows, np.int64)
  fill[:n] = np.arange(n)
  return fill


def padded_rows(sequences: Sequence[Sequence[int]],
                width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
  """(tokens, attn_mask) [N, T] of token-id sequences, right-padded to `width` (None: the
  bucket of the longest, so few shapes compile)."""
  width = width or bucket(max(len(x) for x in sequences))
  tokens = np.zeros((len(sequences), width), np.int32)
  attn = np.zeros((len(sequences), width), bool)
  for i, x in enumerate(sequences):
    tokens[i, :len(x)] = x
    attn[i, :len(x)] = True
  return tokens, attn


def from_sequences(sequences: Sequence[TutorSequence]) -> SequenceBatch:
  """The batch of sequences with `tokens` and `loss_mask` (pedrl.rl.offline_data's
  TutorSequence), padded to the bucket of the longest."""
  tokens, attn = padded_rows([s.tokens for s in sequences])
  loss_mask = np.zeros(tokens.shape, bool)
  for i, s in enumerate(sequences):
    loss_mask[i, :s.loss_mask.size] = s.loss_mask
  return SequenceBatch(tokens, attn, loss_mask)


def tutor_sequences(dialogues: Sequence[Dialogue]) -> tuple[np.ndarray, np.ndarray]:
  """(tokens, attn_mask) [N, T] of the dialogues' tutor sides (T bucketed: few compiles)."""
  return padded_rows([d.tutor_ids for d in dialogues])


LogProbs = Callable[[np.ndarray, np.ndarray], np.ndarray]  # (tokens, attn_mask) -> [N, T]


def build(dialogues: Sequence[Dialogue], token_advantages: Sequence[np.ndarray],
          ref_logprobs: LogProbs, old_logprobs: LogProbs | None = None) -> TrainBatch:
  """The batch of `dialogues`; `ref_logprobs(tokens, attn_mask)` gives the reference's
  log-probs, `old_logprobs` the current policy's (None: the sampler's, recorded with
  each dialogue). Dropped dialogues stay as rows (the batch keeps its shape) without loss."""
  tokens, attn = tutor_sequences(dialogues)
  loss_mask = np.zeros(tokens.shape, bool)
  advantages = np.zeros(tokens.shape, np.float32)
  for i, (d, a) in enumerate(zip(dialogues, token_advantages)):
    k = len(d.tutor_ids)
    loss_mask[i, :k] = np.asarray(d.tutor_mask, bool) & (not d.dropped)
    advantages[i, :k] = a
  old_logp = (sampled_logprobs(dialogues, tokens.shape) if old_logprobs is None
              else np.asarray(old_logprobs(tokens, attn), np.float32))
  return TrainBatch(tokens, attn, loss_mask, advantages, old_logp,
                    np.asarray(ref_logprobs(tokens, attn), np.float32))


def sampled_logprobs(dialogues: Sequence[Dialogue], shape: tuple) -> np.ndarray:
  """The sampler's log-prob of each tutor token (0 elsewhere), [N, T] as the batch."""
  out = np.zeros(shape, np.float32)
  for i, d in enumerate(dialogues):
    out[i, :len(d.tutor_ids)] = d.tutor_logprobs
  return out


def sampler_gap(dialogues: Sequence[Dialogue], batch: TrainBatch) -> float:
  """Mean |sampler − batch.old_logp| over the tokens that carry loss: how far the
  sampler's log-probs are from the training forward's (0 when the batch holds the
  sampler's own)."""
  mask = np.asarray(batch.loss_mask, bool)
  gap = np.abs(sampled_logprobs(dialogues, mask.shape) - np.asarray(batch.old_logp))
  return float(gap[mask].mean()) if mask.any() else 0.0
