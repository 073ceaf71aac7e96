"""Reasoning preservation: GSM8K, MATH500 and MMLU on the tutor (paper 003 table 3, 000 table IX);
multiple-choice benchmarks shaped like WBEB (paper 001 table 2).

A tutor trained to withhold answers must still solve problems itself. Paper
003 reports MMLU (5-shot), GSM8K (4-shot) and MATH500 (0-shot), run through
LightEval with the chat template at temperature 0.6, top-p 0.95. pedrl runs
the same benchmarks on the tutor's own chat template, from local files:

- GSM8K: each shot is a user turn (the question) and an assistant turn (its
  worked solution, the final "#### N" line written "The answer is N."). The
  shots come from `gsm8k_shots_path` (the train file); without one, the first
  `gsm8k_shots` rows of the test file are the shots and are not scored (logged).
  Graded like MathTutorBench's problem solving: the last number of the reply
  (commas removed) equals the target within 1e-6.
- MATH500: 0-shot, the problem and an instruction to box the final answer;
  graded by math-verify on the last \\boxed{} (pedrl.env.answers).
- MMLU: Hendrycks' CSV layout (`dev/*_dev.csv` for shots, `test/*_test.csv`;
  rows question, A, B, C, D, answer) from a local copy, or a TFDS split in the
  Hugging Face layout (question, subject, choices, answer; the shots from the
  same dataset's `dev` split); 5 shots of the same
  subject as user/assistant turns; graded by the first standalone A-D letter
  after the last "answer is"/"Answer:", or a reply that opens with a bare letter.
- WBEB (paper 001 table 2: subject knowledge, pedagogical knowledge, essay
  scoring, decision making, all multiple-choice accuracy; its data is not
  public with the paper): any JSONL of multiple-choice questions, one a line,
  `question`, `options` (a list, or an object letter -> text), `answer` (the
  letter, the option's index from 0, or its text) and `category`; 0-shot, the
  options lettered A, B, … and the instruction naming the category; graded as
  MMLU over the question's own letters. Accuracy per category and overall.

Every benchmark's data is a local file or a TFDS source (pedrl.env.sources), read
through the same loaders. MMLU's number is the mean of its subjects' accuracies, as
LightEval reports it (`mmlu_average`).

Every grader reads the visible reply (`chat.visible_text`: thinking removed).

The instruction wordings are pedrl's own (documented, fixed: changing them
changes the numbers).
"""
import collections
import csv
import dataclasses
import os
import re
from collections.abc import Iterable
from typing import Any

import numpy as np
from absl import logging

from pedrl.env import answers, chat, problems, sources
from pedrl.env.problems import DataError
from pedrl.eval import metrics
from pedrl.eval.records import ReasoningRecord
from pedrl.mathtutorbench_rules import scoring
# Re-exported: defined there, importable without JAX.
from pedrl.eval.settings import BENCHMARKS, MMLU_AVERAGES, ReasoningSettings

MATH_INSTRUCTION = "Solve the problem step by step and write the final answer as \\boxed{answer}."
MMLU_INSTRUCTION = ("Answer the multiple-choice question about {subject}. End your reply with "
                    "'The answer is X', X being one of A, B, C or D.")
CHOICE_INSTRUCTION = ("Answer the multiple-choice question ({category}). End your reply with "
                      "'The answer is X', X being one of {letters}.")


@dataclasses.dataclass(frozen=True)
class Example:
  benchmark: str
  id: str
  chat: tuple  # The messages sent: shots, then the question.
  target: str
  category: str = ""  # A multiple-choice benchmark's category (WBEB's SK, PK, AES, DM).
  options: int = 4  # A multiple-choice question's options (its letters A, B, …).


def _gsm8k_shot(row: dict) -> list[dict]:
  body, _, _ = row["answer"].rpartition("####")
  worked = re.sub(r"<<[^>]*>>", "", body).strip()  # The calculator annotations.
  return [{"role": "user", "content": row["question"]},
          {"role": "assistant",
           "content": f"{worked}\nThe answer is {problems.gsm8k_answer(row['answer'])}."}]


def gsm8k(s: ReasoningSettings) -> list[Example]:
  rows = sources.json_rows(s.gsm8k_path)
  if s.gsm8k_shots_path:
    shots = sources.json_rows(s.gsm8k_shots_path)[:s.gsm8k_shots]
  else:
    shots, rows = rows[:s.gsm8k_shots], rows[s.gsm8k_shots:]
    logging.warning("no gsm8k_shots_path: the first %d test rows are the shots, not scored",
                    len(shots))
  context = [m for row in shots for m in _gsm8k_shot(row)]
  return [Example("gsm8k", f"gsm8k/{i}", tuple(context + [
      {"role": "user", "content": row["question"]}]), problems.gsm8k_answer(row["answer"]))
      for i, row in enumerate(rows, start=0 if s.gsm8k_shots_path else s.gsm8k_shots)]


def math500(s: ReasoningSettings) -> list[Example]:
  return [Example("math500", row.get("unique_id") or f"math500/{i}", (
      {"role": "user", "content": f"{row['problem']}\n\n{MATH_INSTRUCTION}"},), row["answer"])
      for i, row in enumerate(sources.json_rows(s.math500_path))]


def _mmlu_rows(path: str) -> list[list[str]]:
  with open(path, encoding="utf-8", newline="") as f:
    rows = [r for r in csv.reader(f) if r]
  for n, r in enumerate(rows, 1):
    if len(r) != 6 or r[5].strip() not in ("A", "B", "C", "D"):
      raise DataError(f"{path}, row {n}: not an MMLU row (question, A, B, C, D, answer)")
  return rows


def _mmlu_question(r: list[str]) -> str:
  return r[0] + "\n" + "\n".join(f"{x}. {o}" for x, o in zip("ABCD", r[1:5]))


def _mmlu_tfds(source: str) -> dict[str, list[list[str]]]:
  """{subject: rows} of a TFDS MMLU split (the Hugging Face layout: question, subject,
  choices, answer as 0-3 or a letter), rows as Hendrycks' CSV has them, in order."""
  out = {}
  for n, row in enumerate(sources.json_rows(source), 1):
    answer, choices = row.get("answer"), row.get("choices")
    letter = "ABCD"[answer] if isinstance(answer, int) and 0 <= answer < 4 else answer
    if (not isinstance(row.get("question"), str) or not row.get("subject")
        or not isinstance(choices, list) or len(choices) != 4 or letter not in tuple("ABCD")):
      raise DataError(f"{source}, row {n}: not an MMLU row (question, subject, 4 choices, "
                      "answer)")
    out.setdefault(row["subject"], []).append([row["question"], *map(str, choices), letter])
  return out


def _mmlu_csv(path: str, kind: str) -> dict[str, list[list[str]]]:
  """{subject: rows} of Hendrycks' layout: PATH/{kind}/<subject>_{kind}.csv."""
  folder = os.path.join(path, kind)
  if not os.path.isdir(folder):
    raise DataError(f"{path}: no {kind}/ directory of *_{kind}.csv files (MMLU's layout)")
  suffix = f"_{kind}.csv"
  return {name[:-len(suffix)]: _mmlu_rows(os.path.join(folder, name))
          for name in sorted(os.listdir(folder)) if name.endswith(suffix)}


def mmlu(s: ReasoningSettings) -> list[Example]:
  """MMLU's test questions with `mmlu_shots` dev rows of the same subject before each, from
  Hendrycks' CSV directory or a TFDS split (its shots from the same dataset's `dev` split)."""
  spec = sources.tfds_split(s.mmlu_path)
  if spec:
    tests, dev_source = _mmlu_tfds(s.mmlu_path), f"{sources.TFDS_PREFIX}{spec.name}:dev"
    devs = _mmlu_tfds(dev_source)
  else:
    tests, dev_source = _mmlu_csv(s.mmlu_path, "test"), os.path.join(s.mmlu_path, "dev")
    devs = _mmlu_csv(s.mmlu_path, "dev") if os.path.isdir(dev_source) else {}
  out = []
  for subject, rows in sorted(tests.items()):
    shots = devs.get(subject, [])[:s.mmlu_shots]
    if len(shots) < s.mmlu_shots:
      raise DataError(f"{dev_source}: {len(shots)} dev rows of {subject} for {s.mmlu_shots} "
                      "shots")
    instruction = MMLU_INSTRUCTION.format(subject=subject.replace("_", " "))
    context = [m for r in shots for m in (
        {"role": "user", "content": f"{instruction}\n\n{_mmlu_question(r)}"},
        {"role": "assistant", "content": f"The answer is {r[5].strip()}."})]
    for i, r in enumerate(rows):
      out.append(Example("mmlu", f"mmlu/{subject}/{i}", tuple(context + [
          {"role": "user", "content": f"{instruction}\n\n{_mmlu_question(r)}"}]), r[5].strip()))
  if not out:
    raise DataError(f"{s.mmlu_path}: no MMLU test questions")
  return out


def _letters(n: int) -> str:
  return "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:n]


def choice_row(row: dict, where: str) -> tuple[str, list, str, str]:
  """(question, options, the answer's letter, category) of a multiple-choice row;
  DataError naming `where` when a field is missing or the answer is no option."""
  question, options, answer = row.get("question"), row.get("options"), row.get("answer")
  category = row.get("category")
  if isinstance(options, dict):
    keys = sorted(options)
    if "".join(keys) != _letters(len(keys)):
      raise DataError(f"{where}: options keys {keys} are not A, B, … in order")
    options = [options[k] for k in keys]
  if not isinstance(question, str) or not question.strip():
    raise DataError(f"{where}: no question")
  if not isinstance(options, list) or not 2 <= len(options) <= 26 or not all(
      isinstance(o, str) and o.strip() for o in options):
    raise DataError(f"{where}: options must be 2 to 26 texts (a list or an object A, B, …)")
  if not isinstance(category, str) or not category.strip():
    raise DataError(f"{where}: no category")
  letters = _letters(len(options))
  if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < len(options):
    letter = letters[answer]
  elif isinstance(answer, str) and answer.strip().upper() in letters and len(answer.strip()) == 1:
    letter = answer.strip().upper()
  elif isinstance(answer, str) and answer.strip() in options:
    letter = letters[options.index(answer.strip())]
  else:
    raise DataError(f"{where}: answer {answer!r} is neither a letter of {letters}, an index "
                    "from 0 nor one of the options")
  return question.strip(), options, letter, category.strip()


def wbeb(s: ReasoningSettings) -> list[Example]:
  out = []
  for i, row in enumerate(sources.json_rows(s.wbeb_path)):
    question, options, letter, category = choice_row(row, f"{s.wbeb_path}, row {i + 1}")
    letters = _letters(len(options))
    instruction = CHOICE_INSTRUCTION.format(category=category,
                                            letters=", ".join(letters[:-1]) + " or " + letters[-1])
    body = question + "\n" + "\n".join(f"{x}. {o}" for x, o in zip(letters, options))
    out.append(Example("wbeb", str(row.get("id", f"wbeb/{i}")), (
        {"role": "user", "content": f"{instruction}\n\n{body}"},), letter, category,
        len(options)))
  return out


LOADERS = {"gsm8k": gsm8k, "math500": math500, "mmlu": mmlu, "wbeb": wbeb}


def examples(s: ReasoningSettings) -> list[Example]:
  """Every benchmark's examples in order (each cut to `limit` if set)."""
  out = []
  for name in s.names:
    xs = LOADERS[name](s)
    out += xs[:s.limit] if s.limit > 0 else xs
  return out


# -- Grading -------------------------------------------------------------------------------

def mmlu_letter(text: str, letters: str = "ABCD") -> str | None:
  """The letter (of `letters`) after the last "answer is" / "Answer:"; without one, a
  reply that opens with a bare letter ("B", "B.", "(B)"); else None ("A quick check" is
  no answer)."""
  parts = re.split(r"answer is|answer:", text, flags=re.I)
  if len(parts) > 1:
    m = re.search(rf"(?<![A-Za-z])([{letters}])(?![A-Za-z])", parts[-1])
  else:
    m = re.match(rf"\s*\(?([{letters}])(?:[.):]|\s*$)", text)
  return m.group(1) if m else None


def grade(benchmark: str, reply: str, target: str,
          options: int = 4) -> tuple[str | None, bool]:
  """(what was read from the reply, whether it is correct); `options`: a multiple-choice
  question's count. Only the visible reply is read: a number or letter inside <think> is
  not an answer."""
  reply = chat.visible_text(reply)
  if benchmark == "gsm8k":  # MathTutorBench's problem-solving rule, commas removed first.
    got = scoring.parse_number(reply.replace(",", ""))
    return got, scoring.numbers_equal(got, target)
  if benchmark == "math500":
    got = answers.last_boxed(reply)
    return got, answers.is_correct(got, target)
  got = mmlu_letter(reply, _letters(options))
  return got, got == target


def accuracy(records: Iterable[ReasoningRecord], seed: int, resamples: int, confidence: float,
             mmlu_average: str = "subject") -> dict[str, Any]:
  """Per benchmark, and per category of a multiple-choice one (as `wbeb/<category>`):
  accuracy, its bootstrap interval, and the count. Over questions, but MMLU's by
  `mmlu_average`: "subject" is the mean of the subjects' accuracies (LightEval's
  mmlu:_average), its interval resampling subjects; the share of all MMLU questions is
  also given (`mmlu_question_accuracy`)."""
  groups = collections.defaultdict(list)
  for r in records:
    groups[r.benchmark].append(r)
    if getattr(r, "category", ""):
      groups[f"{r.benchmark}/{r.category}"].append(r)
  out = {}
  for name in [b for b in BENCHMARKS if b in groups] + sorted(g for g in groups if "/" in g):
    mine = groups[name]
    xs = [float(r.correct) for r in mine]
    if name == "mmlu" and mmlu_average == "subject":
      out["mmlu_question_accuracy"] = float(np.mean(xs))
      by_subject = collections.defaultdict(list)
      for r in mine:  # Ids are mmlu/<subject>/<row>.
        by_subject[r.example_id.split("/")[1]].append(float(r.correct))
      xs = [float(np.mean(v)) for v in by_subject.values()]
      out["mmlu_subjects"] = len(xs)
    out[f"{name}_accuracy"] = float(np.mean(xs))
    out[f"{name}_accuracy_ci"] = list(metrics.bootstrap_interval(xs, seed, resamples,
                                                                 confidence))
    out[f"{name}_n"] = len(mine)
  return out
