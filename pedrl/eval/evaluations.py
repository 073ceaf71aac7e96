"""The evaluations a sharded workdir can hold: each its records, metrics and files.

An `EvalTask` is what pedrl.eval.shards merges by: the type of the records its
shards hold, how the merged records become its metrics (with the settings its
protocol recorded), and the files it writes besides metrics.json. A protocol's
`kind` names its task (`TASKS`), so a workdir merges the same with or without
the job that wrote it (pedrl.tools.report). The jobs that run them are
pedrl.experiments.evaluate (tutoring, reasoning), .mathtutorbench and .cpa
(mathtutorbench).

Each task's `metrics` is a dataclass of its own; JSON only where metrics.json is
written (`to_json`), with the keys earlier versions wrote, so old workdirs and
pedrl.tools.report read the same.
"""
import dataclasses
import os
from typing import Any, Protocol

from pedrl.eval import metrics as metrics_lib, reasoning, records as records_lib
from pedrl.eval.counts import Counts
from pedrl.eval.mathtutorbench_harness import results as bench_results, runner
from pedrl.eval.protocol import EvalProtocol, EvalSettings

# What evaluations recorded before a setting existed: its behaviour then.
BEFORE_EVAL = {"pedrm_unscored": "drop"}
BEFORE_REASONING = {"mmlu_average": "question"}


class Metrics(Protocol):
  """An evaluation's metrics; `to_json` is metrics.json's part of them."""

  def to_json(self) -> dict[str, Any]:
    """The metrics under metrics.json's keys."""


@dataclasses.dataclass(frozen=True)
class TutoringMetrics:
  """A tutoring evaluation's metrics (pedrl.eval.metrics.compute: each per problem, with
  `<name>_ci` its bootstrap interval; NaN where nothing measured it) and how its
  dialogues went (pedrl.eval.metrics.Counts)."""
  n_problems: int
  n_dialogues: int
  pre_solve_rate: float
  pre_solve_rate_ci: list[float]
  post_solve_rate: float
  post_solve_rate_ci: list[float]
  delta_solve_rate: float
  delta_solve_rate_ci: list[float]
  leak_rate: float
  leak_rate_ci: list[float]
  leak_any_rate: float
  leak_any_rate_ci: list[float]
  helpful_rate: float
  helpful_rate_ci: list[float]
  helpful_all_rate: float
  helpful_all_rate_ci: list[float]
  thinking_score: float
  thinking_score_ci: list[float]
  pedrm_micro: float
  pedrm_micro_ci: list[float]
  pedrm_macro: float
  pedrm_macro_ci: list[float]
  pedrm_turns: int
  pedrm_dialogues: int
  pedrm_unscored_dialogues: int
  pedrm_unscored: str  # How a dialogue without a scored turn counted (EvalSettings).
  leak_samples: int
  leak_unparsed_samples: int
  leak_unparsed_dialogues: int
  helpful_samples: int
  helpful_unparsed_samples: int
  helpful_unparsed_dialogues: int
  confidence: float
  bootstrap_resamples: int
  bootstrap_seed: int
  dialogues: metrics_lib.Counts

  def to_json(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    out.update(out.pop("dialogues"))  # Beside the metrics, as they always were.
    return out


@dataclasses.dataclass(frozen=True)
class Accuracy:
  """A reasoning benchmark's accuracy (or a multiple-choice category's, `wbeb/<category>`)."""
  accuracy: float  # MMLU by subject: the mean of the subjects' accuracies.
  accuracy_ci: list[float]
  n: int  # Questions.
  question_accuracy: float | None = None  # MMLU by subject: the share of all its questions.
  subjects: int | None = None  # MMLU by subject: how many.


@dataclasses.dataclass(frozen=True)
class ReasoningMetrics:
  """Reasoning preservation (pedrl.eval.reasoning.accuracy): per benchmark and category."""
  n_examples: int
  benchmarks: dict[str, Accuracy]  # In reasoning.accuracy's order.

  @classmethod
  def from_accuracy(cls, n_examples: int, flat: dict[str, Any]) -> "ReasoningMetrics":
    """From reasoning.accuracy's `<name>_accuracy`, `_accuracy_ci`, `_n` (and MMLU's
    `mmlu_question_accuracy`, `mmlu_subjects`)."""
    names = [k.removesuffix("_n") for k in flat if k.endswith("_n")]
    return cls(n_examples, {name: Accuracy(
        flat[f"{name}_accuracy"], flat[f"{name}_accuracy_ci"], flat[f"{name}_n"],
        flat.get(f"{name}_question_accuracy"), flat.get(f"{name}_subjects"))
        for name in names})

  def to_json(self) -> dict[str, Any]:
    out = {"n_examples": self.n_examples}
    for name, a in self.benchmarks.items():
      if a.question_accuracy is not None:
        out[f"{name}_question_accuracy"] = a.question_accuracy
      if a.subjects is not None:
        out[f"{name}_subjects"] = a.subjects
      out.update({f"{name}_accuracy": a.accuracy, f"{name}_accuracy_ci": a.accuracy_ci,
                  f"{name}_n": a.n})
    return out


@dataclasses.dataclass(frozen=True)
class BenchMetrics:
  """MathTutorBench's results: per task, the harness's metrics under its own names, with
  pedrl's beside them (pedrl.eval.mathtutorbench_harness.results.metrics)."""
  n_examples: int
  tasks: dict[str, dict[str, Any]]

  def to_json(self) -> dict[str, Any]:
    return {"n_examples": self.n_examples, "tasks": self.tasks}


@dataclasses.dataclass(frozen=True)
class Merged:
  """An evaluation's merged result: its metrics and its shards' summed counts (seconds,
  API calls, cut inputs: pedrl.jobs.sharded)."""
  metrics: Metrics
  counts: Counts

  def to_json(self) -> dict[str, Any]:
    return {**self.metrics.to_json(), "counts": self.counts.to_json()}


class EvalTask(Protocol):
  """An evaluation as its shards merge."""
  kind: str  # As protocols record it.
  record_type: type[records_lib.Record]
  # The protocol section naming the model under test; a training run's `workdir` and
  # `step` are in it (pedrl.eval.protocol.TutorRun).
  tutor_section: str

  def metrics(self, records: list[records_lib.Record], counts: Counts,
              protocol: EvalProtocol) -> Metrics:
    """The metrics of every shard's records (in batch order), their summed `counts`."""

  def write(self, workdir: str, records: list[records_lib.Record], metrics: Metrics,
            protocol: EvalProtocol, config: str) -> None:
    """The merged records' files (metrics.json is the merge's); `config` names the run."""


class _RecordsFile:
  """An evaluation whose merged records are one JSONL file (`records_file`)."""
  records_file: str

  def write(self, workdir, records, metrics, protocol, config):
    records_lib.save(records, os.path.join(workdir, self.records_file), mode="w")


class Tutoring(_RecordsFile):
  """Papers 003/001/000's dialogues (pedrl.eval.metrics): eval_dialogues.jsonl."""
  kind, record_type, tutor_section = "tutoring", records_lib.EvalRecord, "tutor"
  records_file = "eval_dialogues.jsonl"

  def metrics(self, records: list[records_lib.EvalRecord], counts: Counts,
              protocol: EvalProtocol) -> TutoringMetrics:
    e = protocol.section("eval", EvalSettings, BEFORE_EVAL)
    return TutoringMetrics(
        **metrics_lib.compute(records, seed=protocol.seed, resamples=e.bootstrap_resamples,
                              confidence=e.confidence, pedrm_unscored=e.pedrm_unscored),
        dialogues=metrics_lib.Counts(**metrics_lib.dialogue_counts(records)))


class Reasoning(_RecordsFile):
  """The tutor alone on reasoning benchmarks (pedrl.eval.reasoning): eval_reasoning.jsonl."""
  kind, record_type, tutor_section = "reasoning", records_lib.ReasoningRecord, "tutor"
  records_file = "eval_reasoning.jsonl"

  def metrics(self, records: list[records_lib.ReasoningRecord], counts: Counts,
              protocol: EvalProtocol) -> ReasoningMetrics:
    e = protocol.section("eval", EvalSettings, BEFORE_EVAL)
    r = protocol.section("reasoning", reasoning.ReasoningSettings, BEFORE_REASONING)
    return ReasoningMetrics.from_accuracy(len(records), reasoning.accuracy(
        records, mmlu_average=r.mmlu_average, seed=protocol.seed,
        resamples=e.bootstrap_resamples, confidence=e.confidence))


class MathTutorBench:
  """The benchmark's nine numbers (pedrl.eval.mathtutorbench_harness): the harness's files."""
  kind, record_type, tutor_section = "mathtutorbench", records_lib.BenchRecord, "model"

  def metrics(self, records: list[records_lib.BenchRecord], counts: Counts,
              protocol: EvalProtocol) -> BenchMetrics:
    return BenchMetrics(len(records), bench_results.metrics(records, counts))

  def write(self, workdir: str, records: list[records_lib.BenchRecord], metrics: BenchMetrics,
            protocol: EvalProtocol, config: str) -> None:
    bench_results.write(workdir, records, metrics.tasks,
                        protocol.section("bench", runner.BenchSettings).model_name, config)


TASKS: dict[str, EvalTask] = {t.kind: t for t in (Tutoring(), Reasoning(), MathTutorBench())}
