"""The evaluation's judges: every sample's answer, read by the run's parse rule.

Training needs one value per sample, so a policy fills in what never parsed
(pedrl.rewards.judging). An evaluation follows its parse rule: under "strict",
the reference code's (paper 003's `eval.py` judges with `run_judges` of
eth-lre/PedagogicalRL @ bae10cd src/classroom.py), a decision still unparsed after
every round counts as OK, as there, and is counted (`policy/ok`); under "lenient",
pedrl's, it stays None, is counted (`policy/unparsed`), and the metrics leave it out
(pedrl.eval.metrics). A score never parsed stays None under both. A batch in which
more than `max_failed_share` of the requests got no answer (an endpoint mostly down)
is still a JudgeError.
"""
from pedrl.env.dialogue import Dialogue, Verdict
from pedrl.eval.metrics import OK, REJECT
from pedrl.rewards import asking, judging


def judge(dialogues: list[Dialogue], specs, backend, rounds: int, max_failed_share: float,
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
                     lambda r, text: judging.parse(text, r.spec.kind, parse_rule), rounds,
                     stats, who="evaluation judge", error=judging.JudgeError)
  as_ok = parse_rule == "strict"
  failed = asked.to_policy("ok" if as_ok else "unparsed", max_failed_share,
                           f"evaluation judge answers were still missing after {rounds} rounds",
                           judging.JudgeError)
  answers = list(asked.answers)
  for n in failed:
    if as_ok and requests[n].spec.kind == judging.DECISION:
      answers[n] = True
  out = {id(d): Verdict(decisions={s.name: [] for s in specs if s.kind == judging.DECISION},
                        scores={s.name: [] for s in specs if s.kind != judging.DECISION})
         for d in dialogues}
  for req, answer in zip(requests, answers):
    v = out[id(req.dialogue)]
    (v.decisions if req.spec.kind == judging.DECISION else v.scores)[req.spec.name].append(answer)
  return [out[id(d)] for d in dialogues]


def labels(verdict: Verdict) -> dict[str, list]:
  """{judge name: per sample answer} as evaluation records keep them: "OK"/"REJECT" for
  a decision (the reference's labels), a score as it is, None where no reply parsed."""
  label = lambda x: None if x is None else (OK if x else REJECT)
  return {**{name: [label(x) for x in xs] for name, xs in verdict.decisions.items()},
          **verdict.scores}
