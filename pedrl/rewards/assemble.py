"""A dialogue's reward as a weighted list of components, and the batch statistics.

Components (each a number per dialogue), registered in COMPONENTS:
  r_sol     the post-dialogue solve rate (paper 003 eq. 2)
  pedagogy  (r_ped − 1)·λ: with r_sol at weight 1, paper 003 eq. 4
  thinking  (r_think − θ)·λ_think: with the two above, paper 001 eq. 1
  template  paper 003 appendix B.5
  uco       the discounted return G_0 of UCO's per-turn rewards (paper 000 eqs. 9, 1);
            the per-turn rewards themselves stay in `Dialogue.turn_rewards`
Each component declares its level: a dialogue-level one is one number per
dialogue; a turn-level one also has a reward per tutor turn, from which turn
advantages are built (`weighted_turn_rewards`). With `hard=True`, a dialogue some judge
rejected gets −λ in place of r_sol, pedagogy, thinking and uco (paper 003's hard
variant; no solve attempts or UCO scoring are made for it), plus the template's
length penalty, which applies regardless.
"""
from collections.abc import Sequence
import dataclasses
from typing import Callable, NamedTuple

import numpy as np

from pedrl.env.dialogue import TUTOR, Dialogue, Rewards
from pedrl.rewards import pedagogy, template, uco

DIALOGUE, TURN = "dialogue", "turn"


@dataclasses.dataclass(frozen=True)
class Component:
  value: Callable  # (dialogue, RewardSettings) -> float, for a dialogue judges did not reject.
  level: str = DIALOGUE
  needs_judges: bool = False
  # With the hard variant, a rejected dialogue's value is 0 (its −λ is added to the total).
  zero_when_rejected: bool = True
  turn_values: Callable | None = None  # TURN level: (dialogue, settings) -> [float] per turn.


def _required(value, what, d):
  if value is None:
    raise ValueError(f"dialogue {d.uid} ({d.problem_id}) has no {what}; the reward needs it")
  return float(value)


def _judged(d, what: str) -> float:
  return _required(getattr(d.judgement, what, None), what, d)


def _tutor_messages(d):
  return [m for m in d.messages if m.role == TUTOR]


def _uco_turns(d, settings) -> list:
  return [t.reward for t in d.turn_rewards]


def _uco_return(d, settings) -> float:
  if not d.turn_rewards and _tutor_messages(d):
    raise ValueError(f"dialogue {d.uid} ({d.problem_id}) has no UCO turn rewards")
  returns = uco.discounted_returns(_uco_turns(d, settings), settings.gamma)
  return float(returns[0]) if returns.size else 0.0


COMPONENTS = {
    "r_sol": Component(lambda d, s: _required(d.r_sol, "r_sol", d)),
    "pedagogy": Component(
        lambda d, s: float(pedagogy.pedagogy_penalty(_judged(d, "r_ped"), s.lam)),
        needs_judges=True),
    "thinking": Component(
        lambda d, s: float(pedagogy.thinking_term(_judged(d, "r_think"), s.lam_think, s.theta)),
        needs_judges=True),
    "template": Component(
        lambda d, s: template.template_reward(
            [m.raw or m.text for m in _tutor_messages(d)], d.end_reason == "end_of_conversation",
            d.truncated, scored=not rejected(d, s), tags=s.template_tags),
        zero_when_rejected=False),
    "uco": Component(_uco_return, level=TURN, turn_values=_uco_turns),
}


def parse_components(spec: str) -> tuple:
  """"r_sol:1,pedagogy:1,template:0.5" -> (("r_sol", 1.0), ...)."""
  out = []
  for part in filter(None, (p.strip() for p in spec.split(","))):
    name, _, weight = part.partition(":")
    if name not in COMPONENTS:
      raise ValueError(f"reward component {name!r} is not one of {tuple(COMPONENTS)}")
    try:
      out.append((name, float(weight) if weight else 1.0))
    except ValueError:
      raise ValueError(f"reward component {part!r}: the weight is not a number") from None
  if not out:
    raise ValueError("no reward components given")
  return tuple(out)


@dataclasses.dataclass(frozen=True)
class RewardSettings:
  """Defaults are paper 003's reward: r_sol + (r_ped − 1)·λ + template terms."""
  # "name:weight,…" (parse_components), or the parsed ((name, weight), …).
  components: str | tuple = "r_sol:1,pedagogy:1,template:1"
  lam: float = 0.75  # λ of paper 003 eq. 4 (λ_ped = 0.75 in paper 001).
  hard: bool = False  # Paper 003's hard variant: −λ in place of the rest on a rejection.
  lam_think: float = 0.3  # Paper 001 eq. 1.
  theta: float = 0.6  # Paper 001 eq. 1.
  gamma: float = 0.95  # Paper 000's discount of the uco component's turn rewards.
  # How the template component reads <think> tags (template.TAGS): "paper", appendix B.1's
  # words; "reference", the reference code's tag counts.
  template_tags: str = "paper"
  # ((name, weight), …), parsed from `components` once (a bad spec fails here, not mid-run).
  weights: tuple = dataclasses.field(init=False, repr=False, compare=False)

  def __post_init__(self) -> None:
    if self.template_tags not in template.TAGS:
      raise ValueError(f"template_tags {self.template_tags!r} is not one of {template.TAGS}")
    weights = (parse_components(self.components) if isinstance(self.components, str) else
               tuple((n, float(w)) for n, w in self.components))
    object.__setattr__(self, "weights", weights)  # Frozen: set once, here.

  @property
  def names(self) -> set:
    return {n for n, _ in self.weights}

  @property
  def needs_judges(self) -> bool:
    return any(COMPONENTS[n].needs_judges for n in self.names) or self.hard

  @property
  def turn_level(self) -> tuple:
    """(name, weight) of the turn-level components."""
    return tuple((n, w) for n, w in self.weights if COMPONENTS[n].level == TURN)


def rejected(d: Dialogue, settings: RewardSettings) -> bool:
  """Hard variant: some judge sample said REJECT (r_ped = 0)."""
  return settings.hard and d.judgement is not None and d.judgement.r_ped == 0.0


def components(d: Dialogue, settings: RewardSettings) -> dict[str, float]:
  """Every configured component's value for one judged, solved and scored dialogue."""
  hard_rejected = rejected(d, settings)
  return {name: 0.0 if hard_rejected and COMPONENTS[name].zero_when_rejected
          else COMPONENTS[name].value(d, settings) for name, _ in settings.weights}


HARD_PENALTY = "hard_penalty"


def terms(values: dict[str, float], d: Dialogue, settings: RewardSettings) -> dict[str, float]:
  """The addends of the total: each component's weighted value (`values` are unweighted),
  and with the hard variant a rejected dialogue's −λ as HARD_PENALTY."""
  weights = dict(settings.weights)
  out = {k: weights[k] * v for k, v in values.items()}
  if rejected(d, settings):
    out[HARD_PENALTY] = -settings.lam
  return out


def total(values: dict[str, float], d: Dialogue, settings: RewardSettings) -> float:
  return sum(terms(values, d, settings).values())


def weighted_turn_rewards(d: Dialogue, settings: RewardSettings) -> list[float]:
  """Per tutor turn, the weighted sum of the turn-level components' turn rewards
  (empty if there are none, or the dialogue was hard-rejected and never scored)."""
  if rejected(d, settings):
    return []
  per_component = [[w * r for r in COMPONENTS[n].turn_values(d, settings)]
                   for n, w in settings.turn_level]
  return [float(sum(rs)) for rs in zip(*per_component)] if per_component else []


def dialogue_part(d: Dialogue, settings: RewardSettings) -> float:
  """The total without the weighted turn-level components: what dialogue-level
  advantages are built from when turn-level ones get their own."""
  return d.rewards.total - sum(w * d.rewards.components[n] for n, w in settings.turn_level)


class Spread(NamedTuple):
  """A batch's mean and standard deviation of one reward component (NaN: no dialogue)."""
  mean: float
  std: float


def assign(dialogues: Sequence[Dialogue], settings: RewardSettings) -> dict[str, Spread]:
  """Fills d.rewards for the dialogues no judge policy dropped; returns per component
  (and "total") the batch mean and standard deviation."""
  kept = [d for d in dialogues if not d.dropped]
  for d in kept:
    values = components(d, settings)
    d.rewards = Rewards(components=values, total=total(values, d, settings))
  stats = {}
  for name in [n for n, _ in settings.weights] + ["total"]:
    xs = np.asarray([d.rewards.total if name == "total" else d.rewards.components[name]
                     for d in kept], np.float64)
    stats[name] = Spread(float(xs.mean()), float(xs.std())) if xs.size else Spread(
        float("nan"), float("nan"))
  return stats


@dataclasses.dataclass(frozen=True)
class BatchRewards:
  """What rewarding a batch says about the batch (each dialogue carries its own rewards):
  per component and "total" the spread over the dialogues kept, and the reward
  pipeline's counts for this batch alone (pedrl.rewards.pipeline)."""
  stats: dict[str, Spread]
  counts: dict[str, int] = dataclasses.field(default_factory=dict)

  @property
  def total(self) -> float:
    """The batch's mean reward total."""
    return self.stats["total"].mean

  def to_row(self) -> dict[str, float]:
    """The batch's metric row entries, named alike in every job: reward/<component>,
    reward_std/<component> and pipeline/<count>."""
    out = {f"reward/{k}": s.mean for k, s in self.stats.items()}
    out.update({f"reward_std/{k}": s.std for k, s in self.stats.items()})
    out.update({f"pipeline/{k}": v for k, v in sorted(self.counts.items())})
    return out
