"""UCO's per-turn rewards (paper 000, eqs. 3–9) for a batch of dialogues.

For every tutor turn a_t: the oracle's candidates c^k and level hints; the
student's log-probs of each candidate after the dialogue up to and including
a_t (eq. 3, one batched scorer call); the cosine of the student's next message
o_{t+1} with the candidates (eq. 4, one embedder call); the student's log-prob
of one candidate after each level's hint in place of a_t (eqs. 6–7, one
batched scorer call); the level ℓ(a_t) of the tutor's message (nearest hint in
embedding space, or an LLM classifier); then eqs. 5, 8 and 9.

The student state s_t is the dialogue as the student sees it (visible text,
its own messages as `assistant`), under the student's system prompt.
The last tutor turn has no o_{t+1}: `last_turn_semantic` says whether its
progress is the potential term alone ("potential_only", the default: eq. 5 with
the missing term dropped, not counted as a bad answer) or uses f_semantic = 0.

A turn whose candidates and hints came from the reference-oracle fallback, or
whose level the LLM classifier did not give (the nearest hint stands in), is
flagged in its TurnScore; a batch with more than `max_failed_share` of its turns
without a classifier level is an OracleError.
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Sequence

import numpy as np

from pedrl.env import prompts
from pedrl.env.dialogue import ATTEMPTED, STUDENT, TUTOR, Dialogue, TurnScore
from pedrl.rewards import asking
from pedrl.rewards import oracle as oracle_lib
from pedrl.rewards import uco

if typing.TYPE_CHECKING:  # The settings type above imports no JAX; these do.
  from pedrl.engine.scoring import Scorer
  from pedrl.env.party import Party


@dataclasses.dataclass(frozen=True)
class UCOSettings:
  alpha: float = 2.0  # Paper 000 section IV: α, δ, λ, c (γ: RewardSettings.gamma).
  delta: float = 0.7
  lam: float = 0.5
  c: float = 0.2
  reduce: str = "mean"  # Eq. 3 and eq. 6: per-token mean or the literal sum.
  level_method: str = "nearest_hint"  # or "llm" (needs a classifier backend).
  last_turn_semantic: str = "potential_only"  # or "zero".
  zpd_candidate: int = 0  # Which candidate c_t eq. 6 scores.
  classifier_rounds: int = 3
  progress_weight: float = 1.0  # Paper 000 table III ablations: 0 drops a term of eq. 9.
  scaffold_weight: float = 1.0

  def __post_init__(self):
    if self.reduce not in uco.REDUCTIONS:
      raise ValueError(f"reduce {self.reduce!r} is not one of {uco.REDUCTIONS}")
    if self.level_method not in ("nearest_hint", "llm"):
      raise ValueError(f"level_method {self.level_method!r} is not nearest_hint or llm")
    if self.last_turn_semantic not in ("potential_only", "zero"):
      raise ValueError(f"last_turn_semantic {self.last_turn_semantic!r} is not "
                       "potential_only or zero")
    if not 0 <= self.zpd_candidate < oracle_lib.N_CANDIDATES:
      raise ValueError(f"zpd_candidate must be in [0, {oracle_lib.N_CANDIDATES})")


def student_view(d: Dialogue, upto: int) -> list[dict]:
  """The student's chat for messages[:upto], as the rollout fed it: its system prompt,
  its own messages as sampled (its attempt as shown), the tutor's visible text."""
  view = [{"role": "system", "content": d.student_system_prompt()}]
  for i, m in enumerate(d.messages[:upto]):
    own = m.role == STUDENT
    attempt = own and i == 0 and d.scenario == ATTEMPTED
    content = m.raw if own and m.raw and not attempt else m.text
    view.append({"role": "assistant" if own else "user", "content": content})
  return view


def _token_logprobs(scores):
  """Per (row, continuation) the token log-probs, as ragged lists."""
  return [[scores.tokens[i, k, :scores.count[i, k]] for k in range(scores.count.shape[1])]
          for i in range(scores.count.shape[0])]


def _classify_levels(backend, turns, rounds: int, nearest, stats: asking.AskStats,
                     max_failed_share: float = 1.0) -> tuple[list[int], list[bool]]:
  """ℓ(a_t) by the LLM classifier, and per turn whether it fell back: unparsed after
  `rounds` -> the nearest hint (counted); OracleError above max_failed_share of turns.
  A classifier that fails every request falls back too (no error of its own)."""
  reqs = [oracle_lib.OracleRequest(d, i, prompts.render(
      "uco/level_classifier", problem=d.problem, message=d.messages[i].text),
      uid=oracle_lib.request_uid(d, i, oracle_lib.CLASSIFIER)) for d, i in turns]
  asked = asking.ask(reqs, backend.complete, lambda r, text: oracle_lib.parse_level(text),
                     rounds, stats, who="level classifier", error=oracle_lib.OracleError,
                     down_is_error=False)
  failed = asked.to_policy(
      "nearest_hint", max_failed_share,
      f"tutor turns got no level from the LLM classifier after {rounds} rounds and would "
      "fall back to the nearest hint", oracle_lib.OracleError)
  levels, fell_back = list(asked.answers), [False] * len(reqs)
  for n in failed:
    levels[n], fell_back[n] = nearest[n], True
  return levels, fell_back


def score_turns(dialogues: Sequence[Dialogue], student: Party, scorer: Scorer,
                oracle: oracle_lib.Oracle, embedder: Callable[[Sequence[str]], np.ndarray],
                settings: UCOSettings, classifier: asking.TextBackend | None = None,
                stats: asking.AskStats | None = None,
                max_failed_share: float = 1.0) -> list[list[TurnScore]]:
  """Per dialogue, a TurnScore per tutor turn.

  student: a pedrl.env.party.Party (its params and chat template score the candidates);
  scorer: an engine Scorer on the student's model; oracle: ReferenceOracle or
  LLMOracle (which counts into its own `stats`); embedder: texts -> unit vectors;
  classifier: a text backend, for level_method="llm"; stats: an AskStats the
  classifier's requests are counted in; max_failed_share: above this share of turns
  without a classifier level, an error (the rewards' `max_failed_share`).
  """
  asking.check_max_failed_share(max_failed_share)
  stats = stats if stats is not None else asking.AskStats()
  turns = [(d, i) for d in dialogues for i, m in enumerate(d.messages) if m.role == TUTOR]
  if not turns:
    return [[] for _ in dialogues]
  told = oracle([oracle_lib.OracleRequest(d, i) for d, i in turns])

  # Eq. 4 and the nearest-hint level: one embedder call over every text involved.
  replies = [d.messages[i + 1].text if i + 1 < len(d.messages) else None for d, i in turns]
  texts = sorted({t for o in told for t in o.candidates + o.hints}
                 | {d.messages[i].text for d, i in turns} | {r for r in replies if r is not None})
  vectors = dict(zip(texts, embedder(texts)))
  nearest = [oracle_lib.nearest_hint_level(vectors[d.messages[i].text],
                                           [vectors[h] for h in o.hints])
             for (d, i), o in zip(turns, told)]
  levels, level_fallback = nearest, [False] * len(turns)
  if settings.level_method == "llm":
    if classifier is None:
      raise ValueError("level_method='llm' needs a classifier backend")
    levels, level_fallback = _classify_levels(classifier, turns, settings.classifier_rounds,
                                              nearest, stats, max_failed_share)

  chat = student.chat  # The scorer last: it costs the most.
  # Eq. 3: log π_S(c^k | s_t, a_t) for every candidate, one batched call.
  contexts = [chat.prompt_ids(student_view(d, i + 1)) for d, i in turns]
  candidates = [[chat.encode(c) for c in o.candidates] for o in told]
  pot_scores = _token_logprobs(scorer.score(student.params, contexts, candidates))
  # Eq. 6: log π_S(c_t | s_t, hint_ℓ) for the five levels, one batched call.
  level_ctx = [chat.prompt_ids(student_view(d, i) + [{"role": "user", "content": h}])
               for (d, i), o in zip(turns, told) for h in o.hints]
  level_cont = [[candidates[n][settings.zpd_candidate]] for n in range(len(turns))
                for _ in range(len(uco.SCAFFOLD_LEVELS))]
  lvl_scores = _token_logprobs(scorer.score(student.params, level_ctx, level_cont))

  out = {id(d): [] for d in dialogues}
  n_levels = len(uco.SCAFFOLD_LEVELS)
  for n, ((d, i), o) in enumerate(zip(turns, told)):
    potential = uco.potential_score(pot_scores[n], settings.alpha, settings.reduce)
    semantic = None
    if replies[n] is not None:
      semantic = uco.semantic_score(vectors[replies[n]], [vectors[c] for c in o.candidates],
                                    settings.delta)
      progress = uco.progress_reward(potential, semantic, settings.lam)
    elif settings.last_turn_semantic == "zero":
      progress = uco.progress_reward(potential, 0.0, settings.lam)
    else:
      progress = potential
    p_levels = [uco.candidate_logprob(lvl_scores[n * n_levels + l][0], settings.reduce)
                for l in range(n_levels)]
    scaffold = uco.scaffold_reward(p_levels, levels[n], settings.c)
    out[id(d)].append(TurnScore(
        message=i, potential=potential, semantic=semantic, progress=progress,
        zpd_level=uco.zpd_level(p_levels), level=levels[n], scaffold=scaffold,
        reward=uco.turn_reward(settings.progress_weight * progress,
                               settings.scaffold_weight * scaffold),
        level_logprobs=tuple(p_levels), oracle_fallback=o.fallback,
        level_fallback=level_fallback[n]))
  return [out[id(d)] for d in dialogues]
