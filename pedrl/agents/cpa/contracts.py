"""Task contracts (paper 002, table 1) for MathTutorBench's nine tasks, and M4's formatting.

A contract names the deliverable and the constraints that the agent compiles
into Γ_t = <goal, constraints> (eq. 7) when M1 gives none (no M1, or its reply
unread), and that the monitor checks deterministically on the deliverable
step: the rules of pedrl.mathtutorbench_rules.constraints (the rules BVR
counts), with one difference: the agent never sees the reference solution (no
tutoring prompt shows it), so "states_answer" is judged against the answer the
agent derived itself (CPA's solve stage) or not at all, where BVR reads the
reference. Table 1's rows map to the benchmark's tasks: solution checking is
solution_correctness, whose harness reads yes = "the solution has an error";
scaffolding and instruction following are the four pedagogical tasks. Table 1
asks one question of Socratic questioning; the benchmark's task scores a list
of sub-questions against the reference's, and its task file asks for "a list
of questions on one line" and stops at the first line break, so pedrl's
contract asks for the list on one line (a decision, documented in
docs/paper-differences.md).

"tutoring" is the contract of a tutor in pedrl's dialogues (`pedrl.agents.tutor`):
guidance without the benchmark's two-sentence rule; its rules are the empty
reply, more than one question, and stating the answer the agent derived.

`formatted` is M4's deterministic part (section 3.7: "when possible"): the structured
deliverables (an answer, a verdict, a step index) are cut to what the harness reads,
the questions put on one line (a verdict in words only where its meaning is clear:
"I did not find any error" is left as written, not read as "Yes"); guidance is
returned as is (its minimal rewriting is an LLM call of the agent). None: nothing to
format from (the agent counts a fallback). `harness_cut` is what the benchmark's stop
strings leave of a reply: the agent's rule checks judge that text, and
`pedrl.agents.bench.AgentPolicy` cuts y_t to it.
"""
from collections.abc import Sequence
import dataclasses
import re

from pedrl.engine import stops
from pedrl.mathtutorbench_rules import constraints, names, scoring


@dataclasses.dataclass(frozen=True)
class Contract:
  deliverable: str
  constraints: tuple[str, ...]
  kind: str  # answer, questions, verdict, step, guidance.


_GUIDANCE = Contract(
    "the tutor's next message to the student",
    ("do not state the final answer or the full solution",
     "ask at most one question", "at most two sentences",
     "help the student find the next step themselves"), "guidance")
CONTRACTS = {
    "problem_solving": Contract("the final answer, a number",
                                ("end with the final numeric answer",), "answer"),
    "socratic_questioning": Contract(
        "the sub-questions that lead to the solution, in order, all on one line",
        ("only questions, all on one line (no line breaks)",
         "no question states the final answer"), "questions"),
    "solution_correctness": Contract(
        "a verdict: does the student's solution contain an error (Yes or No)",
        ("answer strictly Yes (there is an error) or No (it is correct)",
         "base it on a step of the solution"), "verdict"),
    "mistake_location": Contract("the number of the first incorrect step",
                                 ("an exact step number, 0 if no step is wrong",), "step"),
    "mistake_correction": Contract(
        "the corrected final answer of the student's solution, a number",
        ("coherent with the correct preceding steps", "end with the final numeric answer"),
        "answer"),
    **{t: _GUIDANCE for t in names.PEDAGOGICAL},
    "tutoring": Contract(
        "the tutor's next message in the dialogue",
        ("do not state the final answer or the full solution", "ask at most one question",
         "help the student find the next step themselves"), "guidance"),
}


def contract(task: str) -> Contract:
  if task not in CONTRACTS:
    raise ValueError(f"no CPA contract for task {task!r}; the tasks: {', '.join(CONTRACTS)}")
  return CONTRACTS[task]


def _number(text: str) -> str | None:
  """The answer the harness would read (after "Final Answer:", else the last number,
  commas dropped), written back as a plain number."""
  value = scoring.parse_final_answer(text)
  if value is None:
    return None
  return str(int(value)) if value.is_integer() else repr(value)


_ERROR = {"incorrect", "incorrectly", "wrong", "wrongly", "error", "errors", "erroneous",
          "mistake", "mistakes", "flawed", "invalid"}
_CORRECT = {"correct", "correctly", "right", "valid", "accurate"}
_NEGATIONS = {"not", "no", "none", "never", "nothing", "neither", "nor", "without", "cannot",
              "free", "nobody", "nowhere"}  # And every "...n't".
_ANSWER_FIRST = re.compile(r"^\W*(yes|no)\b(?=\W*$|\s*[.,;:!?-])")  # "No.", "Yes, step 2..."
_ANSWER_LAST = re.compile(r"\b(yes|no)\W*$")  # "Is there an error? No."
# Clauses: split at punctuation and at the conjunctions that join two claims ("step 1 is
# right but step 2 is wrong"), so a negation is weighed only within its own claim.
_CLAUSE_BREAK = re.compile(r"[.,;:!?()\n]+|\b(?:but|and|however|although|though|whereas|while|"
                           r"because)\b")


def _negation(word: str) -> bool:
  return word in _NEGATIONS or word.endswith("n't")


def _clause_verdict(clause: str) -> str | None:
  """Yes / No / "" (a cue whose meaning is not clear) / None (no cue) of one clause. Clear:
  cues of one kind and no negation anywhere in the clause; or one negation, the word just
  before the clause's one cue ("not correct", "no error", "isn't right", "free of errors")."""
  words = re.findall(r"[a-z]+(?:'[a-z]+)?", clause)
  cues = [i for i, w in enumerate(words) if w in _ERROR or w in _CORRECT]
  if not cues:
    return None
  negations = [i for i, w in enumerate(words) if _negation(w)]
  errors = {words[i] in _ERROR for i in cues}
  if not negations and len(errors) == 1:
    return "Yes" if errors.pop() else "No"
  if len(negations) == 1 and len(cues) == 1 and negations[0] == cues[0] - 1:
    return "No" if errors.pop() else "Yes"
  return ""


def _verdict(text: str) -> str | None:
  """Yes (an error) or No (correct) from a verdict in words, only where its meaning is
  clear: a Yes or No standing alone at the start or the end ("No.", "Is there an error?
  No."), else the clauses that say it (questions left out), all the same way. A clause
  whose negation may flip its cue anywhere ("I did not find any error", "None of the steps
  are wrong") is not read, and what disagrees gives nothing: clauses of both kinds with no
  Yes or No, or a Yes or No that no clause bears out while some contradict it ("No, step 2
  is wrong."): None, the draft kept. A Yes or No that some clause agrees with stands
  ("Yes. Step 1 is correct but step 2 is wrong.")."""
  text = text.lower().replace("\u2019", "'").strip()
  text = re.sub(r"\bfree\s+of\b", "without", text)
  answers = {m.group(1).title()
             for m in (_ANSWER_FIRST.search(text), _ANSWER_LAST.search(text)) if m}
  claims = [s for s in re.split(r"(?<=[.!?])\s+|\n", text) if not s.rstrip().endswith("?")]
  said = {v for s in claims for c in _CLAUSE_BREAK.split(s) if (v := _clause_verdict(c))}
  if answers:
    if len(answers) > 1:  # The start and the end disagree.
      return None
    answer = answers.pop()
    return None if said and answer not in said else answer
  return said.pop() if len(said) == 1 else None


def formatted(task: str, text: str) -> str | None:
  """y_t's structured part, as the harness reads it; None when `text` holds none."""
  kind = contract(task).kind
  text = (text or "").strip()
  if kind == "answer":
    n = _number(text)
    return None if n is None else f"Final Answer: {n}"
  if kind == "step":
    m = re.search(r"\d+", text)
    return None if m is None else m.group()
  if kind == "verdict":
    return _verdict(text)
  if kind == "questions":
    return one_line(text)
  return text or None


_LIST_MARK = re.compile(r"^(?:[-*•]|\d+[.)])\s+")  # "- ", "* ", "2) " opening a question.


def one_line(text: str) -> str | None:
  """The questions of `text` (its sentences that are questions, list marks dropped) on
  one line: the socratic task file asks for that and stops at the first line break,
  so a question on a later line would never be scored. None: no question."""
  found = [_LIST_MARK.sub("", s) for s in constraints.sentences(text)
           if constraints.is_question(s)]
  return " ".join(q for q in found if q) or None


# The speaker labels of the tutoring task files' conversations, also their stop strings: a
# reply that opens with its own turn's label ("Teacher: What ...") would be cut to nothing.
ROLE_LABELS = ("Teacher:", "Student:")


def harness_cut(text: str, stop: Sequence[str]) -> str:
  """`text` as the harness keeps it when its task's stop strings end the reply (cut where
  the one it completes first begins, as an endpoint stops there), stripped. A role label that opens the
  reply and is one of the stop strings is dropped first, so the reply is not emptied."""
  text = (text or "").strip()
  for label in ROLE_LABELS:
    if label in stop and text.startswith(label):
      text = text[len(label):].lstrip()
  return text[:stops.find_stop(text, tuple(stop))[0]].strip()


def within_stops(text: str, stop: Sequence[str]) -> str:
  """Guidance laid out so that the task's line-break stop strings end it only at its end:
  where the harness stops at a blank line ("\n\n") or a line break ("\n"), those become
  spaces, so the reply it scores is the whole of y_t (M4's deterministic formatting)."""
  if "\n" in stop:
    return re.sub(r"\s*\n\s*", " ", text).strip()
  if "\n\n" in stop:
    return re.sub(r"\s*\n\s*\n\s*", " ", text).strip()
  return text


def rule_issues(task: str, text: str, answer: str | None) -> tuple[str, ...]:
  """The deterministic checks of the contract on a would-be response: BVR's rules, a
  leak judged against `answer`, the agent's own final answer (None: not checked)."""
  if task != "tutoring":
    return constraints.rules(task, text, answer)
  return constraints.guidance_violations(text, answer, None)
