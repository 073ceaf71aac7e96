"""Math problems: BigMath-style rows, the papers' filter and split, GSM8K and MATH500.

Rows come from a source (pedrl.env.sources: a local JSONL or Parquet file, or a
`tfds:NAME[/CONFIG]:SPLIT`). A bad row (not UTF-8, not JSON, no problem or
answer, an answer math-verify cannot parse) is either skipped and counted in
the `LoadReport` with its row number, or fatal, by the `on_error` switch: never
a silent default, never a crash without saying which row. `load` is the one
way a job gets its problems (`ProblemSettings`).

Splits: `train` / `test` are pedrl's deterministic split of a raw pool (paper
003's filter first, by default); `all` the rows loaded; `published_train` a
training split as it was released (rd211/Big-Math-RL-Verified-Filtered's
`train`, what the reference's train_rl.py trains on): every row as given, in
file order, no filter, no hold-out, no de-duplication (the trainer draws a
seeded order per epoch, as the reference's sampler does: src/grpo/trainer.py,
RepeatRandomSampler with the run's seed);
`published` a test split as it was released (the same dataset's `test`, 500
rows, what the reference's eval.py evaluates): read as given, in order, no
filter, no reshuffle, exactly `n_test` rows, each problem once. A file that is
not that shape is an error naming it. Nothing here can tell a training file from
a test file: the evaluation of a training run checks that none of its problems
is one the run trained on (pedrl.jobs.trained_on).
"""
from collections.abc import Iterable, Sequence
import dataclasses
import hashlib

import sympy

from pedrl import streams
from pedrl.env import answers, sources
from pedrl.env.sources import DataError, read_rows
# Re-exported: defined there, importable without JAX.
from pedrl.env.settings import ON_ERROR, FORMATS, SPLITS, RELEASED, ProblemSettings

# The released test split's rows (rd211/Big-Math-RL-Verified-Filtered, its dataset card).
PUBLISHED_FIELDS = ("problem", "answer", "source", "domain", "llama8b_solve_rate")


@dataclasses.dataclass(frozen=True)
class Problem:
  id: str  # Hash of the problem text: stable whatever the file order.
  problem: str
  answer: str
  source: str = ""
  domain: tuple = ()
  solve_rate: float | None = None  # BigMath's llama8b_solve_rate.


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


def gsm8k_answer(solution: str) -> str:
  """A GSM8K solution's final answer: what follows its '####', commas removed."""
  if "####" not in solution:
    raise DataError("answer has no '#### ' final line")
  return solution.rsplit("####", 1)[1].strip().replace(",", "")


def _load(path: str, to_problem, on_error: str, unique: bool = False):
  """(problems, report) of the rows of `path`; `unique`: a row whose problem an earlier row
  had is skipped, counted in the report (records key a dialogue by its problem)."""
  if on_error not in ON_ERROR:
    raise ValueError(f"on_error {on_error!r} is not one of {ON_ERROR}")
  sources.check(path, "problem file")
  report, problems, first = LoadReport(path), [], {}
  for n, row in read_rows(path):
    report.rows += 1
    try:
      if isinstance(row, str):
        raise DataError(row)
      problem = to_problem(row)
    except DataError as e:
      if on_error == "fatal":
        raise DataError(f"{path}: row {n}: {e}") from None
      report.skipped.append((n, str(e)))
      continue
    if unique and first.setdefault(problem.id, n) != n:
      report.skipped.append((n, f"repeats row {first[problem.id]}'s problem"))
      continue
    problems.append(problem)
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


def load_bigmath(path: str, on_error: str = "skip",
                 unique: bool = False) -> tuple[list[Problem], LoadReport]:
  """BigMath rows (`problem`, `answer`, optional `source`, `domain`,
  `llama8b_solve_rate`) -> (problems, LoadReport); `unique`: repeats skipped, counted."""
  return _load(path, _bigmath, on_error, unique)


def _published(row: dict) -> Problem:
  missing = [k for k in PUBLISHED_FIELDS if k not in row]
  if missing:
    raise DataError(f"not a row of the published split (no {', '.join(missing)}; its rows have "
                    f"{', '.join(PUBLISHED_FIELDS)})")
  return _bigmath(row)


def load_published(path: str, n: int = 500) -> tuple[list[Problem], LoadReport]:
  """The released test split as given: its `n` rows in order, every one a BigMath row with
  the dataset's fields; DataError naming the source when it has another number of rows
  (another file: rd211's `train` split has 10,000), a bad row, or a problem twice (records
  key a dialogue by its problem). Nothing is skipped, filtered or reordered."""
  rows, report = _load(path, _published, "fatal")
  if len(rows) != n:
    raise DataError(f"{path}: {len(rows)} rows, but the published test split has {n} "
                    "(problems.n_test); is this the released test split? (fewer problems: "
                    "problems.limit)")
  first = {}
  for number, p in enumerate(rows, 1):
    if first.setdefault(p.id, number) != number:
      raise DataError(f"{path}: row {number} repeats row {first[p.id]}'s problem (id {p.id}): "
                      "an evaluation keys its dialogues by problem")
  return rows, report


def load_published_train(path: str) -> tuple[list[Problem], LoadReport]:
  """A released training split as given (rd211's `train`: the reference trains on all of it,
  config/train_rl_model.py DatasetConfig max_train_examples=-1): every row in order, each a
  BigMath row with the dataset's fields; DataError naming the source at a bad row."""
  return _load(path, _published, "fatal")


def load_gsm8k(path: str, on_error: str = "skip",
               unique: bool = False) -> tuple[list[Problem], LoadReport]:
  """GSM8K rows (`question`, `answer` ending in '#### N') -> (problems, LoadReport)."""
  def one(row):
    question, solution = _text(row, "question"), _text(row, "answer")
    answer = gsm8k_answer(solution)
    return Problem(problem_id(question), question, _checked_answer(answer), "gsm8k")
  return _load(path, one, on_error, unique)


def load_math500(path: str, on_error: str = "skip",
                 unique: bool = False) -> tuple[list[Problem], LoadReport]:
  """MATH500 rows (`problem`, `answer`, `subject`) -> (problems, LoadReport)."""
  def one(row):
    problem = _text(row, "problem")
    return Problem(problem_id(problem), problem, _checked_answer(_text(row, "answer")),
                   "math500", (str(row.get("subject", "")),))
  return _load(path, one, on_error, unique)


LOADERS = {"bigmath": load_bigmath, "gsm8k": load_gsm8k, "math500": load_math500}


def load(settings: ProblemSettings, seed: int = 0) -> tuple[list[Problem], LoadReport]:
  """A job's problems: the configured split of `settings.path`, cut to `limit`, and the
  loader's report. `seed` is the job's; the split's is `split_seed` when set."""
  p = settings
  if not p.path:
    raise DataError("no problems given: --config.problems.path=rows.jsonl (or tfds:NAME:SPLIT)")
  if p.split == "published":
    rows, report = load_published(p.path, p.n_test)
  elif p.split == "published_train":
    rows, report = load_published_train(p.path)
  else:
    # The whole file is the set: a problem twice would be two dialogues under one key (the
    # train and test splits drop repeats themselves, by their own order).
    rows, report = LOADERS[p.format](p.path, on_error=p.on_error, unique=p.split == "all")
    if p.filter:
      rows = paper_filter(rows)
    if p.split != "all":
      train, test = split(rows, p.n_train, p.n_test, seed if p.split_seed is None else p.split_seed)
      rows = {"train": train, "test": test}[p.split]
  return (rows[:p.limit] if p.limit > 0 else rows), report


def is_single_number(answer: str) -> bool:
  """Whether the answer is one number (5, -2.5, \\frac{3}{4}, 2\\sqrt{2}), not a tuple,
  set, interval, equation or expression with variables."""
  parsed = answers.parse_answer(answer)
  if not parsed:
    return False
  value = parsed[0]
  return isinstance(value, sympy.Expr) and bool(value.is_number) and value.is_real is not False


def paper_filter(problems: Iterable[Problem], min_rate: float = 0.01,
                 max_rate: float = 0.60) -> list[Problem]:
  """Paper 003's training pool: a single numeric answer and a Llama-3.1-8B solve rate
  in [min_rate, max_rate] (rows without a solve rate are dropped)."""
  return [p for p in problems if p.solve_rate is not None
          and min_rate <= p.solve_rate <= max_rate and is_single_number(p.answer)]


def split(problems: Sequence[Problem], n_train: int = ProblemSettings.n_train,
          n_test: int = ProblemSettings.n_test,
          seed: int = 0) -> tuple[list[Problem], list[Problem]]:
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
