"""MathTutorBench's tasks as data: the task files of a benchmark checkout, the examples
the harness builds from each data file, and the prompts it renders.

Nothing of the benchmark is copied into pedrl: the task files (`configs/*.yaml`:
a Jinja `system_prompt`, `few_shot_samples`, `ground_truth_format`, `stop`)
are read from the user's MathTutorBench checkout, the data from local files.
The examples follow the harness's loaders (its dataloaders/ and tasks/ at the commit
in SOURCES):

- GSM8K (problem solving; Socratic questioning on the socratic file): the rows
  as they are (`question`, `answer`).
- step verification (`dataset.json`): per row an error example, then a
  no-error one. `question` is the problem; `dialog_history` the teacher turns
  before the first student turn as "Teacher: …" lines; `student_solution` the
  steps (the incorrect solution's, or the reference's lines) but the last, as
  "Step i - …" joined by the two characters backslash and n (the harness's);
  error example: `is_error` True, `error_step` = incorrect_index + 1 and the
  student's chat turn; no-error example: False, 0 and `student_correct_response`.
  Mistake correction takes the error examples only.
- MathDial bridge (scaffolding, pedagogy following, and their hard splits):
  `question` = problem; `dialog_history` every turn but the last as
  "Student: <text>" or, for any other speaker, "Teacher: <text>" lines (a one-turn
  dialogue keeps its turn); `conversation_json` those turns; the last turn, whoever
  says it, is `ground_truth_response`; `reference_solution` as is.

A prompt is `system_prompt` rendered with the example's fields and
`shots=few_shot_samples`; the target is `ground_truth_format` rendered the same way.

Where a paper run's files come from is `SOURCES` (a missing one's error names it);
testdata/mathtutorbench holds a tiny benchmark written for pedrl in the same format
and layout.
"""
import dataclasses
import functools
import json
import os

import jinja2

from pedrl.env import sources
from pedrl.env.sources import DataError
# The names live below the agents (pedrl.mathtutorbench_rules); the task files are read by them.
from pedrl.mathtutorbench_rules.names import PEDAGOGICAL, TASKS, TaskError  # noqa: F401

_KEYS = ("name", "system_prompt", "stop")


@dataclasses.dataclass(frozen=True)
class TaskFile:
  name: str
  system_prompt: str
  ground_truth_format: str
  few_shot_samples: str
  stop: tuple
  path: str

  def prompt(self, example: dict) -> str:
    return _template(self.system_prompt).render(**example, shots=self.few_shot_samples)

  def target(self, example: dict) -> str:
    return _template(self.ground_truth_format).render(**example, shots=self.few_shot_samples)


@functools.lru_cache(maxsize=64)
def _template(text: str) -> jinja2.Template:
  """Compiled once per text, not once per example; Jinja's defaults, as the harness's."""
  return jinja2.Template(text)


def read_task(benchmark_dir: str, task: str) -> TaskFile:
  """Task `task`'s file from a MathTutorBench checkout; TaskError naming what is wrong."""
  if task not in TASKS:
    raise TaskError(f"unknown MathTutorBench task {task!r}; the tasks: {', '.join(TASKS)}")
  import yaml
  path = os.path.join(benchmark_dir, "configs", TASKS[task][0])
  if not os.path.isfile(path):
    raise TaskError(f"{path} does not exist: --config.benchmark_dir must be a MathTutorBench "
                    f"checkout, {BENCHMARK}")
  try:
    with open(path, encoding="utf-8") as f:
      raw = yaml.safe_load(f)
  except (OSError, yaml.YAMLError) as e:
    raise TaskError(f"{path}: not a readable task file ({e})") from None
  missing = [k for k in _KEYS if not isinstance(raw, dict) or k not in raw]
  if missing:
    raise TaskError(f"{path}: no {', '.join(missing)} (not a MathTutorBench task file)")
  return TaskFile(name=raw["name"], system_prompt=raw["system_prompt"],
                  ground_truth_format=raw.get("ground_truth_format") or "",
                  few_shot_samples=raw.get("few_shot_samples") or "",
                  stop=tuple(raw["stop"] or ()), path=path)


# -- Examples ------------------------------------------------------------------------------

def _json_list(path: str) -> list:
  """A JSON file holding a list of rows (the step-verification and bridge files)."""
  try:
    with open(path, encoding="utf-8") as f:
      rows = json.load(f)
  except OSError as e:
    raise DataError(f"{path}: cannot be read ({e})") from None
  except ValueError as e:
    raise DataError(f"{path}: not JSON ({e})") from None
  if not isinstance(rows, list):
    raise DataError(f"{path}: not a list of rows")
  return rows


def _need(path: str, n: int, row, keys) -> None:
  if not isinstance(row, dict) or any(k not in row for k in keys):
    have = sorted(row) if isinstance(row, dict) else type(row).__name__
    raise DataError(f"{path}, row {n}: needs {', '.join(keys)} (has {have})")


def gsm8k(path: str) -> list[dict]:
  rows = sources.json_rows(path)
  for n, row in enumerate(rows, 1):
    _need(path, n, row, ("question", "answer"))
  return rows


def stepverify(path: str, errors_only: bool = False) -> list[dict]:
  out = []
  keys = ("problem", "dialog_history", "student_incorrect_solution", "incorrect_index",
          "reference_solution", "student_correct_response")
  for n, row in enumerate(_json_list(path), 1):
    _need(path, n, row, keys)
    turns = row["dialog_history"]
    cutoff = next((i for i, t in enumerate(turns) if t["user"] == "Student"), len(turns))
    if cutoff == len(turns):
      raise DataError(f"{path}, row {n}: the dialogue has no student turn")
    history = "\n".join(f"Teacher: {t['text']}" for t in turns[:cutoff])
    steps = lambda lines: "\\n".join(f"Step {i} - {s}" for i, s in enumerate(lines, 1))
    common = dict(question=row["problem"], dialog_history=history,
                  reference_solution=row["reference_solution"])
    out.append(dict(common, student_solution=steps(row["student_incorrect_solution"][:-1]),
                    is_error=True, error_step=int(row["incorrect_index"]) + 1,
                    student_chat_solution=turns[cutoff]["text"]))
    if not errors_only:
      out.append(dict(common,
                      student_solution=steps(row["reference_solution"].split("\n")[:-1]),
                      is_error=False, error_step=0,
                      student_chat_solution=row["student_correct_response"]))
  return out


def bridge(path: str) -> list[dict]:
  """The bridge examples as the harness's loader reads them (dataloaders/mathbridge.py):
  the last turn is the human teacher's reply to beat, the turns before it the dialogue,
  each "Student: " or, whoever else speaks, "Teacher: "; a dialogue of one turn keeps it
  as its history too. An empty dialogue, where the harness fails, is a DataError."""
  out = []
  for n, row in enumerate(_json_list(path), 1):
    _need(path, n, row, ("problem", "reference_solution", "dialog_history"))
    turns = row["dialog_history"]
    if not turns:
      raise DataError(f"{path}, row {n}: the dialogue has no turns")
    lines = [f"{'Student' if t['user'] == 'Student' else 'Teacher'}: {t['text']}" for t in turns]
    out.append(dict(question=row["problem"], reference_solution=row["reference_solution"],
                    dialog_history="\n".join(lines[:-1] if len(lines) > 1 else lines),
                    conversation_json=turns[:-1], ground_truth_response=turns[-1]))
  return out


# Where the official files come from: the benchmark checkout (--config.benchmark_dir), then
# each file of a data directory (--config.data_dir) by its name there.
BENCHMARK = ("a checkout of github.com/eth-lre/mathtutorbench (commit 54b62137c717 read: "
             "its configs/ holds the nine task files)")
SOURCES = {
    "gsm8k/test.jsonl": "GSM8K's main test split (github.com/openai/grade-school-math, "
                        "grade_school_math/data/test.jsonl)",
    "gsm8k/test_socratic.jsonl": "GSM8K's socratic test split (same repository, "
                                 "grade_school_math/data/test_socratic.jsonl)",
    "stepverify/dataset.json": "the step-verification data (github.com/eth-lre/"
                               "verify-then-generate dataset/dataset.json; HF eth-nlped/stepverify)",
    "mathtutorbench/mathdial_bridge.json": "the MathTutorBench checkout's "
                                           "datasets/mathdial_bridge.json",
    "mathtutorbench/mathdial_bridge_hard.json": "the MathTutorBench checkout's "
                                                "datasets/mathdial_bridge_hard.json",
}


def data_dir_layout() -> str:
  """What a data directory holds, one clause per file, for the errors that point to it."""
  return "; ".join(f"{name}: {source}" for name, source in SOURCES.items())


# Data kind -> (the data file's name in a data directory, its loader).
DATA = {
    "gsm8k": ("gsm8k/test.jsonl", gsm8k),
    "gsm8k_socratic": ("gsm8k/test_socratic.jsonl", gsm8k),
    "stepverify": ("stepverify/dataset.json", stepverify),
    "stepverify_errors": ("stepverify/dataset.json",
                          lambda path: stepverify(path, errors_only=True)),
    "bridge": ("mathtutorbench/mathdial_bridge.json", bridge),
    "bridge_hard": ("mathtutorbench/mathdial_bridge_hard.json", bridge),
}


def examples(task: str, data_dir: str) -> list[dict]:
  """Task `task`'s examples, in the harness's order, from `data_dir` (laid out as
  `SOURCES` names: gsm8k/, stepverify/, mathtutorbench/)."""
  if task not in TASKS:
    raise TaskError(f"unknown MathTutorBench task {task!r}; the tasks: {', '.join(TASKS)}")
  name, load = DATA[TASKS[task][1]]
  path = os.path.join(data_dir, name)
  if not os.path.isfile(path):
    raise DataError(f"{path} does not exist: task {task} reads its data there, "
                    f"{SOURCES[name]}")
  return load(path)
