"""Group-relative advantages, per dialogue (papers 003, 001) or per tutor turn (paper 000).

Dialogues arrive in groups: the G rollouts of one problem are consecutive.

Dialogue level: A_i = (r_i − mean_g r) / (std_g r + ε), one scalar per
dialogue, on every tutor token of it.

Turn level (UCO): each dialogue's per-turn rewards become discounted returns
G_t = Σ_{k≥t} γ^{k−t} r_k; all returns of all turns of a problem's G rollouts
are pooled and normalised together, A_{i,t} = (G_{i,t} − mean) / (std + ε);
each tutor turn's tokens get their turn's advantage. Pooling turns of
different depths in one group is pedrl's choice (paper 000 does not say); it
keeps early turns, whose returns include more future reward, comparable
across rollouts of the same problem.

std is the population standard deviation by default (ddof=0); ddof=1 gives
the unbiased estimate TRL's GRPOTrainer uses.
"""
import numpy as np

from pedrl.rewards import uco


def _groups(n: int, group_size: int):
  if group_size < 2:
    raise ValueError(f"GRPO needs at least 2 rollouts per problem, got G={group_size}")
  if n % group_size:
    raise ValueError(f"{n} dialogues do not split into groups of {group_size}")
  return range(0, n, group_size)


def group_advantages(rewards, group_size: int, eps: float = 1e-4, ddof: int = 0) -> np.ndarray:
  """(r − group mean) / (group std + ε) per dialogue (paper 003 section 4 / GRPO)."""
  r = np.asarray(rewards, np.float64)
  out = np.empty_like(r)
  for lo in _groups(r.size, group_size):
    g = r[lo:lo + group_size]
    out[lo:lo + group_size] = (g - g.mean()) / (g.std(ddof=ddof) + eps)
  return out


def turn_advantages(turn_rewards, group_size: int, gamma: float = 0.95, eps: float = 1e-8,
                    ddof: int = 0) -> list:
  """Per dialogue, the advantage of each tutor turn (returns normalised within the group)."""
  returns = [uco.discounted_returns(r, gamma) for r in turn_rewards]
  out = []
  for lo in _groups(len(returns), group_size):
    group = returns[lo:lo + group_size]
    pooled = np.concatenate(group) if any(x.size for x in group) else np.zeros(0)
    mean, std = (pooled.mean(), pooled.std(ddof=ddof)) if pooled.size > ddof else (0.0, 0.0)
    out += [(x - mean) / (std + eps) for x in group]
  return out


def token_advantages(mask, spans, values) -> np.ndarray:
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
