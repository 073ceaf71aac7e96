"""A dialogue's reward as a weighted list of components, and the batch statistics.

Components (each a number per dialogue):
  r_sol     the post-dialogue solve rate (paper 003 eq. 2)
  pedagogy  (r_ped − 1)·λ: with r_sol at weight 1, paper 003 eq. 4
  thinking  (r_think − θ)·λ_think: with the two above, paper 001 eq. 1
  template  paper 003 appendix B.5
  uco       the discounted return G_0 of UCO's per-turn rewards (paper 000 eqs. 9, 1);
            the per-turn rewards themselves stay in `Dialogue.turn_rewards`
With `hard=True`, a dialogue some judge rejected gets −λ in place of r_sol,
pedagogy, thinking and uco (paper 003's hard variant; no solve attempts or UCO
scoring are made for it), plus the template's length penalty, which applies
regardless.
"""
import dataclasses

import numpy as np

from pedrl.env.dialogue import TUTOR
from pedrl.rewards import pedagogy, template, uco

COMPONENTS = ("r_sol", "pedagogy", "thinking", "template", "uco")


def parse_components(spec: str) -> tuple:
  """"r_sol:1,pedagogy:1,template:0.5" -> (("r_sol", 1.0), ...)."""
  out = []
  for part in filter(None, (p.strip() for p in spec.split(","))):
    name, _, weight = part.partition(":")
    if name not in COMPONENTS:
      raise ValueError(f"reward component {name!r} is not one of {COMPONENTS}")
    try:
      out.append((name, float(weight) if weight else 1.0))
    except ValueError:
      raise ValueError(f"reward component {part!r}: the weight is not a number") from None
  if not out:
    raise ValueError("no reward components given")
  return tuple(out)


@dataclasses.dataclass(frozen=True)
class RewardSettings:
  components: tuple = (("r_sol", 1.0), ("pedagogy", 1.0), ("template", 1.0))
  lam: float = 0.75  # λ of paper 003 eq. 4 (λ_ped = 0.75 in paper 001).
  hard: bool = False
  lam_think: float = 0.3  # Paper 001 eq. 1.
  theta: float = 0.6
  gamma: float = 0.95  # Paper 000's discount.

  @property
  def names(self) -> set:
    return {n for n, _ in self.components}

  @property
  def needs_judges(self) -> bool:
    return bool(self.names & {"pedagogy", "thinking"}) or self.hard


def rejected(d, settings: RewardSettings) -> bool:
  """Hard variant: some judge sample said REJECT (r_ped = 0)."""
  return settings.hard and d.judgement.get("r_ped") == 0.0


def components(d, settings: RewardSettings) -> dict:
  """Every configured component's value for one judged, solved and scored dialogue."""
  tutor = [m for m in d.messages if m.role == TUTOR]
  hard_rejected = rejected(d, settings)
  out = {}
  for name, _ in settings.components:
    if name == "r_sol":
      out[name] = 0.0 if hard_rejected else _required(d.r_sol, "r_sol", d)
    elif name == "pedagogy":
      out[name] = 0.0 if hard_rejected else float(pedagogy.pedagogy_penalty(
          _required(d.judgement.get("r_ped"), "r_ped", d), settings.lam))
    elif name == "thinking":
      out[name] = 0.0 if hard_rejected else float(pedagogy.thinking_term(
          _required(d.judgement.get("r_think"), "r_think", d), settings.lam_think,
          settings.theta))
    elif name == "template":
      out[name] = template.template_reward(
          [m.raw or m.text for m in tutor], d.end_reason == "end_of_conversation", d.truncated,
          scored=not hard_rejected)
    elif name == "uco":
      if hard_rejected:
        out[name] = 0.0
        continue
      if not d.turn_rewards and tutor:
        raise ValueError(f"dialogue {d.uid} ({d.problem_id}) has no UCO turn rewards")
      returns = uco.discounted_returns([t["reward"] for t in d.turn_rewards], settings.gamma)
      out[name] = float(returns[0]) if returns.size else 0.0
  return out


def _required(value, what, d):
  if value is None:
    raise ValueError(f"dialogue {d.uid} ({d.problem_id}) has no {what}; the reward needs it")
  return float(value)


def total(values: dict, d, settings: RewardSettings) -> float:
  weights = dict(settings.components)
  value = sum(weights[k] * v for k, v in values.items())
  return value - settings.lam if rejected(d, settings) else value


def assign(dialogues, settings: RewardSettings) -> dict:
  """Fills d.rewards (components and "total") for the dialogues not dropped by a judge
  policy; returns per component the batch mean and standard deviation."""
  kept = [d for d in dialogues if not d.judgement.get("dropped")]
  for d in kept:
    values = components(d, settings)
    d.rewards = dict(values, total=total(values, d, settings))
  stats = {}
  for name in [n for n, _ in settings.components] + ["total"]:
    xs = np.asarray([d.rewards[name] for d in kept], np.float64)
    stats[name] = (float(xs.mean()), float(xs.std())) if xs.size else (float("nan"),) * 2
  return stats
