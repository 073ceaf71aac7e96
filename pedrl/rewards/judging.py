"""LLM judges of dialogues: requests, tolerant parsing, retry rounds, an explicit failure policy.

Paper 003 uses two judges (leakage, figure 14; helpfulness, figure 15), two
samples each; paper 001 adds a thinking-quality judge that scores the tutor's
`<think>` traces in [0, 1]. Judges see the visible dialogue; only a judge with
`sees_thinking` also gets the traces.

A reply that cannot be parsed is asked again, up to `rounds` times in all
(the reference code's 5). What is still unparsed after that follows
`on_failure`: "accept", "reject" (a decision judge; a score judge gets 1 or 0)
or "drop" (the dialogue leaves the batch: `Verdict.dropped`). Every parse
failure, re-ask, API error and policy use is counted in `JudgeStats`, and every
value the policy filled in is flagged in `Verdict.filled`: nothing becomes a
default silently. A batch in which the policy would fill in more than
`max_failed_share` of the answers (an endpoint that is mostly down) is an error.
"""
import ast
import collections
import dataclasses
import json
import re

import numpy as np

from pedrl.env import prompts
from pedrl.env.dialogue import TUTOR, transcript
from pedrl.rewards import pedagogy

DECISION, SCORE = "decision", "score"
POLICIES = ("accept", "reject", "drop")
_ACCEPT = {"ok", "accept", "accepted", "approve", "approved", "pass", "yes"}
_REJECT = {"reject", "rejected", "fail", "no"}


class JudgeError(RuntimeError):
  """A judge cannot run at all (configuration, credentials, endpoint down)."""


@dataclasses.dataclass(frozen=True)
class JudgeSpec:
  name: str  # Metric name: leakage, helpfulness, thinking.
  prompt: str  # A judge prompt of pedrl.env.prompts.
  kind: str = DECISION  # DECISION (OK/REJECT) or SCORE (a number in [0, 1]).
  samples: int = 2  # N samples per dialogue (the reference code's 2).
  sees_thinking: bool = False


PEDAGOGICAL_RL = (JudgeSpec("leakage", "judges/leakage"),
                  JudgeSpec("helpfulness", "judges/helpfulness"))
THINKING = (JudgeSpec("leakage", "judges/thinking_leakage"),
            JudgeSpec("helpfulness", "judges/thinking_helpfulness"),
            JudgeSpec("thinking", "judges/thinking_quality", kind=SCORE, samples=1,
                      sees_thinking=True))


@dataclasses.dataclass(frozen=True)
class Request:
  """One judge sample of one dialogue: what a backend answers."""
  dialogue: object  # pedrl.env.dialogue.Dialogue
  spec: JudgeSpec
  sample: int
  prompt: str
  uid: int  # Distinct per request within a batch (seeds local sampling).


@dataclasses.dataclass
class Verdict:
  decisions: dict  # judge name -> [bool] per sample (DECISION judges).
  scores: dict  # judge name -> [float] per sample (SCORE judges).
  dropped: bool = False
  r_ped: float | None = None  # Π of every decision (paper 003 eq. 3); None when dropped.
  r_think: float | None = None  # Mean score of the thinking judge, if any.
  # judge name -> [bool] parallel to its decisions/scores: True where the on_failure
  # policy filled the value in (no judge said it), so a record tells real values apart.
  filled: dict = dataclasses.field(default_factory=dict)


class JudgeStats(collections.Counter):
  """requests, replies, parse_failures, reasks, api_errors (and api_errors/<kind>),
  retries (inside a backend), policy/<accept|reject|drop>."""


def failure_kind(error: Exception) -> str:
  """A counter name for a failed request: the error's `kind` if it has one (e.g.
  non_completion_reply), else its class name (RateLimitError, APITimeoutError, ...)."""
  return getattr(error, "kind", None) or type(error).__name__


def check_max_failed_share(share: float):
  if not 0.0 <= share <= 1.0:
    raise ValueError(f"max_failed_share {share} is not in [0, 1]")


def check_failed_share(failed: int, total: int, max_failed_share: float, what: str,
                       causes: collections.Counter, error: type | None = None):
  """Raises `error` (JudgeError) when failed / total exceeds max_failed_share: the batch's
  values would be mostly stand-ins, not answers. `what` follows "<failed> of <total>"."""
  if not total or failed / total <= max_failed_share:
    return
  top = ", ".join(f"{k} {v}" for k, v in causes.most_common(3))
  raise (error or JudgeError)(
      f"{failed} of {total} {what} ({failed / total:.0%}), more than "
      f"rewards.max_failed_share={max_failed_share:g} allows; causes: {top}")


# -- Parsing -------------------------------------------------------------------------------

def json_object(text: str):
  """The object between the first '{' and the last '}', as JSON or a Python literal."""
  text = re.sub(r"```(?:json)?", "", text)
  start, end = text.find("{"), text.rfind("}")
  if start == -1 or end <= start:
    return None
  body = text[start:end + 1]
  for load in (json.loads, ast.literal_eval):
    try:
      value = load(body)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
      continue
    if isinstance(value, dict):
      return {str(k).strip().lower(): v for k, v in value.items()}
  return None


def parse_decision(text: str) -> bool | None:
  """True (OK/accept), False (REJECT) or None (unreadable), whatever the case or quoting."""
  obj = json_object(text or "")
  value = obj.get("decision") if obj else None
  if value is None:  # Prose or broken JSON: a "decision": X pair anywhere.
    m = re.search(r"""["']?decision["']?\s*[:=]\s*["']?([A-Za-z]+)["']?\s*(?:[,}\n.]|$)""",
                  text or "", re.I)
    value = m.group(1) if m else None
  word = str(value).strip().strip("\"'").lower() if value is not None else ""
  return True if word in _ACCEPT else False if word in _REJECT else None


def parse_score(text: str) -> float | None:
  """A score in [0, 1] (a number or a numeric string), or None."""
  obj = json_object(text or "")
  value = obj.get("score") if obj else None
  if value is None:
    m = re.search(r"""["']?score["']?\s*[:=]\s*["']?(-?[0-9]*\.?[0-9]+)""", text or "", re.I)
    value = m.group(1) if m else None
  try:
    score = float(str(value).strip())
  except (TypeError, ValueError):
    return None
  return score if 0.0 <= score <= 1.0 else None


def parse(text: str, kind: str):
  return parse_decision(text) if kind == DECISION else parse_score(text)


# -- Running a panel ---------------------------------------------------------------------------

def thinking_traces(d) -> str:
  turns = [m for m in d.messages if m.role == TUTOR]
  return "\n\n".join(f"Before teacher message {i + 1}: {m.thinking or '(no thinking)'}"
                     for i, m in enumerate(turns))


def requests_for(dialogues, specs) -> list[Request]:
  out = []
  for d in dialogues:
    conversation = transcript(d.messages)
    for j, spec in enumerate(specs):
      extra = {"thinking": thinking_traces(d)} if spec.sees_thinking else {}
      text = prompts.render(spec.prompt, conversation=conversation, problem=d.problem, **extra)
      for s in range(spec.samples):
        out.append(Request(d, spec, s, text, uid=len(out)))
  return out


def judge(dialogues, specs, backend, rounds: int = 5, on_failure: str = "reject",
          stats: JudgeStats | None = None, max_failed_share: float = 1.0) -> list[Verdict]:
  """Runs every judge sample on every dialogue; one Verdict per dialogue.

  backend.complete(requests, round) returns, per request, the reply text or
  the exception that ended its API retries. When more than `max_failed_share`
  of the requests are still unanswered after `rounds`, JudgeError (no verdicts).
  """
  if on_failure not in POLICIES:
    raise ValueError(f"on_failure {on_failure!r} is not one of {POLICIES}")
  if rounds < 1:
    raise ValueError("rounds must be at least 1")
  check_max_failed_share(max_failed_share)
  stats = stats if stats is not None else JudgeStats()
  requests = requests_for(dialogues, specs)
  pending = list(requests)
  stats["requests"] += len(pending)
  answers = {}
  last_failure = {}  # uid -> why its latest round gave no value.
  for r in range(rounds):
    if not pending:
      break
    if r:
      stats["reasks"] += len(pending)
    replies = backend.complete(pending, r)
    if len(replies) != len(pending):
      raise JudgeError(f"backend returned {len(replies)} replies for {len(pending)} requests")
    failed = [req for req, rep in zip(pending, replies) if isinstance(rep, Exception)]
    if r == 0 and failed and len(failed) == len(pending):  # The endpoint is down, not flaky.
      first = next(rep for rep in replies if isinstance(rep, Exception))
      raise JudgeError(f"the judge backend failed every request of the batch "
                       f"({type(first).__name__}: {first})")
    still = []
    for req, reply in zip(pending, replies):
      if isinstance(reply, Exception):
        kind = f"api_errors/{failure_kind(reply)}"
        stats["api_errors"] += 1
        stats[kind] += 1
        last_failure[req.uid] = kind
        still.append(req)
        continue
      stats["replies"] += 1
      value = parse(reply, req.spec.kind)
      if value is None:
        stats["parse_failures"] += 1
        last_failure[req.uid] = "parse_failures"
        still.append(req)
      else:
        answers[req.uid] = value
    pending = still
  # Before any verdict: a batch of mostly policy values must not reach the rewards.
  check_failed_share(len(pending), len(requests), max_failed_share,
                     f"judge answers were still missing after {rounds} rounds and would "
                     f"be filled in by on_failure={on_failure!r}",
                     collections.Counter(last_failure[r.uid] for r in pending))
  failed_dialogues, filled = set(), set()
  for req in pending:
    stats[f"policy/{on_failure}"] += 1
    if on_failure == "drop":
      failed_dialogues.add(id(req.dialogue))
    else:
      accept = on_failure == "accept"
      answers[req.uid] = accept if req.spec.kind == DECISION else float(accept)
      filled.add(req.uid)
  return _verdicts(dialogues, requests, answers, failed_dialogues, filled)


def _verdicts(dialogues, requests, answers, dropped_ids, filled=frozenset()) -> list[Verdict]:
  verdicts = {id(d): Verdict(collections.defaultdict(list), collections.defaultdict(list),
                             filled=collections.defaultdict(list)) for d in dialogues}
  for req in requests:
    if req.uid in answers:
      v = verdicts[id(req.dialogue)]
      (v.decisions if req.spec.kind == DECISION else v.scores)[req.spec.name].append(
          answers[req.uid])
      v.filled[req.spec.name].append(req.uid in filled)
  verdicts = [verdicts[id(d)] for d in dialogues]
  for d, v in zip(dialogues, verdicts):
    v.decisions, v.scores, v.filled = dict(v.decisions), dict(v.scores), dict(v.filled)
    if id(d) in dropped_ids:
      v.dropped = True
      continue
    flat = [x for xs in v.decisions.values() for x in xs]
    v.r_ped = pedagogy.judges_accept(flat) if flat else None
    think = v.scores.get("thinking")
    v.r_think = float(np.mean(think)) if think else None
  return verdicts
