"""MathTutorBench's parsing and metrics, rule for rule as the harness computes them.

Facts from the harness's task code (github.com/eth-lre/mathtutorbench tasks/, commit
54b62137c717): which part of a
reply each task reads, what an unreadable reply counts as, and the metric
functions (sacrebleu's sentence BLEU, scikit-learn's classification scores).
"""
from collections.abc import Sequence
import re
from typing import Any

import numpy as np

_NUMBER = re.compile(r"-?\d*\.?\d+")
_FINAL = re.compile(r"Final Answer:\s*\$?([-,\d]*\.?\d+)")
_ANY_NUMBER = re.compile(r"\$?([-,\d]*\.?\d+)")
QUESTION_WORDS = frozenset(("what", "how", "why", "when", "where", "which", "who", "whose",
                            "whom", "can", "could", "would"))


def _float(text: str | None) -> float | None:
  try:
    return float(text)
  except (TypeError, ValueError):
    return None


def _equal(p: float | None, t: float | None) -> bool:
  return p is not None and t is not None and abs(p - t) < 1e-6


def numbers_equal(prediction: str | None, target: str | None) -> bool:
  """The harness's numeric match: both read as floats and |p − t| < 1e-6."""
  return _equal(_float(prediction), _float(target))


# -- Problem solving (GSM8K) ---------------------------------------------------------------

def parse_number(response: str) -> str | None:
  """The last number of the reply (the harness's regex: no sign of thousands separators)."""
  found = _NUMBER.findall(response)
  return found[-1] if found else None


def problem_solving(predictions: Sequence[Any], targets: Sequence[Any] | None) -> dict:
  """Accuracy: |prediction − target| < 1e-6; an unreadable prediction is wrong. The
  harness reports it twice, under its strict and flexible names, computed alike."""
  acc = float(np.mean([numbers_equal(p, t) for p, t in zip(predictions, targets)]))
  return {"accuracy_strict-match": acc, "accuracy_flexible-extract": acc}


# -- Socratic questioning ------------------------------------------------------------------

def parse_lines(response: str) -> list[str]:
  """Every line of the reply, stripped (empty ones included, as the harness keeps them)."""
  return [line.strip() for line in response.split("\n")]


def reference_questions(answer: str) -> list[str]:
  """The sub-questions of a GSM8K socratic answer: each line's part before " ** "
  (lines that do not split in two, such as "#### N", have none)."""
  out = []
  for line in answer.split("\n"):
    parts = line.split(" ** ")
    if len(parts) == 2:
      out.append(parts[0])
  return out


def socratic_questioning(predictions: Sequence[Any], targets: Sequence[Any] | None) -> dict:
  """bleu: over examples with lines and reference questions, the mean of the best
  sentence BLEU of any predicted line against the references, ÷ 100; avg_questions:
  the mean of min(#lines, #references)."""
  import sacrebleu
  scores, counts = [], []
  for lines, target in zip(predictions, targets):
    refs = reference_questions(target)
    if not lines or not refs:
      continue
    scores.append(max(sacrebleu.sentence_bleu(line, refs).score for line in lines))
    counts.append(min(len(lines), len(refs)))
  return {"bleu": (sum(scores) / len(scores) if scores else 0.0) / 100.0,
          "avg_questions": sum(counts) / len(counts) if counts else 0.0}


# -- Solution correctness and mistake location (step verification) ---------------------------

def parse_yes_no(response: str) -> bool:
  """True ("the solution has an error") if the lowercased reply contains "yes", else
  False if it contains "no", else True (the harness's default)."""
  text = response.strip().lower()
  return True if "yes" in text else False if "no" in text else True


def solution_correctness(predictions: Sequence[Any], targets: Sequence[Any] | None) -> dict:
  """Classification scores, positive = has an error; targets "Yes"/"No" parse alike."""
  from sklearn import metrics
  truth = [parse_yes_no(t) for t in targets]
  predictions = list(predictions)
  return {"accuracy": float(metrics.accuracy_score(truth, predictions)),
          "precision": float(metrics.precision_score(truth, predictions)),
          "recall": float(metrics.recall_score(truth, predictions)),
          "f1": float(metrics.f1_score(truth, predictions, pos_label=True))}


def parse_step(response: str) -> int:
  """The first integer of the reply; 0 ("no error") without one."""
  m = re.search(r"\d+", response)
  return int(m.group()) if m else 0


def mistake_location(predictions: Sequence[Any], targets: Sequence[Any] | None) -> dict:
  from sklearn import metrics
  truth = [int(t) for t in targets]
  predictions = [int(p) for p in predictions]
  return {f"f1_{avg}": float(metrics.f1_score(truth, predictions, average=avg))
          for avg in ("micro", "macro", "weighted")}


# -- Mistake correction ----------------------------------------------------------------------

def parse_final_answer(response: str) -> float | None:
  """The number after "Final Answer:", else the reply's last number; commas removed;
  None when neither reads as a number."""
  m = _FINAL.search(response)
  if m:
    text = m.group(1)
  else:
    found = _ANY_NUMBER.findall(response)
    if not found:
      return None
    text = found[-1]
  return _float(text.replace(",", ""))


def mistake_correction(predictions: Sequence[Any], targets: Sequence[Any] | None) -> dict:
  return {"accuracy": float(np.mean([_equal(p, _float(t.replace(",", "")))
                                     for p, t in zip(predictions, targets)]))}


# -- Scaffolding and pedagogy following -----------------------------------------------------

def is_question(text: str) -> bool:
  """A '?' anywhere, or a question word among the lowercased reply's whitespace tokens."""
  return "?" in text or any(w in QUESTION_WORDS for w in text.lower().split())


def teacher_turn_match(predictions: Sequence[Any], targets: Sequence[Any] | None = None) -> dict:
  """The harness's in-task number: the share of replies that are questions."""
  del targets
  return {"match": sum(map(is_question, predictions)) / len(predictions)}


PARSERS = {"problem_solving": parse_number, "socratic_questioning": parse_lines,
           "solution_correctness": parse_yes_no, "mistake_location": parse_step,
           "mistake_correction": parse_final_answer}
METRICS = {"problem_solving": problem_solving, "socratic_questioning": socratic_questioning,
           "solution_correctness": solution_correctness, "mistake_location": mistake_location,
           "mistake_correction": mistake_correction}


def parse(task: str, response: str) -> Any:
  """What the harness reads from a reply of `task` (the raw reply for the pedagogical ones)."""
  return PARSERS.get(task, lambda r: r)(response)


def compute(task: str, predictions: Sequence[Any], targets: Sequence[Any] | None) -> dict:
  return METRICS.get(task, teacher_turn_match)(predictions, targets)
