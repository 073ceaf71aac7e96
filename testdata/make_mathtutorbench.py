"""Writes testdata/mathtutorbench/: a tiny MathTutorBench written for pedrl.

The nine task files and five data files of the benchmark's format, so the tiny
MathTutorBench and CPA jobs and their tests run from a clone. The fields and the
layout are the official ones (the task files of github eth-lre/mathtutorbench,
`configs/*.yaml`; GSM8K's main and socratic test files; the step-verification
dataset of eth-lre/verify-then-generate; the benchmark's two MathDial bridge
files); the problems, dialogues and prompt wording are pedrl's own. The layout is
that of a paper run's `data_dir`, with the checkout's task files and bridge files
under mathtutorbench/:

  gsm8k/test.jsonl, gsm8k/test_socratic.jsonl      {question, answer}
  stepverify/dataset.json                          the step-verification rows
  mathtutorbench/configs/<task>.yaml               the task files (benchmark_dir)
  mathtutorbench/mathdial_bridge.json              {problem, topic, reference_solution,
  mathtutorbench/mathdial_bridge_hard.json          dialog_history}

Five rows per file (the tiny configs take 4 examples a task). Deterministic:
`python testdata/make_mathtutorbench.py` rewrites the same files.
"""
import json
import os
import re

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mathtutorbench")

# (question, [(sub-question, step with its <<calculation>>)], answer): GSM8K's two test
# files hold each problem's steps, the socratic one with a sub-question before each.
PROBLEMS = [
    ("Mira packs 6 crates with 14 melons each and sells 29 melons. How many melons are left?",
     [("How many melons does Mira pack?", "Mira packs 6 * 14 = <<6*14=84>>84 melons."),
      ("How many are left after the sale?", "She has 84 - 29 = <<84-29=55>>55 melons left.")],
     55),
    ("A cyclist rides 18 km each morning and 11 km each evening. How far does she ride in 5 days?",
     [("How far does she ride in one day?", "She rides 18 + 11 = <<18+11=29>>29 km a day."),
      ("How far in 5 days?", "In 5 days she rides 29 * 5 = <<29*5=145>>145 km.")],
     145),
    ("Theo has $120. He buys 3 games at $27 each. How much money does he have left?",
     [("How much do the games cost?", "The games cost 3 * 27 = <<3*27=81>>81 dollars."),
      ("How much is left?", "Theo has 120 - 81 = <<120-81=39>>39 dollars left.")],
     39),
    ("A garden has 7 rows of 12 tulips. A storm breaks 15 of them. How many tulips still stand?",
     [("How many tulips were planted?", "There are 7 * 12 = <<7*12=84>>84 tulips."),
      ("How many still stand?", "After the storm 84 - 15 = <<84-15=69>>69 tulips stand.")],
     69),
    ("Lena reads 25 pages a day for 4 days, then 40 pages on the fifth. How many pages is that?",
     [("How many pages in the first 4 days?", "She reads 25 * 4 = <<25*4=100>>100 pages."),
      ("How many pages in all?", "In all she reads 100 + 40 = <<100+40=140>>140 pages.")],
     140),
]

# Per problem: the index of the wrong step, the wrong steps (the last is the final answer,
# MathDial style), the error's category and description, the student's chat turns.
MISTAKES = [
    (1, ["Mira packs 6 * 14 = 84 melons.", "Then 84 + 29 = 113 melons are left.", " 113"],
     "Misunderstanding of a question", "Adds the sold melons instead of taking them away.",
     "I packed 84 melons and added the 29 sold ones, so 113.",
     "She packs 84 melons and sells 29, so 84 - 29 = 55 are left."),
    (0, ["She rides 18 * 11 = 198 km a day.", "In 5 days she rides 198 * 5 = 990 km.", " 990"],
     "Calculation error easily solved by a calculator", "Multiplies the two distances.",
     "Each day is 18 times 11, which is 198 km, so 990 km.",
     "Each day is 18 + 11 = 29 km, and 5 days make 145 km."),
    (1, ["The games cost 3 * 27 = 81 dollars.", "He has 120 - 27 = 93 dollars left.", " 93"],
     "Extra quantity or Missing quantity", "Takes away one game's price instead of three.",
     "The games are 81 dollars, but I took away 27 and got 93.",
     "Three games cost 81 dollars, and 120 - 81 = 39 dollars are left."),
    (0, ["There are 7 + 12 = 19 tulips.", "After the storm 19 - 15 = 4 tulips stand.", " 4"],
     "Misunderstanding of a question", "Adds rows and tulips per row.",
     "7 rows and 12 tulips make 19, minus 15 is 4.",
     "7 rows of 12 are 84 tulips, and 84 - 15 = 69 still stand."),
    (1, ["She reads 25 * 4 = 100 pages.", "In all she reads 100 + 25 = 125 pages.", " 125"],
     "Extra quantity or Missing quantity", "Uses 25 pages for the fifth day, not 40.",
     "100 pages in four days and then 25 more makes 125.",
     "Four days of 25 pages are 100, plus 40 on the fifth day is 140."),
]

# Bridge dialogues: (teacher, student) pairs before the teacher's turn that ends them.
OPENINGS = [
    ("Walk me through how you started.", "I multiplied the crates by the melons in each."),
    ("What does the problem ask for?", "How far she rides, so I added the two rides."),
    ("How did you get your answer?", "I took the price of the games from 120."),
    ("Tell me what you found first.", "I added the rows and the tulips."),
    ("Which numbers did you use?", "25 pages, 4 days and 40 pages."),
]
CLOSINGS = ["What do you do with the melons that were sold?",
            "How far does she ride in a single day?",
            "How many games did Theo buy?",
            "How many tulips are in one row, and how many rows are there?",
            "How many pages did she read on the fifth day?"]
ACTS = ["probing", "focus", "generic", "telling"]
# The first hard dialogue is long (the hard split has dialogues of up to 11 turns): its
# prompt overflows the tiny models' context, so the tiny runs cut it, and count that.
LONG = [
    ("Teacher", "Walk me through how you started, and tell me which numbers you picked out "
                "of the problem first."),
    ("Student", "I saw 6 crates and 14 melons in each crate, so I multiplied 6 by 14 and got "
                "84 melons. Then I read that she sells 29 melons, and I thought selling means "
                "she gets more, so I added 29 to 84 and got 113."),
    ("Teacher", "Good start with the crates. When Mira sells a melon, does she still have it "
                "afterwards, or does it leave her stall with the buyer?"),
    ("Student", "Oh, the buyer takes it home, so she does not have it any more. But the money "
                "comes back to her, so I was thinking about the money and the melons at the "
                "same time, and I mixed them up."),
    ("Teacher", "That is an honest way to put it. The question only asks about melons. Can you "
                "say in one sentence what happens to the number of melons when some are sold?"),
    ("Student", "The number of melons goes down when some are sold, because they leave the "
                "stall. So the 29 should make the 84 smaller, not bigger. I think I need to "
                "take 29 away from 84 instead of adding it."),
    ("Teacher", "How would you check that taking away is the right step before you work out "
                "the number?"),
    ("Student", "I could try it with small numbers. If she had 10 melons and sold 3, she would "
                "have 7 left, and 7 is 10 minus 3. So selling is taking away. For the real "
                "numbers I would do 84 minus 29, which I think is 55."),
    ("Teacher", "Nice check with small numbers. How can you be sure that 84 minus 29 is 55 and "
                "not a slip in the subtraction?"),
    ("Student", "I can add them back: 55 plus 29 is 84, because 55 plus 30 is 85 and one less "
                "is 84. So it works, and Mira has 55 melons left at the end of the day."),
]


def mathdial_solution(steps, answer) -> str:
  """MathDial style: the steps without their calculations, then the answer after a space."""
  return "\n".join([*(re.sub(r"<<[^>]*>>", "", s) for _, s in steps), f" {answer}"])


def socratic_solution(steps, answer) -> str:
  return "\n".join([*(f"{q} ** {s}" for q, s in steps), f"#### {answer}"])


def write_json(path: str, rows) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8") as f:
    if path.endswith(".jsonl"):
      f.writelines(json.dumps(r) + "\n" for r in rows)
    else:
      json.dump(rows, f, indent=1)
      f.write("\n")


def data_files() -> dict:
  gsm8k = [{"question": q, "answer": "\n".join([*(s for _, s in steps), f"#### {a}"])}
           for q, steps, a in PROBLEMS]
  socratic = [{"question": q, "answer": socratic_solution(steps, a)} for q, steps, a in PROBLEMS]
  stepverify, bridge, hard = [], [], []
  for i, ((q, steps, a), m, (t, s), close) in enumerate(
      zip(PROBLEMS, MISTAKES, OPENINGS, CLOSINGS)):
    wrong_at, wrong, category, description, chat, correct = m
    reference = mathdial_solution(steps, a)
    opening = [{"text": t, "user": "Teacher"}, {"text": chat, "user": "Student"}]
    stepverify.append({
        "problem": q, "topic": "Math Word Problem", "reference_solution": reference,
        "student_incorrect_solution": wrong, "incorrect_index": wrong_at,
        "incorrect_step": wrong[wrong_at], "error_category": category,
        "error_description": description, "dialog_history": opening,
        "student_correct_response": correct})
    bridge.append({"problem": q, "topic": "Math Word Problem", "reference_solution": reference,
                   "dialog_history": [*opening, {"text": close, "user": "Teacher"}]})
    # The hard split: longer dialogues, every turn tagged with a dialogue act, GSM8K
    # socratic references.
    before = LONG if i == 0 else [("Teacher", t), ("Student", s),
                                   ("Teacher", "Is that what the question asks?"),
                                   ("Student", "I am not sure.")]
    turns = [{"text": text, "user": who,
              "dialog_act": ACTS[k // 2 % 4] if who == "Teacher" else ""}
             for k, (who, text) in enumerate(before)]
    turns.append({"text": close, "user": "Teacher", "dialog_act": "probing"})
    hard.append({"problem": q, "topic": "Math Word Problem",
                 "reference_solution": socratic_solution(steps, a), "dialog_history": turns})
  return {"gsm8k/test.jsonl": gsm8k, "gsm8k/test_socratic.jsonl": socratic,
          "stepverify/dataset.json": stepverify,
          "mathtutorbench/mathdial_bridge.json": bridge,
          "mathtutorbench/mathdial_bridge_hard.json": hard}


# The task files: the official keys, prompts in pedrl's words with the harness's
# template variables, its stop strings and ground-truth fields.
HEADER = """name: {name}
dataset_path: {path}
dataset_name: {subset}
training_split: train
test_split: {test}
"""
DIALOGUE_TASK = """system_prompt: |
  {intro}
  Problem: {{{{question}}}}
  Conversation:
  {{{{dialog_history}}}}
  Teacher (at most two sentences): 
ground_truth_format: ""
few_shot_samples: ""
stop: ["Student:", "\\n\\n", "Teacher:"]
"""
SCAFFOLD = "You teach maths. Reply to the student below in a helpful, kind way; do not solve it for them."
PEDAGOGY = ("You are a patient tutor. Ask one question at a time that moves the student a "
            "small step on, and stop once they show they understand.")
TASKS = {
    "problem_solving": HEADER.format(name="problem_solving", path="gsm8k", subset="main",
                                     test="test") + """system_prompt: |
  Work the question out one step at a time, then write 'Final answer:' and the number.
  {{ shots }}
  Question: {{question}}
  Answer:
ground_truth_format: "{{ answer.split('#### ')[-1].replace(',', '') | trim }}"
few_shot_samples: |
  Question: A shelf has 3 rows of 8 books. How many books are on it?
  Answer: 3 rows of 8 books are 3*8 = 24 books. Final answer: 24
stop: ["Question:"]
""",
    "socratic_questioning": HEADER.format(name="socratic_questioning", path="gsm8k",
                                          subset="socratic", test="test") + """system_prompt: |
  Break the problem into the questions a student would answer on the way. Write them on one line.
  {{ shots }}
  Problem: {{question}}
  Questions:
ground_truth_format: "{{ answer }}"
few_shot_samples: |
  Problem: A shelf has 3 rows of 8 books and 5 more on top. How many books are there?
  Questions: How many books are in the rows? How many books are there with the ones on top?
stop: ["Problem:", "\\n"]
""",
    "student_solution_correctness": HEADER.format(
        name="solution_correctness", path="eth-nlped/stepverify", subset="default",
        test="train") + """system_prompt: |
  You check students' work. Decide whether the student's solution below is wrong.
  {{ shots }}
  Problem: {{question}}
  Conversation:
  {{dialog_history}}
  Student: {{student_chat_solution}}
  Q: Is the student's solution wrong? Answer 'Yes' or 'No'.
  A:
ground_truth_format: "{{ 'Yes' if is_error else 'No' }}"
few_shot_samples: |
  Problem: A shelf has 3 rows of 8 books. How many books are on it?
  Student Solution: 3 rows of 8 make 3*8 = 24 books.
  Q: Is the student's solution wrong? Answer 'Yes' or 'No'.
  A: No
stop: ["Problem:", "Q:", "Explanation:"]
""",
    "mistake_location": HEADER.format(name="mistake_location", path="eth-nlped/stepverify",
                                      subset="default", test="train") + """system_prompt: |
  You check students' work. Find the first step of the solution below that is wrong.
  {{ shots }}
  Problem: {{question}}
  Student Solution: {{student_solution}}
  Q: Which step is the first wrong one? Write its number, or 0 if every step is right.
  A:
ground_truth_format: "{{ error_step }}"
few_shot_samples: |
  Problem: A shelf has 3 rows of 8 books and 5 more on top. How many books are there?
  Student Solution: Step 1 - The rows hold 3+8 = 11 books.
  Step 2 - With the top there are 11+5 = 16 books.
  Q: Which step is the first wrong one? Write its number, or 0 if every step is right.
  A: 1
stop: ["Problem:", "Q:"]
""",
    "mistake_correction": HEADER.format(name="mistake_correction", path="eth-nlped/stepverify",
                                        subset="default", test="train") + """system_prompt: |
  You tutor a student who made a mistake. Write a full, correct solution and end with 'Final Answer:' and the number.
  Problem: {{question}}
  Conversation:
  {{dialog_history}}
  Student: {{student_chat_solution}}
  Teacher: 
ground_truth_format: "{{ reference_solution.split('\\n')[-1].replace(',', '') | trim }}"
few_shot_samples: ""
stop: ["Problem:", "Student:"]
""",
    "scaffolding_generation": HEADER.format(
        name="scaffolding_generation", path="datasets/mathdial_bridge.json", subset="main",
        test="test") + DIALOGUE_TASK.format(intro=SCAFFOLD),
    "pedagogy_following": HEADER.format(
        name="pedagogy_following", path="datasets/mathdial_bridge.json", subset="main",
        test="test") + DIALOGUE_TASK.format(intro=PEDAGOGY),
    "scaffolding_generation_hard": HEADER.format(
        name="scaffolding_generation_hard", path="datasets/mathdial_bridge_hard.json",
        subset="main", test="test") + DIALOGUE_TASK.format(intro=SCAFFOLD),
    "pedagogy_following_hard": HEADER.format(
        name="pedagogy_following_hard", path="datasets/mathdial_bridge_hard.json",
        subset="main", test="test") + DIALOGUE_TASK.format(intro=PEDAGOGY),
}


def main():
  for name, rows in data_files().items():
    write_json(os.path.join(OUT, name), rows)
  configs = os.path.join(OUT, "mathtutorbench", "configs")
  os.makedirs(configs, exist_ok=True)
  for name, text in TASKS.items():
    with open(os.path.join(configs, f"{name}.yaml"), "w", encoding="utf-8") as f:
      f.write(text)
  print(f"wrote {len(TASKS)} task files and 5 data files under {OUT}")


if __name__ == "__main__":
  main()
