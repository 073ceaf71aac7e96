"""MathTutorBench tasks and scoring: prompts from the shared task files rendered byte for
byte as jinja2 renders them, examples built as SOURCES.md describes, parsers and metrics
on hand-written replies with hand-computed values."""
import json
import os

import jinja2
import pytest
import yaml

from pedrl.env.problems import DataError
from pedrl.mathtutorbench_rules import scoring
from pedrl.eval.mathtutorbench_harness import tasks

COUNTS = {"problem_solving": 1319, "socratic_questioning": 1319, "solution_correctness": 2004,
          "mistake_location": 2004, "mistake_correction": 1002, "scaffolding_generation": 1150,
          "pedagogy_following": 1150, "scaffolding_generation_hard": 327,
          "pedagogy_following_hard": 327}


@pytest.fixture(scope="module")
def data(request):
  root = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data")
  if not os.path.isdir(os.path.join(root, "mathtutorbench", "configs")):
    pytest.skip("../shared/data/mathtutorbench not present")
  return root


def _expected_example(task: str, data: str) -> dict:
  """The first example of each task, built here from the raw row by SOURCES.md's rules."""
  kind = tasks.TASKS[task][1]
  if kind.startswith("gsm8k"):
    name = "test_socratic.jsonl" if kind == "gsm8k_socratic" else "test.jsonl"
    with open(os.path.join(data, "gsm8k", name)) as f:
      return json.loads(f.readline())
  if kind.startswith("stepverify"):
    with open(os.path.join(data, "stepverify", "dataset.json")) as f:
      row = json.load(f)[0]
    cut = [t["user"] for t in row["dialog_history"]].index("Student")
    return {"question": row["problem"],
            "student_solution": "\\n".join(
                "Step %d - %s" % (i + 1, s) for i, s in
                enumerate(row["student_incorrect_solution"][:-1])),
            "is_error": True, "error_step": row["incorrect_index"] + 1,
            "dialog_history": "\n".join("Teacher: " + t["text"]
                                        for t in row["dialog_history"][:cut]),
            "student_chat_solution": row["dialog_history"][cut]["text"],
            "reference_solution": row["reference_solution"]}
  name = "mathdial_bridge_hard.json" if kind == "bridge_hard" else "mathdial_bridge.json"
  with open(os.path.join(data, "mathtutorbench", name)) as f:
    row = json.load(f)[0]
  turns = row["dialog_history"]
  return {"question": row["problem"], "reference_solution": row["reference_solution"],
          "dialog_history": "\n".join(t["user"] + ": " + t["text"] for t in turns[:-1]),
          "conversation_json": turns[:-1], "ground_truth_response": turns[-1]}


@pytest.mark.parametrize("task", list(tasks.TASKS))
def test_prompts_render_byte_for_byte(task, data):
  bench = os.path.join(data, "mathtutorbench")
  t = tasks.read_task(bench, task)
  examples = tasks.examples(task, data)
  assert len(examples) == COUNTS[task]
  want = _expected_example(task, data)
  assert {k: examples[0][k] for k in want} == want
  with open(os.path.join(bench, "configs", tasks.TASKS[task][0])) as f:
    raw = yaml.safe_load(f)
  shots = raw.get("few_shot_samples") or ""
  assert t.prompt(examples[0]) == jinja2.Template(raw["system_prompt"]).render(**want,
                                                                               shots=shots)
  assert t.stop == tuple(raw["stop"])
  if task in ("problem_solving", "mistake_correction", "mistake_location",
              "solution_correctness"):
    target = t.target(examples[0])
    assert target == {"problem_solving": lambda: want["answer"].split("### ")[-1].replace(
        ",", "").strip(), "mistake_correction": lambda: want["reference_solution"].split(
        "\n")[-1].replace(",", "").strip(), "mistake_location": lambda: str(want["error_step"]),
        "solution_correctness": lambda: "Yes"}[task]()


def test_stepverify_pairs_and_the_literal_backslash_n(data):
  ex = tasks.examples("mistake_location", data)
  first, second = ex[0], ex[1]
  assert first["is_error"] and not second["is_error"] and second["error_step"] == 0
  assert "\\n" in first["student_solution"] and "\n" not in first["student_solution"]
  assert first["question"] == second["question"]
  assert [e["is_error"] for e in tasks.examples("mistake_correction", data)[:3]] == [True] * 3


def test_bad_inputs_are_named(tmp_path, data):
  with pytest.raises(tasks.TaskError, match="unknown MathTutorBench task 'socratic'"):
    tasks.read_task(os.path.join(data, "mathtutorbench"), "socratic")
  with pytest.raises(tasks.TaskError, match="must be a MathTutorBench checkout"):
    tasks.read_task(str(tmp_path), "problem_solving")
  with pytest.raises(DataError, match="does not exist: task problem_solving"):
    tasks.examples("problem_solving", str(tmp_path))
  (tmp_path / "gsm8k").mkdir()
  (tmp_path / "gsm8k" / "test.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n'
                                                 '{"question": "q2"}\n')
  with pytest.raises(DataError, match=r"test.jsonl, row 2: needs question, answer"):
    tasks.examples("problem_solving", str(tmp_path))


def test_bridge_rows_read_as_the_harness_loader_reads_them(tmp_path):
  """dataloaders/mathbridge.py (MathTutorBench @ 54b6213): anyone but "Student" is
  "Teacher: ", the last turn is the reply to beat whoever says it, and a one-turn dialogue
  keeps that turn as its history. Hand-written rows the official files do not have."""
  rows = [{"problem": "p", "reference_solution": "r", "dialog_history": [
              {"user": "Tutor", "text": "Hi"}, {"user": "Student", "text": "Hey"},
              {"user": "Teacher", "text": "What is 2+2?"}]},
          {"problem": "p", "reference_solution": "r", "dialog_history": [
              {"user": "Teacher", "text": "Go on"}, {"user": "Student", "text": "4"}]},
          {"problem": "p", "reference_solution": "r", "dialog_history": [
              {"user": "Teacher", "text": "Only me"}]}]
  path = tmp_path / "bridge.json"
  path.write_text(json.dumps(rows))
  got = tasks.bridge(str(path))
  assert [x["dialog_history"] for x in got] == ["Teacher: Hi\nStudent: Hey", "Teacher: Go on",
                                                 "Teacher: Only me"]
  assert [x["ground_truth_response"]["text"] for x in got] == ["What is 2+2?", "4", "Only me"]
  assert [len(x["conversation_json"]) for x in got] == [2, 1, 0]
  path.write_text(json.dumps([{"problem": "p", "reference_solution": "r", "dialog_history": []}]))
  with pytest.raises(DataError, match="row 1: the dialogue has no turns"):
    tasks.bridge(str(path))


# -- Parsing and metrics, by hand --------------------------------------------------------------

@pytest.mark.parametrize("reply, want", [
    ("She has 3 apples, then 12 more, so 15", "15"), ("It is -2.5.", "-2.5"),
    ("1,234 eggs", "234"),  # The harness's regex: thousands separators split the number.
    ("no digits", None)])
def test_problem_solving_reads_the_last_number(reply, want):
  assert scoring.parse_number(reply) == want


def test_problem_solving_accuracy():
  m = scoring.problem_solving(["15", "2.0000001", None, "7"], ["15", "2", "3", "8"])
  assert m == {"accuracy_strict-match": 0.5, "accuracy_flexible-extract": 0.5}


@pytest.mark.parametrize("reply, want", [
    ("Yes, step 2 is wrong", True), ("No.", False), ("The solution is correct", True),
    ("I do not know", False),  # "no" inside "know"/"not": the harness's substring rule.
    ("NO errors", False), ("Yes and no", True)])
def test_yes_no_rule(reply, want):
  assert scoring.parse_yes_no(reply) is want


def test_solution_correctness_scores_by_hand():
  # truth: T T F F ; predictions: T F T F -> tp 1, fp 1, fn 1, tn 1.
  m = scoring.solution_correctness([True, False, True, False], ["Yes", "Yes", "No", "No"])
  assert m == {"accuracy": 0.5, "precision": 0.5, "recall": 0.5, "f1": 0.5}


@pytest.mark.parametrize("reply, want", [("Step 3", 3), ("2", 2), ("none of them", 0),
                                         ("Steps 4 and 2", 4)])
def test_first_integer_or_zero(reply, want):
  assert scoring.parse_step(reply) == want


def test_mistake_location_f1_by_hand():
  m = scoring.mistake_location([0, 2, 2, 1], [0, 2, 3, 1])
  assert m["f1_micro"] == pytest.approx(0.75)  # 3 of 4 right.
  # Per class (0, 1, 2, 3): F1 1, 1, 2/3, 0 -> macro 2.667/4; weighted by support 1,1,1,1.
  assert m["f1_macro"] == pytest.approx((1 + 1 + 2 / 3 + 0) / 4)
  assert m["f1_weighted"] == pytest.approx((1 + 1 + 2 / 3 + 0) / 4)


@pytest.mark.parametrize("reply, want", [
    ("Work: 3 + 4 = 7. Final Answer: $1,250", 1250.0), ("so it is 12 then 14", 14.0),
    ("Final Answer: 3.5 dollars, not 9", 3.5), ("no number", None)])
def test_final_answer_rule(reply, want):
  assert scoring.parse_final_answer(reply) == want


def test_mistake_correction_accuracy():
  assert scoring.mistake_correction([1250.0, None, 14.0], ["1,250", "3", "15"]) == {
      "accuracy": pytest.approx(1 / 3)}


def test_socratic_bleu_takes_the_best_line_and_skips_lines_without_questions():
  target = ("How many eggs are left? ** 16 - 3 = <<16-3=13>>13\n"
            "How much money? ** 13 * 2 = <<13*2=26>>26\n#### 26")
  assert scoring.reference_questions(target) == ["How many eggs are left?", "How much money?"]
  exact = scoring.parse_lines("unrelated words here\nHow many eggs are left?")
  nothing = scoring.parse_lines("zzz")
  m = scoring.socratic_questioning([exact, nothing], [target, target])
  assert m["bleu"] == pytest.approx((1.0 + 0.0) / 2)  # Best line exact: 100; no overlap: 0.
  assert m["avg_questions"] == pytest.approx((2 + 1) / 2)
  # An example whose target has no sub-question is skipped, not scored 0.
  assert scoring.socratic_questioning([exact], ["#### 3"]) == {"bleu": 0.0,
                                                              "avg_questions": 0.0}


def test_question_match():
  replies = ["What do you notice?", "Could you try again", "Great job.", "whyNot", "Why"]
  assert [scoring.is_question(r) for r in replies] == [True, True, False, False, True]
  assert scoring.teacher_turn_match(replies) == {"match": 3 / 5}
