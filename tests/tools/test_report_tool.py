"""`pedrl.tools.report`'s tables: rows of different protocols say how they differ, and
report.csv holds every reported number."""
import copy
import csv
import json
import os

from pedrl.tools import report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATUS = os.path.join(ROOT, "testdata", "records", "eval_v1", "shards", "status-00000-of-00002.json")


def _protocol():
  with open(STATUS) as f:
    return json.load(f)["protocol"]


def test_a_table_of_runs_of_different_protocols_says_where_they_differ():
  a = _protocol()
  b = copy.deepcopy(a)  # Another tutor, sharded otherwise: nothing to say.
  b["tutor"].update(path="/models/other", hidden_size=128)
  b["num_shards"] = b["eval"]["num_shards"] = 4
  c = copy.deepcopy(a)  # Another student, and run before eval.pedrm_unscored existed.
  c["student"]["path"] = "/models/student"
  del c["eval"]["pedrm_unscored"]
  metrics = {"n_problems": 4, "leak_rate": 0.5}
  runs = {"A": dict(metrics, protocol=a), "B": dict(metrics, protocol=b)}
  assert report.differences(runs) == ""
  assert report.tables(runs).count("|\n") == 3  # A header and two rows, no note.
  runs["C"] = dict(metrics, protocol=c)
  assert report.differences(runs) == (
      "Settings these rows differ in, besides the tutor under test:\n"
      '- `eval.pedrm_unscored`: "zero" (rows 1, 2); "drop" (row 3)\n'
      '- `student.path`: "testdata/models/llama3" (rows 1, 2); "/models/student" (row 3)')
  assert report.tables(runs).endswith(report.differences(runs))


def test_the_csv_holds_the_choice_benchmarks_and_the_solve_rates(tmp_path):
  m = {"n_examples": 5, "wbeb_accuracy": 0.6, "wbeb_accuracy_ci": [0.2, 1.0],
       "wbeb/SK_accuracy": 0.5, "pre_solve_rate": 0.25, "mmlu_question_accuracy": 0.7}
  report.write_csv({"run": m}, str(tmp_path / "report.csv"))
  (row,) = list(csv.DictReader(open(tmp_path / "report.csv")))
  assert (row["wbeb_accuracy"], row["wbeb_accuracy_low"], row["wbeb_accuracy_high"]) == (
      "0.6", "0.2", "1.0")
  assert row["wbeb/SK_accuracy"] == "0.5" and row["pre_solve_rate"] == "0.25"
  assert row["mmlu_question_accuracy"] == "0.7" and row["leak_rate"] == ""
