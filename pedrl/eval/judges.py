"""The evaluation's judges: every sample's answer as given, unparsed ones kept as None.

Training needs one value per sample, so a policy fills in what never parsed
(pedrl.rewards.judging). A table must not: here a reply that still does not
parse after every round stays None, is counted, and the metrics leave it out
(pedrl.eval.metrics). A batch in which more than `max_failed_share` of the
requests got no answer (an endpoint mostly down) is still a JudgeError.
"""
from pedrl.eval.metrics import OK, REJECT
from pedrl.rewards import asking, judging


def judge(dialogues, specs, backend, rounds: int, max_failed_share: float,
          stats: asking.AskStats) -> list[dict]:
  """Per dialogue {judge name: [answer per sample]}: "OK"/"REJECT" for decision
  judges, a float for score judges, None where no reply parsed."""
  asking.check_max_failed_share(max_failed_share)
  requests = judging.requests_for(dialogues, specs)
  asked = asking.ask(requests, backend.complete,
                     lambda r, text: judging.parse(text, r.spec.kind), rounds, stats,
                     who="evaluation judge", error=judging.JudgeError)
  asked.to_policy("unparsed", max_failed_share,
                  f"evaluation judge answers were still missing after {rounds} rounds",
                  judging.JudgeError)
  out = {id(d): {s.name: [] for s in specs} for d in dialogues}
  for req, answer in zip(requests, asked.answers):
    if req.spec.kind == judging.DECISION and answer is not None:
      answer = OK if answer else REJECT
    out[id(req.dialogue)][req.spec.name].append(answer)
  return [out[id(d)] for d in dialogues]
