"""UCO's oracle (paper 000 section III-B): per tutor turn, n candidate correct student
responses and one hint per scaffold level ℓ0–ℓ4; and how a tutor message's level is found.

Backends: `LLMOracle` over any judge text backend (OpenAI-compatible or local)
with pedrl's oracle prompt (the paper shows none), and `ReferenceOracle`, an
offline stand-in built from the reference answer and fixed hint templates.
An LLM reply with fewer than n candidates or a missing level is asked again;
after `rounds` the `on_failure` policy applies: "reference" (that turn uses the
reference oracle, counted as policy/reference in `stats` and flagged in
`OracleTurn.fallback`) or "error". A batch in which more than `max_failed_share`
of the turns would fall back is an error too: its UCO rewards would be the
smoke-test oracle's.
"""
import dataclasses
from typing import Protocol, Sequence

import numpy as np
from numpy.typing import ArrayLike

from pedrl import files
from pedrl.env import prompts
from pedrl.env.dialogue import Dialogue, transcript
from pedrl.rewards import asking
from pedrl.rewards.uco import SCAFFOLD_LEVELS

N_CANDIDATES = 5  # n in paper 000 eq. 3.
ROUNDS = 3  # Asks of an unparsed oracle reply.
ON_FAILURE = "reference"  # Then: the reference oracle's stand-ins ("reference") or "error".


class OracleError(ValueError):
  """The oracle gave no usable candidates or hints for a turn."""


@dataclasses.dataclass(frozen=True)
class OracleTurn:
  candidates: tuple  # N_CANDIDATES correct student responses.
  hints: tuple  # One per level ℓ0..ℓ4.
  fallback: bool = False  # The LLM oracle failed: these are the reference oracle's.


@dataclasses.dataclass(frozen=True)
class OracleRequest:
  """Turn `turn` (a tutor message index) of a dialogue; `prompt`/`uid` for text backends."""
  dialogue: Dialogue
  turn: int
  prompt: str = ""
  uid: int = 0


ORACLE, CLASSIFIER = 0, 1  # Which asks, in a request's uid.
MESSAGE_SLOTS = 256  # Messages of a dialogue a request's uid can name.


def request_uid(d: Dialogue, turn: int, which: int) -> int:
  """A request's uid, which seeds a local model's sample: the dialogue's uid, the turn and
  which asks (ORACLE or CLASSIFIER), so each step's and each epoch's turns draw apart,
  whatever their place in the batch."""
  if not 0 <= turn < MESSAGE_SLOTS:
    raise ValueError(f"dialogue {d.uid}: message {turn} is past the {MESSAGE_SLOTS} a UCO "
                     "request can name")
  return (d.uid * MESSAGE_SLOTS + turn) * 2 + which


class Oracle(Protocol):
  """Per request, the turn's candidates and hints: `ReferenceOracle` or `LLMOracle`."""

  def __call__(self, requests: Sequence[OracleRequest]) -> list[OracleTurn]: ...


# -- Offline: from the reference answer -------------------------------------------------------

CANDIDATE_TEMPLATES = (
    "The answer is {answer}.",
    "So the final answer is \\boxed{{{answer}}}.",
    "I worked it out and got {answer}.",
    "After checking each step again, the result is {answer}.",
    "{answer}",
)
HINT_TEMPLATES = (
    "What is the problem asking you to find, and what do you already know that could help?",
    "Try splitting the problem into smaller parts and decide which quantity to work out first.",
    "Think about which relationship or formula connects the quantities given in the problem.",
    "Write down each given quantity, set up the equation that links them, and solve it one "
    "step at a time, checking each calculation.",
    "Here is how a problem like this is solved: list the givens, set up the relationship, "
    "compute step by step and check the result. Done for this problem, that gives {answer}.",
)


@dataclasses.dataclass
class ReferenceOracle:
  """Candidates that state the reference answer in five phrasings; fixed hints per level
  (only the worked example carries the answer). It knows nothing of the dialogue, so
  its candidates and hints are the same every turn: a smoke-test stand-in."""

  def __call__(self, requests: Sequence[OracleRequest]) -> list[OracleTurn]:
    return [OracleTurn(tuple(t.format(answer=r.dialogue.answer) for t in CANDIDATE_TEMPLATES),
                       tuple(t.format(answer=r.dialogue.answer) for t in HINT_TEMPLATES))
            for r in requests]


# -- An LLM oracle over a text backend ---------------------------------------------------------

def parse_oracle(text: str, n: int = N_CANDIDATES) -> OracleTurn | None:
  """The first n non-empty candidates and all five hints, or None."""
  obj = files.json_object(text or "")
  if not obj:
    return None
  candidates = obj.get("candidates")
  if not isinstance(candidates, list):
    return None
  candidates = [c.strip() for c in candidates if isinstance(c, str) and c.strip()]
  hints = obj.get("hints")
  if len(candidates) < n or not isinstance(hints, dict):
    return None
  hints = {str(k).strip().lower().replace("-", "_").replace(" ", "_"): v for k, v in hints.items()}
  levels = [hints.get(name) for name in SCAFFOLD_LEVELS]
  if not all(isinstance(h, str) and h.strip() for h in levels):
    return None
  return OracleTurn(tuple(candidates[:n]), tuple(h.strip() for h in levels))


@dataclasses.dataclass
class LLMOracle:
  backend: asking.TextBackend
  rounds: int = ROUNDS
  on_failure: str = ON_FAILURE
  stats: asking.AskStats = dataclasses.field(default_factory=asking.AskStats)  # Running totals.
  max_failed_share: float = 1.0  # Above this share of fallback turns: OracleError.

  def __post_init__(self):
    if self.on_failure not in ("reference", "error"):
      raise ValueError(f"on_failure {self.on_failure!r} is not 'reference' or 'error'")
    asking.check_max_failed_share(self.max_failed_share)

  def __call__(self, requests: Sequence[OracleRequest]) -> list[OracleTurn]:
    # The hints stand in for the tutor's turn (eq. 6), so the oracle sees the
    # dialogue before it, and the turn itself for the candidates (eq. 3).
    requests = [dataclasses.replace(
        r, uid=request_uid(r.dialogue, r.turn, ORACLE), prompt=prompts.render(
            "uco/oracle", problem=r.dialogue.problem, answer=r.dialogue.answer,
            conversation=transcript(r.dialogue.messages[:r.turn]) or "(no messages yet)",
            message=r.dialogue.messages[r.turn].text)) for r in requests]
    asked = asking.ask(requests, self.backend.complete, lambda r, text: parse_oracle(text),
                       self.rounds, self.stats, who="oracle", error=OracleError)
    if asked.unanswered and self.on_failure == "error":
      r = requests[asked.unanswered[0]]
      raise OracleError(f"the oracle gave no {N_CANDIDATES} candidates and 5 hints for problem "
                        f"{r.dialogue.problem_id}, turn {r.turn}, after {self.rounds} tries")
    failed = asked.to_policy("reference", self.max_failed_share,
                             f"oracle turns got no usable reply after {self.rounds} rounds and "
                             "would fall back to the reference oracle", OracleError)
    out = list(asked.answers)
    for n, turn in zip(failed, ReferenceOracle()([requests[n] for n in failed])):
      out[n] = dataclasses.replace(turn, fallback=True)
    return out


# -- The level ℓ(a_t) of a tutor message --------------------------------------------------------

def nearest_hint_level(message_embedding: ArrayLike, hint_embeddings: ArrayLike) -> int:
  """The level whose oracle hint is closest (cosine) to the tutor's message."""
  h = np.asarray(hint_embeddings, np.float64)
  m = np.asarray(message_embedding, np.float64)
  sims = h @ m / np.maximum(np.linalg.norm(h, axis=1) * np.linalg.norm(m), 1e-12)
  return int(np.argmax(sims))


def parse_level(text: str) -> int | None:
  obj = files.json_object(text or "")
  value = obj.get("level") if obj else None
  if isinstance(value, str):
    name = value.strip().lower().replace("-", "_").replace(" ", "_")
    value = SCAFFOLD_LEVELS.index(name) if name in SCAFFOLD_LEVELS else value
  try:
    level = int(value)
  except (TypeError, ValueError):
    return None
  return level if 0 <= level < len(SCAFFOLD_LEVELS) else None
