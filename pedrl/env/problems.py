"""Math problems: BigMath-style rows, the papers' filter and split, GSM8K and MATH500.

Rows are read from local JSONL (or Parquet, with pyarrow installed). A bad row
(not UTF-8, not JSON, no problem or answer, an answer math-verify cannot parse)
is either skipped and counted in the `LoadReport` with its row number, or fatal,
by the `on_error` switch: never a silent default, never a crash without saying
which row.
"""
import dataclasses
import hashlib
import json
import os

import sympy

from pedrl import streams
from pedrl.env import answers

ON_ERROR = ("skip", "fatal")
FORMATS = ("bigmath", "gsm8k", "math500")
SPLITS = ("test", "train", "all")


class DataError(ValueError):
  """A problem file or row cannot be used."""


@dataclasses.dataclass(frozen=True)
class Problem:
  id: str  # Hash of the problem text: stable whatever the file order.
  problem: str
  answer: str
  source: str = ""
  domain: tuple = ()
  solve_rate: float | None = None  # BigMath's llama8b_solve_rate.


@dataclasses.dataclass(frozen=True)
class ProblemSettings:
  """Which problems a job runs on (the config's `problems` section)."""
  path: str | None = None  # A BigMath, GSM8K or MATH500 file (JSONL, or Parquet).
  format: str = "bigmath"  # One of FORMATS.
  on_error: str = "skip"  # A bad row: skipped (counted, by row number) or fatal.
  filter: bool = True  # Paper 003: one numeric answer, Llama-8B solve rate in [0.01, 0.60].
  split: str = "test"  # One of SPLITS (paper 003: 10,000 train / 500 test).
  n_train: int = 10_000
  n_test: int = 500
  limit: int = 0  # > 0: only the first `limit` problems of the split.


@dataclasses.dataclass
class LoadReport:
  path: str
  rows: int = 0
  skipped: list = dataclasses.field(default_factory=list)  # (row number, reason)

  @property
  def loaded(self) -> int:
    return self.rows - len(self.skipped)

  def summary(self) -> str:
    head = f"{self.path}: {self.loaded} of {self.rows} rows loaded"
    if not self.skipped:
      return head
    shown = "; ".join(f"row {n}: {why}" for n, why in self.skipped[:5])
    more = f" (+{len(self.skipped) - 5} more)" if len(self.skipped) > 5 else ""
    return f"{head}, {len(self.skipped)} skipped: {shown}{more}"


def problem_id(text: str) -> str:
  return hashlib.sha1(text.encode()).hexdigest()[:12]


def read_rows(path: str):
  """Yields (row number from 1, dict) or (row number, error message) per row."""
  if path.endswith(".parquet"):
    try:
      import pyarrow.parquet as pq
    except ImportError as e:
      raise DataError(f"{path}: reading Parquet needs pyarrow (pip install pyarrow)") from e
    for n, row in enumerate(pq.read_table(path).to_pylist(), 1):
      yield n, row
    return
  with open(path, "rb") as f:
    for n, raw in enumerate(f, 1):
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        yield n, f"not UTF-8 ({e.reason} at byte {e.start})"
        continue
      if not line.strip():
        yield n, "empty line"
        continue
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        yield n, f"not JSON ({e.msg})"
        continue
      yield n, row if isinstance(row, dict) else f"not a JSON object ({type(row).__name__})"


def json_rows(path: str) -> list[dict]:
  """Every JSON object of a JSONL file (blank lines skipped); DataError naming the file
  and the first bad row. For benchmark files, where a bad row is never skipped."""
  if not os.path.isfile(path):
    raise DataError(f"{path}: no such file")
  rows = []
  for n, row in read_rows(path):
    if row == "empty line":
      continue
    if isinstance(row, str):
      raise DataError(f"{path}, row {n}: {row}")
    rows.append(row)
  return rows


def gsm8k_answer(solution: str) -> str:
  """A GSM8K solution's final answer: what follows its '####', commas removed."""
  if "####" not in solution:
    raise DataError("answer has no '#### ' final line")
  return solution.rsplit("####", 1)[1].strip().replace(",", "")


def _load(path: str, to_problem, on_error: str):
  if on_error not in ON_ERROR:
    raise ValueError(f"on_error {on_error!r} is not one of {ON_ERROR}")
  if not os.path.isfile(path):
    raise DataError(f"{path}: no such problem file")
  report, problems = LoadReport(path), []
  for n, row in read_rows(path):
    report.rows += 1
    try:
      if isinstance(row, str):
        raise DataError(row)
      problems.append(to_problem(row))
    except DataError as e:
      if on_error == "fatal":
        raise DataError(f"{path}: row {n}: {e}") from None
      report.skipped.append((n, str(e)))
  return problems, report


def _text(row: dict, key: str) -> str:
  value = row.get(key)
  if not isinstance(value, str) or not value.strip():
    raise DataError(f"no {key!r} (got {value!r:.60})")
  return value.strip()


def _checked_answer(answer: str) -> str:
  if not answers.parses(answer):
    raise DataError(f"math-verify cannot parse the answer {answer!r:.60}")
  return answer


def _bigmath(row: dict) -> Problem:
  problem = _text(row, "problem")
  rate = row.get("llama8b_solve_rate")
  if rate is not None and not isinstance(rate, (int, float)):
    raise DataError(f"llama8b_solve_rate is not a number ({rate!r:.60})")
  domain = row.get("domain") or ()
  return Problem(problem_id(problem), problem, _checked_answer(_text(row, "answer")),
                 str(row.get("source") or ""),
                 tuple(domain) if isinstance(domain, (list, tuple)) else (str(domain),),
                 None if rate is None else float(rate))


def load_bigmath(path: str, on_error: str = "skip"):
  """BigMath rows (`problem`, `answer`, optional `source`, `domain`,
  `llama8b_solve_rate`) -> (problems, LoadReport)."""
  return _load(path, _bigmath, on_error)


def load_gsm8k(path: str, on_error: str = "skip"):
  """GSM8K rows (`question`, `answer` ending in '#### N') -> (problems, LoadReport)."""
  def one(row):
    question, solution = _text(row, "question"), _text(row, "answer")
    answer = gsm8k_answer(solution)
    return Problem(problem_id(question), question, _checked_answer(answer), "gsm8k")
  return _load(path, one, on_error)


def load_math500(path: str, on_error: str = "skip"):
  """MATH500 rows (`problem`, `answer`, `subject`) -> (problems, LoadReport)."""
  def one(row):
    problem = _text(row, "problem")
    return Problem(problem_id(problem), problem, _checked_answer(_text(row, "answer")),
                   "math500", (str(row.get("subject", "")),))
  return _load(path, one, on_error)


def is_single_number(answer: str) -> bool:
  """Whether the answer is one number (5, -2.5, \\frac{3}{4}, 2\\sqrt{2}), not a tuple,
  set, interval, equation or expression with variables."""
  parsed = answers.parse_answer(answer)
  if not parsed:
    return False
  value = parsed[0]
  return isinstance(value, sympy.Expr) and bool(value.is_number) and value.is_real is not False


def paper_filter(problems, min_rate: float = 0.01, max_rate: float = 0.60):
  """Paper 003's training pool: a single numeric answer and a Llama-3.1-8B solve rate
  in [min_rate, max_rate] (rows without a solve rate are dropped)."""
  return [p for p in problems if p.solve_rate is not None
          and min_rate <= p.solve_rate <= max_rate and is_single_number(p.answer)]


def split(problems, n_train: int = ProblemSettings.n_train, n_test: int = ProblemSettings.n_test,
          seed: int = 0):
  """A deterministic (train, test) split: problems with the same text kept once (so
  none is in both sets), ordered by id, shuffled by seed; the first n_test are the
  test set, the next n_train the training set. File order does not matter."""
  ordered = sorted(problems, key=lambda p: (p.id, p.answer, p.source, p.domain,
                                            -1.0 if p.solve_rate is None else p.solve_rate))
  ordered = [p for i, p in enumerate(ordered) if i == 0 or p.id != ordered[i - 1].id]
  if len(ordered) <= n_test:
    raise DataError(f"{len(ordered)} distinct problems cannot give a test set of {n_test} and "
                    f"a training set")
  order = streams.split_order(seed, len(ordered))
  shuffled = [ordered[i] for i in order]
  return shuffled[n_test:n_test + n_train], shuffled[:n_test]
