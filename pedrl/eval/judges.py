"""The evaluation's judges: every sample's answer as given, unparsed ones kept as None.

Training needs one value per sample, so a policy fills in what never parsed
(pedrl.rewards.judging). A table must not: here a reply that still does not
parse after every round stays None, is counted, and the metrics leave it out
(pedrl.eval.metrics). A batch in which more than `max_failed_share` of the
requests got no answer (an endpoint mostly down) is still a JudgeError.
"""
from pedrl.env.dialogue import Dialogue, Verdict
from pedrl.eval.metrics import OK, REJECT
from pedrl.rewards import asking, judging


def judge(dialogues: list[Dialogue], specs, backend, rounds: int, max_failed_share: float,
          stats: asking.AskStats) -> list[Verdict]:
  """Per dialogue the judges' Verdict (the type training's judges return): per sample a
  bool for decision judges, a float for score judges, None where no reply parsed
  (nothing is filled in; r_ped and r_think are training's and stay None)."""
  asking.check_max_failed_share(max_failed_share)
  requests = judging.requests_for(dialogues, specs)
  asked = asking.ask(requests, backend.complete,
                     lambda r, text: judging.parse(text, r.spec.kind), rounds, stats,
                     who="evaluation judge", error=judging.JudgeError)
  asked.to_policy("unparsed", max_failed_share,
                  f"evaluation judge answers were still missing after {rounds} rounds",
                  judging.JudgeError)
  out = {id(d): Verdict(decisions={s.name: [] for s in specs if s.kind == judging.DECISION},
                        scores={s.name: [] for s in specs if s.kind != judging.DECISION})
         for d in dialogues}
  for req, answer in zip(requests, asked.answers):
    v = out[id(req.dialogue)]
    (v.decisions if req.spec.kind == judging.DECISION else v.scores)[req.spec.name].append(answer)
  return [out[id(d)] for d in dialogues]


def labels(verdict: Verdict) -> dict[str, list]:
  """{judge name: per sample answer} as evaluation records keep them: "OK"/"REJECT" for
  a decision (the reference's labels), a score as it is, None where no reply parsed."""
  label = lambda x: None if x is None else (OK if x else REJECT)
  return {**{name: [label(x) for x in xs] for name, xs in verdict.decisions.items()},
          **verdict.scores}
