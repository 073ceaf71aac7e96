"""Reasoning preservation: loaders, graders and accuracy by hand; the job on the tiny tutor."""
import json
import subprocess
import sys

import pytest

from tests.helpers import jobs
from pedrl.env.problems import DataError
from pedrl.eval import reasoning, records as records_lib

TESTDATA = f"{jobs.ROOT}/testdata/reasoning"


def settings(**kw):
  kw = dict(dict(benchmarks="gsm8k,math500,mmlu", gsm8k_path=f"{TESTDATA}/gsm8k_sample.jsonl",
                 math500_path=f"{TESTDATA}/math500_sample.jsonl", mmlu_path=f"{TESTDATA}/mmlu"),
            **kw)
  return reasoning.ReasoningSettings(**kw)


@pytest.mark.parametrize("name, reply, target, got, correct", [
    ("gsm8k", "12 + 15 = 27, so the answer is 27.", "27", "27", True),
    ("gsm8k", "It sells 2,000 pens in all.", "2000", "2000", True),
    ("gsm8k", "First 3 boxes, then 41.5 each", "42", "41.5", False),
    ("gsm8k", "no number here", "5", None, False),
    ("math500", "So $x = \\boxed{0.75}$.", "\\frac{3}{4}", "0.75", True),
    ("math500", "\\boxed{4} then \\boxed{5}", "4", "5", False),  # The last box counts.
    ("math500", "The answer is 81.", "81", None, False),  # No box.
    ("mmlu", "Adding gives 15. The answer is B.", "B", "B", True),
    ("mmlu", "A) is wrong; the answer is C", "C", "C", True),
    ("mmlu", "D", "A", "D", False),
    ("mmlu", "I cannot decide.", "A", None, False),
    ("mmlu", "A quick check shows 15.", "A", None, False),  # "A" the article, no answer.
    ("mmlu", "(C) since 9 * 4 = 36", "C", "C", True),
    ("mmlu", "<think>the answer is B? no</think>The answer is D.", "D", "D", True),
    ("gsm8k", "<think>maybe 30</think>It is 27", "27", "27", True),
    ("gsm8k", "<think>cut off at 27", "27", None, False),  # Thinking only: no answer.
])
def test_graders(name, reply, target, got, correct):
  assert reasoning.grade(name, reply, target) == (got, correct)


@pytest.mark.parametrize("reply, options, got, correct", [
    ("So the answer is C.", 3, "C", True),
    ("The answer is D.", 3, None, False),  # Not a letter of a three-option question.
    ("E", 5, "E", False), ("<think>answer is C</think>Answer: B", 4, "B", False)])
def test_multiple_choice_grading_uses_the_questions_letters(reply, options, got, correct):
  assert reasoning.grade("wbeb", reply, "C", options) == (got, correct)


def test_wbeb_rows_of_every_shape_become_lettered_questions(tmp_path):
  xs = reasoning.wbeb(settings(benchmarks="wbeb", wbeb_path=f"{TESTDATA}/wbeb_sample.jsonl"))
  # Letters, indices from 0, option texts, dict options and a lower-case letter, by hand.
  assert [x.target for x in xs] == ["B", "C", "B", "C", "C", "A", "A", "B"]
  assert [x.category for x in xs] == ["SK", "SK", "PK", "PK", "AES", "AES", "DM", "DM"]
  assert [x.options for x in xs][2:4] == [4, 3] and xs[0].id == "sk-1"
  prompt = xs[3].chat[0]["content"]
  assert prompt.startswith("Answer the multiple-choice question (PK).") and "A, B or C." in prompt
  assert prompt.endswith("B. Which step comes first?\nC. Why does this step keep the equation "
                         "balanced?")
  for row, why in (({"answer": "E"}, "neither a letter"), ({"category": ""}, "no category"),
                   ({"options": {"A": "x", "C": "y"}}, "not A, B"),
                   ({"options": ["only one"]}, "2 to 26")):
    bad = dict({"question": "q", "options": ["x", "y"], "answer": "A", "category": "SK"}, **row)
    (tmp_path / "w.jsonl").write_text(json.dumps(bad) + "\n")
    with pytest.raises(DataError, match=f"w.jsonl, row 1: .*{why}"):
      reasoning.wbeb(settings(benchmarks="wbeb", wbeb_path=str(tmp_path / "w.jsonl")))


def test_multiple_choice_accuracy_per_category():
  rec = lambda cat, ok: records_lib.ReasoningRecord("wbeb", cat, 0, "", None, "A", ok, cat)
  rs = [rec("SK", True), rec("SK", False), rec("PK", True), rec("PK", True), rec("DM", False)]
  m = reasoning.accuracy(rs, seed=0, resamples=500, confidence=0.95)
  assert (m["wbeb_accuracy"], m["wbeb_n"]) == (0.6, 5)
  assert (m["wbeb/SK_accuracy"], m["wbeb/PK_accuracy"], m["wbeb/DM_accuracy"]) == (0.5, 1.0, 0.0)
  assert m["wbeb/PK_accuracy_ci"] == [1.0, 1.0] and m["wbeb/SK_n"] == 2
  from pedrl.tools import report  # Laid out as paper 001 table 2: a column per category.
  table = report.tables({"run": dict(m, n_examples=5, protocol={"kind": "reasoning"})})
  assert "| WBEB DM (%) | WBEB PK (%) | WBEB SK (%) | WBEB overall (%) |" in table
  assert "| run | 5 | 0.0 | 100.0 [100.0, 100.0] | 50.0 [" in table and "| 60.0 [" in table


def test_gsm8k_shots_come_from_the_train_file_or_leave_the_test_set():
  xs = reasoning.gsm8k(settings())  # No train file: the first 4 test rows are the shots.
  assert len(xs) == 8 - 4 and xs[0].id == "gsm8k/4"
  assert len(xs[0].chat) == 2 * 4 + 1 and xs[0].chat[-1]["role"] == "user"
  first_shot = xs[0].chat[1]["content"]
  assert "<<" not in first_shot and first_shot.endswith("The answer is 27.")
  assert [x.target for x in xs] == ["72", "2000", "55", "5"]  # "#### 2,000" -> 2000.
  xs = reasoning.gsm8k(settings(gsm8k_shots_path=f"{TESTDATA}/gsm8k_sample.jsonl",
                                gsm8k_shots=2))
  assert len(xs) == 8 and xs[0].id == "gsm8k/0" and len(xs[0].chat) == 5


def test_mmlu_reads_hendrycks_layout_and_names_bad_rows(tmp_path):
  xs = reasoning.mmlu(settings())
  assert [x.id for x in xs] == ["mmlu/arithmetic/0", "mmlu/arithmetic/1", "mmlu/geometry/0",
                                "mmlu/geometry/1"]
  assert len(xs[0].chat) == 2 * 5 + 1 and xs[0].target == "B"
  assert "A. 14\nB. 15\nC. 16\nD. 17" in xs[0].chat[-1]["content"]
  (tmp_path / "test").mkdir()
  (tmp_path / "dev").mkdir()
  (tmp_path / "dev" / "x_dev.csv").write_text("q,a,b,c,d,A\n" * 5)
  (tmp_path / "test" / "x_test.csv").write_text("q,a,b,c,d,A\nq,a,b,c,d,E\n")
  with pytest.raises(DataError, match=r"x_test.csv, row 2: not an MMLU row"):
    reasoning.mmlu(settings(mmlu_path=str(tmp_path)))
  (tmp_path / "test" / "x_test.csv").write_text("q,a,b,c,d,A\nq,a,b,c,d,BC\n")  # Not one letter.
  with pytest.raises(DataError, match=r"x_test.csv, row 2: not an MMLU row"):
    reasoning.mmlu(settings(mmlu_path=str(tmp_path)))


def test_settings_refuse_unknown_benchmarks_and_missing_data():
  with pytest.raises(ValueError, match="'mmlu_pro' is not one of"):
    settings(benchmarks="mmlu_pro")
  with pytest.raises(ValueError, match="needs its data: --config.eval.reasoning.math500_path"):
    settings(math500_path=None)


def test_accuracy_per_benchmark_with_intervals():
  rec = lambda b, ok: records_lib.ReasoningRecord(b, "x", 0, "", None, "1", ok)
  rs = [rec("gsm8k", True), rec("gsm8k", False), rec("gsm8k", True), rec("gsm8k", True),
        rec("math500", False)]
  m = reasoning.accuracy(rs, seed=0, resamples=500, confidence=0.95)
  assert m["gsm8k_accuracy"] == 0.75 and m["gsm8k_n"] == 4
  low, high = m["gsm8k_accuracy_ci"]
  assert 0.0 <= low < 0.75 < high <= 1.0
  assert m["math500_accuracy"] == 0.0 and "mmlu_accuracy" not in m


def test_mmlu_averages_subjects_as_lighteval():
  # LightEval reports MMLU as mmlu:_average, the mean of the mmlu:<subject> tasks' accuracies
  # (logging/info_loggers.py, MetricsLogger.aggregate). Two subjects: 3 of 4 and 0 of 1.
  rec = lambda subject, i, ok: records_lib.ReasoningRecord("mmlu", f"mmlu/{subject}/{i}", 0, "",
                                                           None, "A", ok)
  rs = [rec("anatomy", 0, True), rec("anatomy", 1, True), rec("anatomy", 2, True),
        rec("anatomy", 3, False), rec("astronomy", 0, False)]
  m = reasoning.accuracy(rs, seed=0, resamples=500, confidence=0.95)
  assert m["mmlu_accuracy"] == pytest.approx((0.75 + 0.0) / 2)  # Not 3 / 5.
  assert m["mmlu_question_accuracy"] == pytest.approx(3 / 5)
  assert (m["mmlu_n"], m["mmlu_subjects"]) == (5, 2)
  q = reasoning.accuracy(rs, seed=0, resamples=500, confidence=0.95, mmlu_average="question")
  assert q["mmlu_accuracy"] == pytest.approx(3 / 5)
  with pytest.raises(ValueError, match="mmlu_average 'x' is not one of"):
    settings(mmlu_average="x")


def test_real_files(shared_data):
  real = settings(gsm8k_path=shared_data("gsm8k", "test.jsonl"),
                  math500_path=shared_data("math500", "test.jsonl"), benchmarks="gsm8k,math500")
  xs = reasoning.examples(real)
  gsm = [x for x in xs if x.benchmark == "gsm8k"]
  assert len(gsm) == 1319 - 4 and all(float(x.target) == float(x.target) for x in gsm)
  math = [x for x in xs if x.benchmark == "math500"]
  assert len(math) == 500 and math[0].id.startswith("test/")


def _run(workdir, *more):
  cmd = [sys.executable, "-m", "pedrl.experiments.evaluate",
         "--config=experiments/evaluate.py:tiny,reasoning", f"--workdir={workdir}", *more]
  return subprocess.run(cmd, cwd=jobs.ROOT, env=jobs.env(), capture_output=True, text=True,
                        timeout=600)


@pytest.mark.job
def test_reasoning_job_shards_merge_to_the_whole(tmp_path):
  r = _run(tmp_path / "whole")
  assert r.returncode == 0, r.stderr[-3000:]
  assert "gsm8k_accuracy=" in r.stdout and "mmlu_accuracy=" in r.stdout
  for i in (0, 1):
    r = _run(tmp_path / "sharded", f"--config.eval.shard={i}",
             "--config.eval.num_shards=2")
    assert r.returncode == 0, r.stderr[-3000:]
  lines = {w: (tmp_path / w / "eval_reasoning.jsonl").read_text().splitlines()
           for w in ("whole", "sharded")}
  assert lines["whole"] == lines["sharded"] and len(lines["whole"]) == 4 + 4 + 4
  records = [json.loads(x) for x in lines["whole"]]
  assert all(r["reply"] for r in records)  # The tutor answered (visible text).
  whole, sharded = (json.loads((tmp_path / w / "metrics.json").read_text())
                    for w in ("whole", "sharded"))
  assert {k: v for k, v in whole.items() if k not in ("counts", "protocol")} == {
      k: v for k, v in sharded.items() if k not in ("counts", "protocol")}
  assert whole["protocol"]["kind"] == "reasoning" and whole["n_examples"] == 12
  r = _run(tmp_path / "long", "--config.eval.reasoning.max_new_tokens=900")
  assert r.returncode == 1 and "exceed the tutor's context" in r.stderr
