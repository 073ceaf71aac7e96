"""Dialogue-level rewards of PedagogicalRL (paper 003) and PedagogicalRL-Thinking (paper 001)."""
from collections.abc import Iterable
import numpy as np
from numpy.typing import ArrayLike


def pedagogy_penalty(r_ped: ArrayLike, lam: float) -> np.ndarray:
  """(r_ped − 1)·λ: the pedagogy term of paper 003, eq. 4 (and of paper 001, eq. 1)."""
  r_ped = np.asarray(r_ped, np.float64)
  _check_unit("r_ped", r_ped)
  return (r_ped - 1.0) * lam


def thinking_term(r_think: ArrayLike, lam_think: float = 0.3, theta: float = 0.6) -> np.ndarray:
  """(r_think − θ)·λ_think: the thinking term of paper 001, eq. 1."""
  r_think = np.asarray(r_think, np.float64)
  _check_unit("r_think", r_think)
  return (r_think - theta) * lam_think


def pedagogical_rl_reward(r_sol: ArrayLike, r_ped: ArrayLike, lam: float,
                          hard: bool = False) -> np.ndarray:
  """Soft: r_sol + (r_ped − 1)·λ (paper 003, eq. 4); hard: −λ whenever a judge rejects."""
  r_sol, penalty = np.asarray(r_sol, np.float64), pedagogy_penalty(r_ped, lam)
  if hard:  # Paper 003 section 4: rejection is a fixed penalty, whatever the solve rate.
    return np.where(np.asarray(r_ped) < 1.0, -lam, r_sol)
  return r_sol + penalty


def thinking_reward(r_sol: ArrayLike, r_ped: ArrayLike, r_think: ArrayLike, lam_ped: float = 0.75,
                    lam_think: float = 0.3, theta: float = 0.6) -> np.ndarray:
  """r_sol + (r_ped − 1)·λ_ped + (r_think − θ)·λ_think (paper 001, eq. 1)."""
  return pedagogical_rl_reward(r_sol, r_ped, lam_ped) + thinking_term(r_think, lam_think, theta)


def judges_accept(decisions: Iterable[bool]) -> float:
  """r_ped = Π_m 1[J_m accepts] over every sample of every judge (paper 003, eq. 3)."""
  decisions = list(decisions)
  if not decisions:
    raise ValueError("r_ped needs at least one judge decision")
  return float(all(bool(d) for d in decisions))


def _check_unit(name, x):
  if np.any((x < 0) | (x > 1)):
    raise ValueError(f"{name} must lie in [0, 1], got {x}")
