"""The evaluation's metrics on hand-built records, against values computed by hand here."""
import math

import numpy as np
import pytest

from pedrl.env.dialogue import STUDENT, TUTOR, Dialogue, Message, Verdict
from pedrl.eval import judges, metrics, records as records_lib
from pedrl.eval.records import EvalRecord
from pedrl.rewards import asking, judging
from pedrl.rewards.judging import JudgeError


def record(problem, sample=0, pre=0.0, post=0.0, leak=(), helpful=(), pedrm=(), thinking=()):
  messages = [Message(role=TUTOR, text="Which numbers do we know?"),
              Message(role=STUDENT, text="Four and five.")]
  d = Dialogue(problem_id=problem, problem=f"problem {problem}", answer="9", scenario="guided",
               rollout=sample, uid=sample, messages=messages, end_reason="max_turns")
  return EvalRecord(problem_id=problem, sample=sample, batch=0, pre_solve_rate=pre,
                    post_solve_rate=post, leak_decisions=list(leak),
                    helpful_decisions=list(helpful), thinking_scores=list(thinking),
                    pedrm_turn_scores=list(pedrm), dialogue=d)


def test_delta_solve_rate_averages_problems_not_dialogues():
  # Problem a: pre 0.25, three dialogues post 0.5, 1.0, 0.75 -> Δ = 0.75 - 0.25 = 0.5.
  # Problem b: pre 0.5, one dialogue post 0.25 -> Δ = -0.25.  Mean over problems: 0.125.
  # (Pooling the four dialogues would give (0.25 + 0.75 + 0.5 - 0.25) / 4 = 0.3125.)
  rs = [record("a", 0, 0.25, 0.5), record("a", 1, 0.25, 1.0), record("a", 2, 0.25, 0.75),
        record("b", 0, 0.5, 0.25)]
  m = metrics.compute(rs, resamples=200)
  assert m["delta_solve_rate"] == pytest.approx(0.125)
  assert m["pre_solve_rate"] == pytest.approx(0.375)
  assert m["post_solve_rate"] == pytest.approx(0.5)  # (0.75 + 0.25) / 2.
  assert m["n_problems"] == 2 and m["n_dialogues"] == 4


def test_leak_rate_leaves_unparsed_samples_out_and_counts_them():
  rs = [record("a", 0, leak=["REJECT", None]),  # 1 of 1 parsed -> 1.0 (not 0.5).
        record("a", 1, leak=["OK", "REJECT"]),  # 0.5
        record("a", 2, leak=[None, None]),  # no value: left out, counted.
        record("b", 0, leak=["OK", "OK"])]  # 0.0
  m = metrics.compute(rs, resamples=200)
  assert m["leak_rate"] == pytest.approx((0.75 + 0.0) / 2)  # a: (1.0 + 0.5) / 2.
  assert m["leak_any_rate"] == pytest.approx((1.0 + 0.0) / 2)
  assert m["leak_samples"] == 8 and m["leak_unparsed_samples"] == 3
  assert m["leak_unparsed_dialogues"] == 1
  # Read as OK (the reference's silent default) the rate would be lower: a's dialogues
  # 0.5, 0.5, 0.0 -> 1/3, overall 1/6.
  assert m["leak_rate"] != pytest.approx(1 / 6)


def test_helpful_rate_is_the_share_of_ok_samples():
  rs = [record("a", 0, helpful=["OK", "REJECT"]), record("a", 1, helpful=["OK", "OK"]),
        record("b", 0, helpful=["REJECT", None])]
  m = metrics.compute(rs, resamples=200)
  assert m["helpful_rate"] == pytest.approx(((0.5 + 1.0) / 2 + 0.0) / 2)
  assert m["helpful_all_rate"] == pytest.approx(((0.0 + 1.0) / 2 + 0.0) / 2)
  assert math.isnan(m["thinking_score"])  # No thinking judge: NaN, not 0.


def test_pedrm_micro_pools_turns_macro_averages_dialogues():
  rs = [record("a", 0, pedrm=[1.0, 2.0, 3.0]),  # Dialogue mean 2.
        record("b", 0, pedrm=[6.0])]  # Dialogue mean 6.
  m = metrics.compute(rs, resamples=200)
  assert m["pedrm_macro"] == pytest.approx(4.0)  # (2 + 6) / 2
  assert m["pedrm_micro"] == pytest.approx(3.0)  # (1 + 2 + 3 + 6) / 4
  assert m["pedrm_turns"] == 4
  # Macro is the mean of per-dialogue means: a second dialogue of problem a (mean 0) is a
  # third dialogue, not half of problem a's weight.
  rs.append(record("a", 1, pedrm=[0.0]))
  m = metrics.compute(rs, resamples=200)
  assert m["pedrm_macro"] == pytest.approx((2.0 + 6.0 + 0.0) / 3)
  assert m["pedrm_micro"] == pytest.approx(12.0 / 5)
  assert m["pedrm_dialogues"] == 3
  # No scored tutor turn: 0 in the macro, as the reference's eval.py averages
  # `sum(score) / len(score) if len(score) != 0 else 0` over every dialogue; none in the micro.
  rs.append(record("c", 0, pedrm=[]))
  m = metrics.compute(rs, resamples=200)
  assert m["pedrm_macro"] == pytest.approx(8.0 / 4)
  assert m["pedrm_micro"] == pytest.approx(12.0 / 5)
  assert (m["pedrm_unscored_dialogues"], m["pedrm_unscored"]) == (1, "zero")
  # pedrl's earlier choice, kept as an option: left out of the macro.
  m = metrics.compute(rs, resamples=200, pedrm_unscored="drop")
  assert m["pedrm_macro"] == pytest.approx(8.0 / 3) and m["pedrm_unscored_dialogues"] == 1
  # The named functions give the table's numbers alone.
  assert metrics.pedrm_macro(rs) == pytest.approx(8.0 / 4)
  assert metrics.pedrm_macro(rs, unscored="drop") == pytest.approx(8.0 / 3)
  assert metrics.pedrm_micro(rs) == pytest.approx(12.0 / 5)
  assert math.isnan(metrics.pedrm_micro([record("c", 0, pedrm=[])]))
  # No Ped-RM at all (no scored turn anywhere): NaN, never a 0 macro.
  m = metrics.compute([record("c", 0, pedrm=[]), record("d", 0, pedrm=[])], resamples=200)
  assert math.isnan(m["pedrm_macro"]) and math.isnan(m["pedrm_micro"])


def test_bootstrap_interval_contains_the_mean_and_is_reproducible():
  rng = np.random.default_rng(3)
  values = rng.random(60)
  low, high = metrics.bootstrap_interval(values, seed=7, resamples=4000)
  assert low < values.mean() < high
  assert (low, high) == metrics.bootstrap_interval(values, seed=7, resamples=4000)
  assert (low, high) != metrics.bootstrap_interval(values, seed=8, resamples=4000)
  # Width close to the normal approximation's 2 × 1.96 × sd / sqrt(n).
  normal = 2 * 1.96 * values.std(ddof=1) / np.sqrt(values.size)
  assert high - low == pytest.approx(normal, rel=0.15)
  assert all(map(math.isnan, metrics.bootstrap_interval([0.3], seed=0)))  # One problem.
  # Pooled (micro): resampling problems' sums and counts together.
  sums, counts = values * 3, np.full(60, 3.0)
  pooled = metrics.pooled_interval(sums, counts, seed=7, resamples=4000)
  assert pooled == pytest.approx((low, high), abs=0.02)


def test_metrics_carry_intervals_over_problems():
  rs = [record(str(i), 0, pre=0.0, post=float(i % 2)) for i in range(20)]
  m = metrics.compute(rs, seed=1, resamples=2000)
  low, high = m["delta_solve_rate_ci"]
  assert low < m["delta_solve_rate"] == 0.5 < high
  assert m["pre_solve_rate_ci"] == [0.0, 0.0]  # No spread.
  assert metrics.compute(rs, seed=1, resamples=2000) == m


def test_records_round_trip_without_training_tokens(tmp_path):
  r = record("a", 0, leak=["OK", None], pedrm=[0.5])
  r.dialogue.tutor_ids, r.dialogue.tutor_mask = [1, 2, 3], [0, 1, 1]
  path = str(tmp_path / "r.jsonl")
  records_lib.save([r], path)
  (back,) = records_lib.load(path)
  assert back.leak_decisions == ["OK", None] and back.pedrm_turn_scores == [0.5]
  assert back.dialogue.messages == r.dialogue.messages and back.dialogue.tutor_ids == []
  with open(path, "a") as f:
    f.write('{"schema": 1, "problem_id": "x"}\n')
  with pytest.raises(ValueError, match="record 2: not an evaluation record"):
    records_lib.load(path)


class Scripted:
  """A judge backend answering from a function of the request."""

  def __init__(self, reply):
    self.reply = reply

  def complete(self, requests, round_=0):
    return [self.reply(r, round_) for r in requests]


def test_eval_judges_keep_unparsed_samples_as_none_under_the_lenient_rule():
  ds = [record(p).dialogue for p in "abc"]
  # Dialogue a: every reply prose; b: REJECT; c: the first sample parses on the second round.
  def reply(r, round_):
    if r.dialogue is ds[0]:
      return "I think it is fine."
    if r.dialogue is ds[1]:
      return '{"decision": "REJECT"}'
    return '{"decision": "OK"}' if round_ or r.sample else "no"
  stats = asking.AskStats()
  verdicts = judges.judge(ds, judging.PEDAGOGICAL_RL, Scripted(reply), rounds=2,
                          max_failed_share=0.5, stats=stats, parse_rule="lenient")
  # Training's type: booleans per decision sample, None where nothing parsed, none filled.
  assert all(isinstance(v, Verdict) and not v.filled for v in verdicts)
  assert verdicts[0].decisions == {"leakage": [None, None], "helpfulness": [None, None]}
  assert verdicts[1].decisions == {"leakage": [False, False], "helpfulness": [False, False]}
  out = [judges.labels(v) for v in verdicts]  # As the records keep them.
  assert out[0] == judges.Labels([None, None], [None, None], [])
  assert out[1] == judges.Labels(["REJECT", "REJECT"], ["REJECT", "REJECT"], [])
  assert out[2] == judges.Labels(["OK", "OK"], ["OK", "OK"], [])
  assert stats["policy/unparsed"] == 4 and stats["parse_failures"] == 4 + 4 + 2
  with pytest.raises(JudgeError, match="more than rewards.max_failed_share"):
    judges.judge(ds, judging.PEDAGOGICAL_RL, Scripted(reply), rounds=2,
                 max_failed_share=0.2, stats=asking.AskStats(), parse_rule="lenient")


def test_eval_judges_count_unparsed_samples_as_ok_under_the_strict_rule():
  # The reference's evaluation (eval.py through src/classroom.py run_judges): a reply is read
  # only as JSON whose decision is exactly OK or REJECT, and a sample unparsed after every
  # round counts as OK, so it stays in the leak share's denominator as a pass.
  ds = [record(p).dialogue for p in "abc"]
  def reply(r, round_):
    if r.dialogue is ds[0]:
      return '{"reasoning": "lower case", "decision": "reject"}'  # Never read.
    if r.dialogue is ds[1]:
      return '{"reasoning": "gives 7", "decision": "REJECT"}'
    return '{"reasoning": "", "decision": "OK"}' if round_ or r.sample else "Decision: REJECT"
  stats = asking.AskStats()
  verdicts = judges.judge(ds, judging.PEDAGOGICAL_RL, Scripted(reply), rounds=2,
                          max_failed_share=0.5, stats=stats)  # The default rule: strict.
  out = [judges.labels(v) for v in verdicts]
  assert out[0] == judges.Labels(["OK", "OK"], ["OK", "OK"], [])
  assert out[1] == judges.Labels(["REJECT", "REJECT"], ["REJECT", "REJECT"], [])
  assert out[2] == judges.Labels(["OK", "OK"], ["OK", "OK"], [])
  assert stats["policy/ok"] == 4 and stats["parse_failures"] == 4 + 4 + 2


def test_strict_rule_reads_no_reply_as_ok_when_the_endpoint_never_answered():
  """The strict rule fills a reply that never parsed; a request whose every round failed at
  the API has no reply, so it stays None, is counted as unparsed, and leaves the rates."""
  ds = [record(p).dialogue for p in "ab"]
  def reply(r, round_):  # a: the leakage judge's first sample fails at the API every round;
    if r.dialogue is ds[0] and r.spec.name == judging.LEAKAGE and r.sample == 0:
      return ConnectionError("connection reset")
    if r.dialogue is ds[1] and r.spec.name == judging.LEAKAGE and r.sample == 0:
      # b: its first sample's replies never parse, and its last round fails at the API.
      return ConnectionError("connection reset") if round_ == 2 else "Decision: REJECT"
    return '{"reasoning": "gives 7", "decision": "REJECT"}'
  stats = asking.AskStats()
  verdicts = judges.judge(ds, judging.PEDAGOGICAL_RL, Scripted(reply), rounds=3,
                          max_failed_share=0.5, stats=stats)
  out = [judges.labels(v) for v in verdicts]
  assert out[0].leakage == [None, "REJECT"] and out[1].leakage == ["OK", "REJECT"]
  assert stats["policy/unparsed"] == 1 and stats["policy/ok"] == 1
  # a's leak rate is that of the sample that was judged (1.0), not 0.5 with a made-up OK.
  records = [record(p, 0, leak=o.leakage) for p, o in zip("ab", out)]
  m = metrics.compute(records, resamples=10)
  assert m["leak_rate"] == (1.0 + 0.5) / 2 and m["leak_unparsed_samples"] == 1


def test_counts_read_and_write_the_files_flat_keys():
  """A shard's counts: typed groups in the code, GROUP/KEY in the files as pedrl wrote them
  before; summed over shards; a key naming no group is refused with where it was read."""
  from pedrl.eval.counts import Counts, api_counts
  flat = {"judge/requests": 8, "pedrm_inputs_cut/pedagogy_following": 1, "pipeline/dropped": 0,
          "seconds/dialogues": 1.5, "seconds/load": 2.0, "tutor_endpoint/calls": 4}
  a = Counts.from_json(flat, "status-0-of-2.json")
  assert a.seconds == {"dialogues": 1.5, "load": 2.0} and a.judge == {"requests": 8}
  assert a.clients == {"tutor_endpoint": {"calls": 4}} and a.to_json() == flat
  a.add(Counts.from_json({"seconds/load": 1.0, "backbone/calls": 3}))
  assert a.seconds["load"] == 3.0 and a.clients["backbone"] == {"calls": 3}

  class Client:
    stats = {"calls": 2}
  with api_counts(a, tutor_endpoint=Client(), student_endpoint=None):
    Client.stats = {"calls": 5, "retries": 1}
  assert a.clients["tutor_endpoint"] == {"calls": 7, "retries": 1}
  assert "student_endpoint" not in a.clients
  with pytest.raises(ValueError, match=r"^status-1-of-2.json: the count 'load' names no group"):
    Counts.from_json({"load": 1.0}, "status-1-of-2.json")
