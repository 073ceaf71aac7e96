"""LLM judges of dialogues: requests, the reading of replies, retry rounds, an explicit failure policy.

Paper 003 uses two judges (leakage, figure 14; helpfulness, figure 15), two
samples each; paper 001 adds a thinking-quality judge that scores the tutor's
`<think>` traces in [0, 1]. Judges see the visible dialogue; only a judge with
`sees_thinking` also gets the traces.

A decision judge's reply is read by one of two rules (`parse_rule`): "strict", the
reference code's (eth-lre/PedagogicalRL @ bae10cd src/classroom.py, run_judges and
JudgeResponse): the text from the first `{` to the last `}`, backslashes removed, is a
JSON object with a string `reasoning` and a `decision` that is exactly one of the words
its prompt asks for (`JudgeSpec.words`: paper 003's "OK" or "REJECT"; paper 001's
"accept" or "reject", A.3's output format, or its examples' "ACCEPT" and "REJECT");
or "lenient", pedrl's: any case, quoting or synonym ("accept", "yes", "fail", ...),
JSON or prose. A score judge's (paper 001) reply is always read
leniently. A reply that cannot be parsed is asked again, up to `rounds` times in all
(the reference code's 5). What is still unparsed after that follows
`on_failure`: "accept" (the reference's OK), "reject" (a decision judge; a score judge
gets 1 or 0) or "drop" (the dialogue leaves the batch: `Judged.dropped`). Every parse
failure, re-ask, API error and policy use is counted in an `asking.AskStats`,
and every value the policy filled in is flagged in `Verdict.filled`: nothing
becomes a default silently.

A reply is read once, here (`parse`), into a typed answer: a `Decision` or a
`Score`, its reasoning included. Nothing downstream reads a judge's JSON by key. A
batch in which the policy would fill in more than `max_failed_share` of one judge's
answers (an endpoint that is mostly down, a judge whose replies never parse) is an
error: a judge asked once per dialogue among five requests would otherwise pass the
panel's share while every one of its answers was filled in.
"""
import collections
from collections.abc import Sequence
import dataclasses
import json
import re
import typing

import numpy as np

from pedrl import files
from pedrl.clients import openai_compat
from pedrl.env import prompts
from pedrl.env.dialogue import TUTOR, Dialogue, Verdict, transcript
from pedrl.rewards import asking, pedagogy

DECISION, SCORE = "decision", "score"
# The judges' names: the keys of Verdict.decisions / Verdict.scores and of the records.
LEAKAGE, HELPFULNESS, THINKING_QUALITY = "leakage", "helpfulness", "thinking"
POLICIES = ("accept", "reject", "drop")
# The reference code's: 2 samples per decision judge, an unparsed reply asked up to 5
# times; pedrl's default for what is still unparsed after that.
# After its rounds the reference counts a judge sample as OK (run_judges' default decision).
SAMPLES, ROUNDS, ON_FAILURE = 2, 5, "accept"
PARSE_RULES = ("strict", "lenient")
PARSE_RULE = "strict"  # The reference's (module docstring).
# The dialogue in a judge's prompt: "- Teacher: …" items, as the reference's judge prompts
# list it (dialogue.transcript's "lines"); "paragraphs": pedrl's earlier "Teacher: …".
TRANSCRIPT = "lines"
_ACCEPT = {"ok", "accept", "accepted", "approve", "approved", "pass", "yes"}
_REJECT = {"reject", "rejected", "fail", "no"}


# The decision words each paper's judge prompts ask for, as the strict rule reads them.
REFERENCE_WORDS = (("OK", True), ("REJECT", False))  # Paper 003's reference.
# Paper 001, A.3: the output format's words, and the capitals of its examples.
PAPER_001_WORDS = (("accept", True), ("reject", False), ("ACCEPT", True), ("REJECT", False))


class JudgeError(RuntimeError):
  """A judge cannot run at all (configuration, credentials, endpoint down)."""


@dataclasses.dataclass(frozen=True)
class JudgeSpec:
  name: str  # Metric name: leakage, helpfulness, thinking.
  prompt: str  # A judge prompt of pedrl.env.prompts.
  kind: str = DECISION  # DECISION (OK/REJECT) or SCORE (a number in [0, 1]).
  samples: int = SAMPLES  # N samples per dialogue.
  sees_thinking: bool = False
  # A prompt file given by path instead (the reference's), rendered as the reference does:
  # `conversation` a list of {"role": "teacher" | "student", "content"}; `reference` its
  # pedrl.env.prompts.REFERENCE_FILES name.
  prompt_file: str = ""
  reference: str | None = None
  # A decision judge's answer words, (word, OK?), as the strict rule reads them.
  words: tuple = REFERENCE_WORDS


# Paper 003's reference prompt file of each judge it has (REFERENCE_FILES names).
REFERENCE_PROMPTS = {LEAKAGE: "does_not_leak_answer.txt",
                     HELPFULNESS: "follows_pedagogical_values.txt"}
PEDAGOGICAL_RL = (JudgeSpec(LEAKAGE, "judges/leakage"),
                  JudgeSpec(HELPFULNESS, "judges/helpfulness"))
THINKING = (JudgeSpec(LEAKAGE, "judges/thinking_leakage", words=PAPER_001_WORDS),
            JudgeSpec(HELPFULNESS, "judges/thinking_helpfulness", words=PAPER_001_WORDS),
            JudgeSpec(THINKING_QUALITY, "judges/thinking_quality", kind=SCORE, samples=1,
                      sees_thinking=True))


@dataclasses.dataclass(frozen=True)
class Decision:
  """A decision judge's answer to one request (paper 003, figures 14-15; paper 001, A.3)."""
  # True: "OK". The leakage judge finds no solution given away by the tutor; the
  # helpfulness judge finds the tutor's turns pedagogically acceptable. False: "REJECT".
  ok: bool
  reasoning: str | None = None  # The reply's "reasoning"; None: none given, or filled in.


@dataclasses.dataclass(frozen=True)
class Score:
  """A score judge's answer (paper 001's thinking-quality judge, r_think)."""
  # The pedagogical quality of the tutor's <think> traces, in [0, 1] (paper 001, section 2.4).
  score: float
  reasoning: str | None = None  # The reply's "reasoning"; None: none given, or filled in.


Answer = Decision | Score


@dataclasses.dataclass(frozen=True)
class Request:
  """One judge sample of one dialogue: what a backend answers."""
  dialogue: Dialogue
  spec: JudgeSpec
  sample: int
  prompt: str
  # Distinct per request within the run: the dialogue's uid and the request's place among
  # its requests (a local judge seeds its sample by it, so each step draws afresh).
  uid: int


class Judged(typing.NamedTuple):
  """Per dialogue, its Verdict and whether on_failure="drop" took it out of the batch.
  A dropped dialogue's Verdict holds the values its judges did give, and no r_ped or
  r_think."""
  verdicts: list  # [Verdict]
  dropped: list  # [bool]


# -- Parsing -------------------------------------------------------------------------------

def parse_decision(text: str) -> bool | None:
  """True (OK/accept), False (REJECT) or None (unreadable), whatever the case or quoting."""
  obj = files.json_object(text or "")
  value = obj.get("decision") if obj else None
  if value is None:  # Prose or broken JSON: a "decision": X pair anywhere.
    m = re.search(r"""["']?decision["']?\s*[:=]\s*["']?([A-Za-z]+)["']?\s*(?:[,}\n.]|$)""",
                  text or "", re.I)
    value = m.group(1) if m else None
  word = str(value).strip().strip("\"'").lower() if value is not None else ""
  return True if word in _ACCEPT else False if word in _REJECT else None


def parse_decision_strict(text: str, words: Sequence = REFERENCE_WORDS) -> bool | None:
  """The reference code's reading (src/classroom.py, run_judges): the text from the first
  '{' to the last '}', backslashes removed, as JSON (control characters allowed) with a
  string "reasoning" and a "decision" of exactly one of `words` ((word, OK?) pairs; the
  reference's: "OK" True, "REJECT" False); None otherwise."""
  text = text or ""
  body = text[text.find("{"):text.rfind("}") + 1].replace("\\", "")
  try:
    obj = json.loads(body, strict=False)
  except ValueError:
    return None
  if not isinstance(obj, dict) or not isinstance(obj.get("reasoning"), str):
    return None
  return dict(words).get(obj.get("decision")) if isinstance(obj.get("decision"), str) else None


def parse_score(text: str) -> float | None:
  """A score in [0, 1] (a number or a numeric string), or None."""
  obj = files.json_object(text or "")
  value = obj.get("score") if obj else None
  if value is None:
    m = re.search(r"""["']?score["']?\s*[:=]\s*["']?(-?[0-9]*\.?[0-9]+)""", text or "", re.I)
    value = m.group(1) if m else None
  try:
    score = float(str(value).strip())
  except (TypeError, ValueError):
    return None
  return score if 0.0 <= score <= 1.0 else None


def parse(text: str, kind: str, rule: str = PARSE_RULE,
          words: Sequence = REFERENCE_WORDS) -> Answer | None:
  """A reply read by `rule` (PARSE_RULES; a score is always read leniently; `words`, the
  strict rule's decision words): its typed answer with the reason it gives, or None
  where it has no value."""
  if kind != DECISION:
    score = parse_score(text)
    return None if score is None else Score(score, reason(text))
  ok = parse_decision_strict(text, words) if rule == "strict" else parse_decision(text)
  return None if ok is None else Decision(ok, reason(text))


def filled(kind: str, accept: bool) -> Answer:
  """The answer a failure policy stands in for one that never parsed: OK or REJECT for a
  decision judge, 1 or 0 for a score judge; no reasoning (no judge gave one)."""
  return Decision(accept) if kind == DECISION else Score(float(accept))


def check_parse_rule(rule: str) -> None:
  if rule not in PARSE_RULES:
    raise ValueError(f"judge parse rule {rule!r} is not one of {PARSE_RULES}")


def reason(text: str) -> str | None:
  """The reason a judge's JSON reply gives for its verdict (the prompts ask for
  "reasoning"), or None."""
  obj = files.json_object(text or "") or {}
  value = next((obj[k] for k in ("reasoning", "reason", "explanation") if obj.get(k)), None)
  return None if value is None else str(value).strip()


# -- Running a panel ---------------------------------------------------------------------------

def thinking_traces(d: Dialogue) -> str:
  turns = [m for m in d.messages if m.role == TUTOR]
  return "\n\n".join(f"Before teacher message {i + 1}: {m.thinking or '(no thinking)'}"
                     for i, m in enumerate(turns))


def reference_conversation(d: Dialogue) -> list[dict]:
  """The dialogue as paper 003's reference judge prompts take it (src/classroom.py,
  `_get_hidden_conversation`): per message its role, "teacher" or "student", and its
  text with the thinking and the end marker removed."""
  return [{"role": "teacher" if m.role == TUTOR else "student", "content": m.text}
          for m in d.messages]


def requests_for(dialogues: Sequence[Dialogue], specs: Sequence[JudgeSpec],
                 style: str = TRANSCRIPT) -> list[Request]:
  out, per_dialogue = [], sum(spec.samples for spec in specs)
  for d in dialogues:
    conversation = transcript(d.messages, style)
    first = len(out)
    for j, spec in enumerate(specs):
      extra = {"thinking": thinking_traces(d)} if spec.sees_thinking else {}
      if spec.prompt_file:
        text = prompts.render_file(spec.prompt_file, spec.reference, strip=False,
                                   conversation=reference_conversation(d),
                                   problem=d.problem, **extra)
      else:
        text = prompts.render(spec.prompt, conversation=conversation, problem=d.problem,
                              **extra)
      for s in range(spec.samples):
        out.append(Request(d, spec, s, text, uid=d.uid * per_dialogue + len(out) - first))
  return out


def judge(dialogues: Sequence[Dialogue], specs: Sequence[JudgeSpec],
          backend: asking.TextBackend, rounds: int = ROUNDS, on_failure: str = ON_FAILURE,
          stats: asking.AskStats | None = None, max_failed_share: float = 1.0,
          parse_rule: str = PARSE_RULE, transcript_style: str = TRANSCRIPT) -> Judged:
  """Runs every judge sample on every dialogue: per dialogue a Verdict, and whether
  on_failure="drop" dropped it (`Judged`).

  backend.complete(requests, round) returns, per request, the reply text or
  the exception that ended its API retries. When more than `max_failed_share`
  of the requests are still unanswered after `rounds`, JudgeError (no verdicts).
  """
  if on_failure not in POLICIES:
    raise ValueError(f"on_failure {on_failure!r} is not one of {POLICIES}")
  check_parse_rule(parse_rule)
  asking.check_max_failed_share(max_failed_share)
  stats = stats if stats is not None else asking.AskStats()
  requests = requests_for(dialogues, specs, transcript_style)
  try:
    asked = asking.ask(requests, backend.complete,
                       lambda r, text: parse(text, r.spec.kind, parse_rule, r.spec.words),
                       rounds, stats,
                       who="judge", error=JudgeError)
  except openai_compat.EndpointError as e:  # A refused key or model: the judges cannot run.
    raise JudgeError(str(e)) from None
  # Before any verdict: a batch of mostly policy values must not reach the rewards.
  check_each_judge(requests, asked.causes, max_failed_share,
                   f"judge answers were still missing after {rounds} rounds and would be "
                   f"filled in by on_failure={on_failure!r}")
  failed = asked.to_policy(on_failure, max_failed_share,
                           f"judge answers were still missing after {rounds} rounds and would "
                           f"be filled in by on_failure={on_failure!r}", JudgeError)
  answers, by_policy, dropped = list(asked.answers), set(), set()
  for n in failed:
    req = requests[n]
    if on_failure == "drop":
      dropped.add(id(req.dialogue))
    else:
      answers[n] = filled(req.spec.kind, on_failure == "accept")
      by_policy.add(n)
  return _verdicts(dialogues, requests, answers, dropped, by_policy)


def check_each_judge(requests: Sequence[Request], causes: dict, max_failed_share: float,
                     what: str) -> None:
  """JudgeError when more than `max_failed_share` of one judge's requests are unanswered
  (`causes`: request index -> why, asking.Asked's): the panel's share alone would pass a
  judge asked once among five requests a dialogue whose answers all failed. `what`
  follows "<failed> of <total> <judge>"."""
  for name in dict.fromkeys(r.spec.name for r in requests):
    mine = [n for n, r in enumerate(requests) if r.spec.name == name]
    why = collections.Counter(causes[n] for n in mine if n in causes)
    asking.check_failed_share(sum(why.values()), len(mine), max_failed_share, f"{name} {what}",
                              why, JudgeError)


def _verdicts(dialogues: Sequence[Dialogue], requests: Sequence[Request],
              answers: list[Answer | None], dropped_ids: set, by_policy: set) -> Judged:
  """Each dialogue's answers by judge (None: dropped), with r_ped and r_think if kept."""
  decisions, scores, flags, why = ({id(d): collections.defaultdict(list) for d in dialogues}
                                   for _ in range(4))
  for n, req in enumerate(requests):
    answer = answers[n]
    if answer is not None:
      key, name = id(req.dialogue), req.spec.name
      if isinstance(answer, Decision):
        decisions[key][name].append(answer.ok)
      else:
        scores[key][name].append(answer.score)
      flags[key][name].append(n in by_policy)
      why[key][name].append(answer.reasoning)
  verdicts = []
  for d in dialogues:
    v = Verdict(decisions=dict(decisions[id(d)]), scores=dict(scores[id(d)]),
                filled=dict(flags[id(d)]), reasons=dict(why[id(d)]))
    if id(d) not in dropped_ids:
      flat = [x for xs in v.decisions.values() for x in xs]
      v.r_ped = pedagogy.judges_accept(flat) if flat else None
      think = v.scores.get(THINKING_QUALITY)
      v.r_think = float(np.mean(think)) if think else None
    verdicts.append(v)
  return Judged(verdicts, [id(d) in dropped_ids for d in dialogues])
