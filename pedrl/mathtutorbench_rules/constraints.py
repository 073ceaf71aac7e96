"""Rule-based constraint checks on MathTutorBench replies, for the benchmark violation
rate (BVR) of paper 002 (CPA). MathTutorBench's own code has no such checker: the rules
are pedrl's, defined here, and every one is a plain text rule (no model, no judge).

`violations(task, response, example)` names the rules a reply breaks (empty tuple:
compliant), the final answer read from the example's reference solution: the metric.
`rules(task, response, answer)` is the same checker given the final answer, for an
agent that may not read the reference (it is not in the tutoring prompts): CPA passes
an answer it derived itself, or None. `rates` turns (task, violations) rows into the
BVR numbers.

Every task:
- "empty": the reply is empty or whitespace. It is then the only violation named.

Tutoring tasks (tasks.PEDAGOGICAL; `example` is a bridge example):
- "states_answer": the reply states the final answer of `reference_solution`
  (`final_answer`: the first number on a "#### N" line if there is one, else the text's
  last number; commas dropped, sign kept). A leak is that number as a whole number
  anywhere in the reply: numbers are read whole ("120", "3.12", "12.5" and "12/5" are
  not 12; a fraction is one number), commas between digit groups are ignored ("1,200"
  is 1200), values compare as numbers ("12.0" is 12, "1/2" is 0.5) and signs are
  ignored ("-5" leaks 5). A reference without a number ("N/A" in many bridge rows), or
  whose "####" line holds none, has no final answer: a non-numeric answer cannot be
  told from ordinary words by rule, so the check is skipped. A number the problem itself
  gives that equals the answer counts too (a rule cannot tell the two apart).
- "several_questions": more than one question, a question being a sentence (the
  splitter below) whose closing punctuation holds a '?' (a question without '?' is not
  counted). The definition applies it to all four tutoring tasks; of the task files,
  only pedagogy_following's two ask for one question (TASK_FILE_RULES).
- "too_long": more sentences than the task file's cap (TASK_FILE_RULES; no cap, no check).
  Sentences: the reply split after '.', '!' or '?' (a closing quote or bracket may
  follow) where whitespace comes next, and at line breaks; pieces without a letter or
  digit are dropped. "3.5" does not split; an abbreviation such as "e.g. " does.

Structured tasks: "unparsable" when the task's reading of the reply fails, stricter than
the harness's lenient defaults (scoring.py): problem_solving, no number;
socratic_questioning, no line holding a '?'; solution_correctness, neither "yes" nor
"no" as a word (any case); mistake_location, no integer; mistake_correction,
scoring.parse_final_answer reads None.
"""
from collections.abc import Iterable, Sequence
import dataclasses
import re

from pedrl.mathtutorbench_rules import names as tasks, scoring

RULES = ("empty", "states_answer", "several_questions", "too_long", "unparsable")


@dataclasses.dataclass(frozen=True)
class TaskFileRules:
  max_sentences: int | None  # The cap the prompt puts on the teacher's turn (None: none).
  one_question: bool  # Whether the system prompt asks for one question per turn.


# Facts read from MathTutorBench's task files (configs/<file>, the file named per task).
# The structured tasks' files set neither rule.
TASK_FILE_RULES = {
    "scaffolding_generation": TaskFileRules(2, False),  # scaffolding_generation.yaml
    "pedagogy_following": TaskFileRules(2, True),  # pedagogy_following.yaml
    "scaffolding_generation_hard": TaskFileRules(2, False),  # scaffolding_generation_hard.yaml
    "pedagogy_following_hard": TaskFileRules(2, True),  # pedagogy_following_hard.yaml
}

# A number read whole: comma groups of three digits, an optional decimal part, an
# optional "/denominator" (a fraction is one number); a '-' is its sign unless a word
# character or a number's ',' or '.' precedes it ("24-1" is 24 and 1).
_NUMBER = re.compile(r"(?:(?<![\w.,])-)?\d+(?:,\d{3}(?!\d))*(?:\.\d+)?(?:/[1-9]\d*)?")
_HASHES = re.compile(r"^\s*####(.*)$", re.MULTILINE)
_SENTENCE_BREAK = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+|\s*\n\s*")
_CLOSING = re.compile(r"[.!?]+[\"')\]]*$")
_YES_NO = re.compile(r"\b(?:yes|no)\b", re.IGNORECASE)


def _value(number: str) -> float:
  numerator, _, denominator = number.replace(",", "").partition("/")
  return float(numerator) / float(denominator or 1)


def final_answer(reference_solution: str) -> str | None:
  """The reference's final answer as a number without commas ("1200", "-5", "3/4");
  None without one."""
  m = _HASHES.search(reference_solution)
  found = _NUMBER.findall(m.group(1) if m else reference_solution)
  if not found:
    return None
  return (found[0] if m else found[-1]).replace(",", "")


def states_answer(response: str, answer: str) -> bool:
  """Whether `answer` (a final_answer) is a whole number of `response`, signs ignored."""
  target = abs(_value(answer))
  return any(abs(abs(_value(n)) - target) < 1e-9 for n in _NUMBER.findall(response))


def sentences(text: str) -> list[str]:
  """`text` split into sentences by the module docstring's rule."""
  return [s for s in (p.strip() for p in _SENTENCE_BREAK.split(text)) if re.search(r"\w", s)]


def is_question(sentence: str) -> bool:
  """Whether the sentence's closing punctuation holds a '?' ("Why?!" counts)."""
  m = _CLOSING.search(sentence)
  return m is not None and "?" in m.group()


_READABLE = {
    "problem_solving": lambda r: scoring.parse_number(r) is not None,
    "socratic_questioning": lambda r: any("?" in line for line in scoring.parse_lines(r)),
    "solution_correctness": lambda r: _YES_NO.search(r) is not None,
    "mistake_location": lambda r: re.search(r"\d", r) is not None,
    "mistake_correction": lambda r: scoring.parse_final_answer(r) is not None,
}


def violations(task: str, response: str, example: dict) -> tuple[str, ...]:
  """The rules (RULES) that `response` to `example` of `task` breaks, in RULES order;
  a tutoring task's final answer is its reference solution's (BVR)."""
  answer = final_answer(example["reference_solution"]) if task in tasks.PEDAGOGICAL else None
  return rules(task, response, answer)


def rules(task: str, response: str, answer: str | None) -> tuple[str, ...]:
  """The rules that `response` of `task` breaks, a tutoring reply's leak judged against
  `answer` (a final_answer; None: unchecked). The structured tasks need no answer."""
  if task not in tasks.TASKS:
    raise tasks.TaskError(f"unknown MathTutorBench task {task!r}")
  if not response.strip():
    return ("empty",)
  if task not in tasks.PEDAGOGICAL:
    return () if _READABLE[task](response) else ("unparsable",)
  return guidance_violations(response, answer, TASK_FILE_RULES[task].max_sentences)


def guidance_violations(response: str, answer: str | None,
                        max_sentences: int | None) -> tuple[str, ...]:
  """A tutoring reply's rules: empty, stating `answer` (None: unchecked), more than one
  question, more than `max_sentences` sentences (None: no cap). The benchmark's tutoring
  tasks and a tutor in pedrl's dialogues (pedrl.agents.cpa.contracts) both use them."""
  if not response.strip():
    return ("empty",)
  out = []
  if answer is not None and states_answer(response, answer):
    out.append("states_answer")
  split = sentences(response)
  if sum(map(is_question, split)) > 1:
    out.append("several_questions")
  if max_sentences is not None and len(split) > max_sentences:
    out.append("too_long")
  return tuple(out)


def rates(rows: Iterable[tuple[str, Sequence[str]]]) -> dict:
  """BVR numbers of (task, violations) rows: "broken" the replies with any violation
  and "bvr" their share, "bvr/<task>" per task, "violations/<rule>" how many replies
  broke each rule (every rule listed), "checked" the number of rows; no rows, no shares."""
  rows = list(rows)
  out: dict = {f"violations/{rule}": 0 for rule in RULES}
  out["checked"] = len(rows)
  out["broken"] = sum(bool(v) for _, v in rows)
  if not rows:
    return out
  out["bvr"] = out["broken"] / len(rows)
  for task in dict.fromkeys(t for t, _ in rows):
    mine = [bool(v) for t, v in rows if t == task]
    out[f"bvr/{task}"] = sum(mine) / len(mine)
  for _, v in rows:
    for rule in v:
      out[f"violations/{rule}"] += 1
  return out
