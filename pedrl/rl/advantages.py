"""Group-relative advantages, per dialogue (papers 003, 001) or per tutor turn (paper 000).

Dialogues arrive in groups: the G rollouts of one problem are consecutive.

Dialogue level: A_i = (r_i − mean_g r) / (std_g r + ε), one scalar per
dialogue, on every tutor token of it.

Turn level (UCO): each dialogue's per-turn rewards become discounted returns
G_t = Σ_{k≥t} γ^{k−t} r_k; at each turn index t, the returns of the G rollouts
that reached turn t are normalised together, A_{i,t} = (G_{i,t} − mean_t) /
(std_t + ε); each tutor turn's tokens get their turn's advantage. Comparing a
turn only with the same turn of the other rollouts keeps turn position out of
the sign (early turns' returns hold more future reward); paper 000 does not
say, this is pedrl's rule. A turn only one rollout reached gets 0.

std is the unbiased estimate by default (ddof=1, as TRL's GRPOTrainer, which
paper 003's reference code builds on); ddof=0 gives the population one.
"""
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from pedrl.rewards import uco


def _groups(n: int, group_size: int):
  if group_size < 2:
    raise ValueError(f"GRPO needs at least 2 rollouts per problem, got G={group_size}")
  if n % group_size:
    raise ValueError(f"{n} dialogues do not split into groups of {group_size}")
  return range(0, n, group_size)


def _normalised(x: np.ndarray, eps: float, ddof: int) -> np.ndarray:
  """(x − mean) / (std + ε); all equal: zeros (no rollout is better, even at ε = 0).
  Equality is tested on x itself: the mean of equal floats can differ from them in the
  last bit, leaving a std of 1e-17 and advantages of 1e-13 that are no signal."""
  if x.size == 0 or np.all(x == x.flat[0]):
    return np.zeros_like(x)
  return (x - x.mean()) / (x.std(ddof=ddof) + eps)


def group_advantages(rewards: ArrayLike, group_size: int, eps: float = 1e-4,
                     ddof: int = 1) -> np.ndarray:
  """(r − group mean) / (group std + ε) per dialogue (paper 003 section 4 / GRPO)."""
  r = np.asarray(rewards, np.float64)
  out = np.empty_like(r)
  for lo in _groups(r.size, group_size):
    out[lo:lo + group_size] = _normalised(r[lo:lo + group_size], eps, ddof)
  return out


def turn_advantages(turn_rewards: Sequence[ArrayLike], group_size: int, gamma: float = 0.95,
                    eps: float = 1e-8, ddof: int = 1) -> list:
  """Per dialogue, the advantage of each tutor turn (returns normalised per turn index
  within the group)."""
  returns = [uco.discounted_returns(r, gamma) for r in turn_rewards]
  out = [np.zeros_like(x) for x in returns]
  for lo in _groups(len(returns), group_size):
    group = range(lo, lo + group_size)
    for t in range(max(returns[i].size for i in group)):
      have = [i for i in group if returns[i].size > t]
      values = np.asarray([returns[i][t] for i in have])
      if values.size < 2:
        continue  # Nothing to compare this turn with.
      for i, v in zip(have, _normalised(values, eps, ddof)):
        out[i][t] = v
  return out


def token_advantages(mask: ArrayLike, spans: Sequence[tuple[int, int]],
                     values: float | Sequence[float]) -> np.ndarray:
  """A per-token array: values[j] on the tokens of span j (turn level), or one scalar
  value on every masked token (dialogue level); 0 off the mask."""
  mask = np.asarray(mask, bool)
  out = np.zeros(mask.shape, np.float32)
  if np.ndim(values) == 0:
    out[mask] = values
    return out
  if len(values) != len(spans):
    raise ValueError(f"{len(values)} turn advantages for {len(spans)} tutor turns")
  for (a, b), v in zip(spans, values):
    out[a:b] = v
  return np.where(mask, out, 0.0).astype(np.float32)
