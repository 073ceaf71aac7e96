"""The BVR constraint checker on hand-written replies with hand-computed expectations, and
on the human teacher turns of the real bridge data (when ../shared/data has it)."""
import pytest

from pedrl.mathtutorbench_rules import constraints

from pedrl.eval.mathtutorbench_harness import tasks

REF = "Ignatius has 8 tires because 2 x 4 = 8\nHe has 1200 tires in all\n 1,200"
HASHES = "How many spoons? ** 12+3=<<12+3=15>>15 spoons.\n#### 12"
BRIDGE = {"question": "q", "reference_solution": REF, "dialog_history": "",
          "conversation_json": [], "ground_truth_response": {"text": "", "user": "Teacher"}}


def _tutor(response, reference=REF, task="scaffolding_generation"):
  return constraints.violations(task, response, dict(BRIDGE, reference_solution=reference))


def test_final_answer():
  assert constraints.final_answer(REF) == "1200"  # The last number, its comma dropped.
  assert constraints.final_answer(HASHES) == "12"  # The '####' line wins over later text.
  assert constraints.final_answer("a = 3\n#### -5") == "-5"
  assert constraints.final_answer("3 - 1 = 24-1") == "1"  # A '-' between numbers: no sign.
  assert constraints.final_answer("N/A") is None
  assert constraints.final_answer("#### five") is None
  assert constraints.final_answer("x = 6/8\n 3/4") == "3/4"


def test_empty_everywhere():
  for task in tasks.TASKS:
    assert constraints.violations(task, " \n\t", BRIDGE) == ("empty",)


def test_states_answer_with_commas_and_whole_numbers():
  assert _tutor("So the total is 1,200 tires.") == ("states_answer",)
  assert _tutor("So the total is 1200.0 tires.") == ("states_answer",)
  assert _tutor("You need 12,000 tires, or 120 or 1,2000.") == ()
  assert _tutor("Is it 12?", reference=HASHES) == ("states_answer",)
  assert _tutor("Check 120 and 3.12 and 12.5 again.", reference=HASHES) == ()
  assert _tutor("What is 112 - 100?", reference=HASHES) == ()
  assert _tutor("It is -12 degrees.", reference=HASHES) == ("states_answer",)  # Sign ignored.
  assert _tutor("It is 3/5 of her age.", reference="#### 3") == ()  # A fraction: one number.
  assert _tutor("Half, 0.75 or 1/2.", reference="#### 1/2") == ("states_answer",)
  assert _tutor("Half or 0.75.", reference="#### 1/2") == ()
  assert _tutor("Say 5 or 7.", reference="N/A") == ()  # No numeric answer: not checked.


def test_several_questions():
  assert _tutor("What is 2 x 4? And how many does the friend have?") == (
      "several_questions",)
  assert _tutor("Good start! How many tires does he have?") == ()
  assert _tutor("Why?! Think.") == ()  # One question: '?!' closes it.
  assert _tutor("Is 3.5 right? Or 4?") == ("several_questions",)
  assert _tutor('He asked "why?"\nWhat now?') == ("several_questions",)


def test_too_long():
  assert constraints.sentences("It is 3.5 now. Look!\nThen\n\n:)") == [
      "It is 3.5 now.", "Look!", "Then"]
  three = "Good work. You found 8 tires. Now count the friend's."
  for task in tasks.PEDAGOGICAL:
    assert constraints.TASK_FILE_RULES[task].max_sentences == 2
    assert _tutor(three, task=task) == ("too_long",)
    assert _tutor("Good work. You found 8 tires.", task=task) == ()
  assert _tutor("Is it 1200? Why? Explain.") == ("states_answer", "several_questions",
                                                  "too_long")


def test_one_question_facts():
  assert [t for t in tasks.PEDAGOGICAL if constraints.TASK_FILE_RULES[t].one_question] == [
      "pedagogy_following", "pedagogy_following_hard"]


@pytest.mark.parametrize("task,readable,unreadable", [
    ("problem_solving", "The answer is 42.", "I do not know."),
    ("socratic_questioning", "How many tires? How many bikes?", "Count the tires."),
    ("solution_correctness", "No, it is correct.", "Nothing is wrong; notably fine."),
    ("solution_correctness", "YES", "yesterday"),
    ("mistake_location", "Step 3", "None of them."),
    ("mistake_correction", "Final Answer: 1,200", "Final Answer: twelve"),
])
def test_structured(task, readable, unreadable):
  assert constraints.violations(task, readable, {}) == ()
  assert constraints.violations(task, unreadable, {}) == ("unparsable",)


def test_unknown_task():
  with pytest.raises(tasks.TaskError):
    constraints.violations("nope", "x", {})


def test_rates():
  rows = [("problem_solving", ()), ("problem_solving", ("unparsable",)),
          ("scaffolding_generation", ("states_answer", "too_long")),
          ("scaffolding_generation", ()), ("scaffolding_generation", ("too_long",)),
          ("pedagogy_following", ("empty",))]
  assert constraints.rates(rows) == {
      "bvr": 4 / 6, "bvr/problem_solving": 1 / 2, "bvr/scaffolding_generation": 2 / 3,
      "bvr/pedagogy_following": 1.0, "violations/empty": 1, "violations/states_answer": 1,
      "violations/several_questions": 0, "violations/too_long": 2,
      "violations/unparsable": 1, "checked": 6, "broken": 4}
  assert constraints.rates([])["checked"] == 0


def test_human_teacher_turns(shared_data):
  shared_data("mathtutorbench", "mathdial_bridge.json")
  data = shared_data()
  examples = tasks.examples("scaffolding_generation", data)
  rows = []
  for example in examples:
    found = constraints.violations("scaffolding_generation",
                                   example["ground_truth_response"]["text"], example)
    assert isinstance(found, tuple) and set(found) <= set(constraints.RULES)
    rows.append(("scaffolding_generation", found))
  assert constraints.rates(rows)["checked"] == len(examples) > 0
  # Read by hand: 0 one question; 3 two questions in one '?' sentence; 5 two sentences (the
  # cap); 7 stops before "32" (the answer); 8 and 11 three lines ending in the answer.
  by_hand = {0: (), 3: (), 5: (), 7: (), 8: ("states_answer", "too_long"),
             11: ("states_answer", "too_long")}
  assert {i: rows[i][1] for i in by_hand} == by_hand


def test_every_tutors_results_carry_bvr_beside_the_nine_numbers():
  """The MathTutorBench job's metrics (whatever answered: a model, a trained tutor, an
  endpoint, an agent) carry BVR per task from the replies, and its table BVR over all
  tasks and BVR† on the hard splits; each value counted by hand below."""
  from pedrl.mathtutorbench_rules import scoring
  from pedrl.eval.mathtutorbench_harness import results
  from pedrl.eval.records import BenchRecord
  ref = {"reference_solution": "3 + 4 = 7\n#### 7"}

  def rec(task, i, response, target=None):
    return BenchRecord(task, i, 0, "", response, target, scoring.parse(task, response),
                       context=ref if task in tasks.PEDAGOGICAL else None)
  records = [
      rec("problem_solving", 0, "The answer is 18.", "18"),  # Compliant.
      rec("problem_solving", 1, "I do not know.", "18"),  # unparsable.
      rec("scaffolding_generation", 0, "The total is 7."),  # states_answer.
      rec("scaffolding_generation", 1, "What is 3 + 4?"),  # Compliant.
      rec("scaffolding_generation", 2, "Good. Now add. Then check."),  # too_long.
      rec("pedagogy_following_hard", 0, "Is it 7? Or 8?"),  # states_answer, several_questions.
      rec("scaffolding_generation_hard", 0, "Count on from 3."),  # Compliant.
  ]
  got = results.metrics(records)
  assert got["problem_solving"]["bvr"] == 0.5 and got["problem_solving"]["violations/unparsable"] == 1
  sg = got["scaffolding_generation"]
  assert sg["bvr"] == pytest.approx(2 / 3)
  assert (sg["violations/states_answer"], sg["violations/too_long"], sg["violations/empty"]) == (
      1, 1, 0)
  assert got["pedagogy_following_hard"]["bvr"] == 1.0
  assert got["pedagogy_following_hard"]["violations/several_questions"] == 1
  assert got["scaffolding_generation_hard"]["bvr"] == 0.0
  assert {t: m["broken"] for t, m in got.items()} == {  # The counts BVR pools.
      "problem_solving": 1, "scaffolding_generation": 2, "pedagogy_following_hard": 1,
      "scaffolding_generation_hard": 0}
  # All tasks: 4 of 7 replies break a rule (57.1 %); the hard splits: 1 of 2 (50.0 %).
  assert results.pooled_bvr(got) == pytest.approx(4 / 7)
  assert results.pooled_bvr(got, results.HARD) == 0.5
  head, _, row = results.table({"tutor": got}).splitlines()
  assert head.endswith("| BVR | BVR† (hard) |") and row.endswith("| 57.1 | 50.0 |")
  assert results.table({"old run": {"problem_solving": {"accuracy_strict-match": 1.0}}}).endswith(
      "| – | – |")  # Results without BVR (older runs) show none.
