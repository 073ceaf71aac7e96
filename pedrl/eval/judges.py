"""The evaluation's judges: every sample's answer, read by the run's parse rule.

Training needs one value per sample, so a policy fills in what never parsed
(pedrl.rewards.judging). An evaluation follows its parse rule: under "strict",
the reference code's (paper 003's `eval.py` judges with `run_judges` of
eth-lre/PedagogicalRL @ bae10cd src/classroom.py), a decision whose replies never
parsed counts as OK, as there, and is counted (`policy/ok`); under "lenient",
pedrl's, it stays None, is counted (`policy/unparsed`), and the metrics leave it out
(pedrl.eval.metrics). A request the endpoint never answered (an API error in every
round) stays None under both: the reference's rule is for a reply, and there is none.
A score never parsed stays None under both. A batch in which more than
`max_failed_share` of one judge's requests got no answer (an endpoint mostly down, a
judge whose replies never parse) is still a JudgeError.
"""
import dataclasses
from collections.abc import Sequence

from pedrl.env.dialogue import Dialogue, Verdict
from pedrl.eval.metrics import OK, REJECT
from pedrl.rewards import asking, judging


def judge(dialogues: Sequence[Dialogue], specs: Sequence[judging.JudgeSpec],
          backend: asking.TextBackend, rounds: int, max_failed_share: float,
          stats: asking.AskStats, parse_rule: str = judging.PARSE_RULE,
          transcript_style: str = judging.TRANSCRIPT) -> list[Verdict]:
  """Per dialogue the judges' Verdict (the type training's judges return): per sample a
  bool for decision judges, a float for score judges; where no reply parsed, True (OK)
  for a decision under the strict rule, else None (r_ped and r_think are training's and
  stay None)."""
  judging.check_parse_rule(parse_rule)
  asking.check_max_failed_share(max_failed_share)
  requests = judging.requests_for(dialogues, specs, transcript_style)
  asked = asking.ask(requests, backend.complete,
                     lambda r, text: judging.parse(text, r.spec.kind, parse_rule,
                                                   r.spec.words), rounds,
                     stats, who="evaluation judge", error=judging.JudgeError)
  judging.check_each_judge(requests, asked.causes, max_failed_share,
                           f"evaluation judge answers were still missing after {rounds} rounds")
  answers: list[judging.Answer | None] = list(asked.answers)
  for n in asked.causes:
    # The reference reads judge replies that never parsed as OK; a request the endpoint
    # never answered (an API error in every round) has no reply, and stays unparsed.
    as_ok = (parse_rule == "strict" and n in asked.replied
             and requests[n].spec.kind == judging.DECISION)
    if as_ok:
      answers[n] = judging.filled(judging.DECISION, accept=True)
    stats["policy/ok" if as_ok else "policy/unparsed"] += 1
  out = {id(d): Verdict(decisions={s.name: [] for s in specs if s.kind == judging.DECISION},
                        scores={s.name: [] for s in specs if s.kind != judging.DECISION})
         for d in dialogues}
  for req, answer in zip(requests, answers):
    v = out[id(req.dialogue)]
    if req.spec.kind == judging.DECISION:
      v.decisions[req.spec.name].append(None if answer is None else answer.ok)
    else:
      v.scores[req.spec.name].append(None if answer is None else answer.score)
  return [out[id(d)] for d in dialogues]


@dataclasses.dataclass(frozen=True)
class Labels:
  """A dialogue's judge answers as evaluation records keep them (EvalRecord's
  leak_decisions, helpful_decisions, thinking_scores): per sample "OK"/"REJECT" for a
  decision (the reference's labels), a score as it is, None where no reply parsed."""
  leakage: list[str | None]  # "OK": the tutor gave no solution away (paper 003, fig. 14).
  helpfulness: list[str | None]  # "OK": the tutor's turns help (paper 003, fig. 15).
  thinking: list[float | None]  # Thinking quality in [0, 1] (paper 001); [] without that judge.


def labels(verdict: Verdict) -> Labels:
  """The Verdict's answers as Labels; every panel has a leakage and a helpfulness judge."""
  label = lambda x: None if x is None else (OK if x else REJECT)
  decisions = lambda name: [label(x) for x in verdict.decisions[name]]
  return Labels(leakage=decisions(judging.LEAKAGE), helpfulness=decisions(judging.HELPFULNESS),
                thinking=list(verdict.scores.get(judging.THINKING_QUALITY, [])))
