"""What an evaluation writes per item, one JSONL line each: `EvalRecord` per dialogue,
`ReasoningRecord` per benchmark question, `BenchRecord` per MathTutorBench example.

A record carries everything the metrics need (pedrl.eval.metrics) and the
dialogue itself as the student and the judges saw it, so a table can be
recomputed, or a surprising number read, without running anything again. The
tutor's token ids, mask and log-probs (training data) are left out.
"""
import dataclasses
from typing import Any, Protocol, TypeVar

from pedrl import files
from pedrl.env.dialogue import Dialogue, RecordError

SCHEMA_VERSION = 1

# A value as JSON holds it: what a harness's parser returns (a number, a string, a list).
JSONValue = str | int | float | bool | None | list[Any] | dict[str, Any]


class Record(Protocol):
  """One line of a shard's records: the batch that computed it, a key unique in its
  evaluation, and its JSON form."""
  batch: int

  @property
  def key(self) -> tuple: ...

  def to_dict(self) -> dict: ...

  @classmethod
  def from_dict(cls, row: dict) -> "Record": ...


R = TypeVar("R", bound=Record)


@dataclasses.dataclass
class EvalRecord:
  problem_id: str
  sample: int  # Which of the problem's samples_per_problem dialogues.
  batch: int  # The evaluation batch that computed it (shards and resuming go by batch).
  pre_solve_rate: float | None  # The student alone, K attempts (solve.pre_prompt).
  post_solve_rate: float | None  # After the dialogue, K attempts (fig. 11).
  leak_decisions: list  # Per leakage-judge sample: "OK", "REJECT", or None (never parsed).
  helpful_decisions: list  # The same for the helpfulness judge.
  thinking_scores: list  # Per thinking-judge sample: a score in [0, 1] or None; [] without.
  pedrm_turn_scores: list  # Ped-RM's score of each tutor turn, in order.
  dialogue: Dialogue
  schema: int = SCHEMA_VERSION

  @property
  def key(self) -> tuple:
    return self.problem_id, self.sample

  def to_dict(self) -> dict:
    out = dataclasses.asdict(self)
    out["dialogue"].update(tutor_ids=[], tutor_mask=[], tutor_logprobs=[])
    return out

  @classmethod
  def from_dict(cls, row: dict) -> "EvalRecord":
    row = files.checked_schema(row, SCHEMA_VERSION, "evaluation")
    row["dialogue"] = Dialogue.from_dict(row["dialogue"])
    return cls(**row)


@dataclasses.dataclass
class ReasoningRecord:
  """One benchmark question put to the tutor (pedrl.eval.reasoning)."""
  benchmark: str
  example_id: str
  batch: int
  reply: str
  extracted: str | None  # What the grader read from the reply (None: nothing).
  target: str
  correct: bool
  category: str = ""  # A multiple-choice benchmark's category (WBEB's); "" for the others.
  schema: int = SCHEMA_VERSION

  @property
  def key(self) -> tuple:
    return self.benchmark, self.example_id

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, row: dict) -> "ReasoningRecord":
    return cls(**files.checked_schema(row, SCHEMA_VERSION, "reasoning"))


@dataclasses.dataclass
class BenchRecord:
  """One MathTutorBench example answered by the model under test
  (pedrl.eval.mathtutorbench_harness): the harness's prompt, reply, target and parse."""
  task: str
  index: int  # In the harness's example order of the task.
  batch: int
  prompt: str  # As rendered from the task file.
  response: str  # As the harness keeps it (completion mode strips it).
  target: JSONValue  # The task's formatted ground truth.
  prediction: JSONValue  # What the harness's parser reads from the response.
  prompt_cut: bool = False  # Its start cut off to fit the context (tiny runs only).
  score: float | None = None  # Ped-RM on the response (pedagogical tasks).
  baseline_score: float | None = None  # Ped-RM on the human teacher's turn.
  context: dict | None = None  # The example's generations-file fields (pedagogical tasks).
  trace: dict | None = None  # An agent's trace of the reply (pedrl.agents: CPA's stages).
  schema: int = SCHEMA_VERSION

  @property
  def key(self) -> tuple:
    return self.task, self.index

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, row: dict) -> "BenchRecord":
    return cls(**files.checked_schema(row, SCHEMA_VERSION, "MathTutorBench"))


def save(records: list[Record], path: str, mode: str = "a") -> None:
  """Appends (or writes) records in one synced write; a crash cuts at most the last line."""
  files.append_rows([r.to_dict() for r in records], path, mode)


def load(path: str, kind: type[R] = EvalRecord) -> list[R]:
  """The records (of type `kind`) of `path` (none if absent); a line cut by a crash is
  removed (logged), any other bad line is a RecordError naming the file and line."""
  return files.read_records(path, kind.from_dict, "an evaluation record", RecordError)
