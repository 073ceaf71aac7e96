"""Per-turn rewards of UCO (paper 000, eqs. 3–9) and the returns built from them.

Open points decided here (each an argument; docs/rewards.md says why):
- eq. 3 sums token log-probs over a whole candidate; with α = 2 tanh saturates
  at −1 for anything longer than a few tokens, so `reduce="mean"` (per-token
  mean, the default) is offered beside the literal `reduce="sum"`.
- eq. 7 ties: the lowest level index wins (np.argmax), i.e. the less directive
  scaffold, before the one-level step down.
"""
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

SCAFFOLD_LEVELS = ("metacognitive", "strategic", "conceptual", "step_by_step",
                   "worked_example")  # ℓ0..ℓ4, most to least cognitive load (paper 000 III-B-2).
REDUCTIONS = ("mean", "sum")


def candidate_logprob(token_logprobs: ArrayLike, reduce: str = "mean") -> float:
  """One candidate's log-probability under the student: summed (eq. 3) or per token."""
  lp = np.asarray(token_logprobs, np.float64)
  if reduce not in REDUCTIONS:
    raise ValueError(f"reduce must be one of {REDUCTIONS}, got {reduce!r}")
  if lp.size == 0:
    raise ValueError("a candidate has no tokens")
  if np.isnan(lp).any():
    raise ValueError("a candidate's log-probs contain NaN")
  return float(lp.sum() if reduce == "sum" else lp.mean())


def potential_score(candidate_logprobs: Sequence[ArrayLike], alpha: float = 2.0,
                    reduce: str = "mean") -> float:
  """f_potential = tanh(α · max_k log π_S(c^k | s_t, a_t)) (paper 000, eq. 3).

  candidate_logprobs: per candidate, its tokens' log-probs (ragged).
  """
  scores = [candidate_logprob(c, reduce) for c in candidate_logprobs]
  if not scores:
    raise ValueError("potential_score needs at least one candidate")
  return float(np.tanh(alpha * max(scores)))  # All −inf: tanh(−inf) = −1.


def semantic_score(output_embedding: ArrayLike, candidate_embeddings: ArrayLike,
                   delta: float = 0.7) -> float:
  """f_semantic = max_j cos(e(o_{t+1}), e(c_j)) − δ (paper 000, eq. 4)."""
  o = np.asarray(output_embedding, np.float64)
  c = np.atleast_2d(np.asarray(candidate_embeddings, np.float64))
  if c.shape[0] == 0 or c.shape[1] != o.shape[-1]:
    raise ValueError(f"candidate embeddings {c.shape} do not match the output's {o.shape}")
  norms = np.linalg.norm(c, axis=1) * np.linalg.norm(o)
  if np.any(norms == 0):
    raise ValueError("a zero embedding has no cosine similarity")
  return float(np.max(c @ o / norms) - delta)


def progress_reward(potential: float, semantic: float, lam: float = 0.5) -> float:
  """r_progress = λ · f_potential + (1 − λ) · f_semantic (paper 000, eq. 5)."""
  if not 0.0 <= lam <= 1.0:
    raise ValueError(f"lam must lie in [0, 1], got {lam}")
  return lam * potential + (1.0 - lam) * semantic


def zpd_level(level_logprobs: ArrayLike) -> int:
  """ℓ_ZPD = max(0, argmax_ℓ P(ℓ) − 1), P(ℓ) = log π_S(c_t | s_t, hint_ℓ) (paper 000, eqs. 6–7)."""
  p = np.asarray(level_logprobs, np.float64)
  if p.shape != (len(SCAFFOLD_LEVELS),):
    raise ValueError(f"need one log-prob per scaffold level ({len(SCAFFOLD_LEVELS)}), "
                     f"got shape {p.shape}")
  if np.isnan(p).any():
    raise ValueError(f"level log-probs contain NaN: {p}")
  return max(0, int(np.argmax(p)) - 1)


def scaffold_reward(level_logprobs: ArrayLike, chosen_level: int, c: float = 0.2) -> float:
  """σ(P(ℓ(a_t))) + 0.5 if ℓ(a_t) = ℓ_ZPD, else −c·|ℓ(a_t) − ℓ_ZPD| (paper 000, eq. 8)."""
  if not 0 <= chosen_level < len(SCAFFOLD_LEVELS):
    raise ValueError(f"chosen_level must be in [0, {len(SCAFFOLD_LEVELS)}), got {chosen_level}")
  target = zpd_level(level_logprobs)
  if chosen_level == target:
    return float(1.0 / (1.0 + np.exp(-level_logprobs[chosen_level])) + 0.5)
  return -c * abs(chosen_level - target)


def turn_reward(progress: float, scaffold: float) -> float:
  """r_t = r_progress + r_scaffold (paper 000, eq. 9)."""
  return progress + scaffold


def discounted_returns(turn_rewards: ArrayLike, gamma: float = 0.95) -> np.ndarray:
  """G_t = Σ_{k≥t} γ^{k−t} r_k over one dialogue's turns (paper 000, eq. 1; γ = 0.95 in its setup)."""
  r = np.asarray(turn_rewards, np.float64)
  out = np.zeros_like(r)
  running = 0.0
  for t in range(r.size - 1, -1, -1):
    running = r[t] + gamma * running
    out[t] = running
  return out
