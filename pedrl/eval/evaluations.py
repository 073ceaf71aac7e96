"""The evaluations a sharded workdir can hold: each its records, metrics and files.

An `EvalTask` is what pedrl.eval.shards merges by: the type of the records its
shards hold, how the merged records become its metrics (with the settings its
protocol recorded), and the files it writes besides metrics.json. A protocol's
`kind` names its task (`TASKS`), so a workdir merges the same with or without
the job that wrote it (pedrl.tools.report). The jobs that run them are
pedrl.experiments.evaluate (tutoring, reasoning), .mathtutorbench and .cpa
(mathtutorbench).
"""
import os
from typing import Any, Mapping, Protocol

from pedrl.eval import metrics as metrics_lib, reasoning, records as records_lib
from pedrl.eval.mathtutorbench import results as bench_results, runner
from pedrl.eval.protocol import EvalProtocol, EvalSettings

# What evaluations recorded before a setting existed: its behaviour then.
BEFORE_EVAL = {"pedrm_unscored": "drop"}
BEFORE_REASONING = {"mmlu_average": "question"}


class EvalTask(Protocol):
  """An evaluation as its shards merge."""
  kind: str  # As protocols record it.
  record_type: type[records_lib.Record]
  # The protocol section naming the model under test; a training run's `workdir` and
  # `step` are in it (pedrl.eval.protocol.TutorRun).
  tutor_section: str

  def metrics(self, records: list[records_lib.Record], counts: Mapping[str, float],
              protocol: EvalProtocol) -> dict[str, Any]:
    """The metrics of every shard's records (in batch order), their summed `counts`."""

  def write(self, workdir: str, records: list[records_lib.Record], metrics: dict[str, Any],
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

  def metrics(self, records, counts, protocol):
    e = protocol.section("eval", EvalSettings, BEFORE_EVAL)
    out = metrics_lib.compute(records, seed=protocol.seed, resamples=e.bootstrap_resamples,
                              confidence=e.confidence, pedrm_unscored=e.pedrm_unscored)
    out.update(metrics_lib.dialogue_counts(records))
    return out


class Reasoning(_RecordsFile):
  """The tutor alone on reasoning benchmarks (pedrl.eval.reasoning): eval_reasoning.jsonl."""
  kind, record_type, tutor_section = "reasoning", records_lib.ReasoningRecord, "tutor"
  records_file = "eval_reasoning.jsonl"

  def metrics(self, records, counts, protocol):
    e = protocol.section("eval", EvalSettings, BEFORE_EVAL)
    r = protocol.section("reasoning", reasoning.ReasoningSettings, BEFORE_REASONING)
    return {"n_examples": len(records), **reasoning.accuracy(
        records, mmlu_average=r.mmlu_average, seed=protocol.seed,
        resamples=e.bootstrap_resamples, confidence=e.confidence)}


class MathTutorBench:
  """The benchmark's nine numbers (pedrl.eval.mathtutorbench): the harness's files."""
  kind, record_type, tutor_section = "mathtutorbench", records_lib.BenchRecord, "model"

  def metrics(self, records, counts, protocol):
    return {"n_examples": len(records), "tasks": bench_results.metrics(records, counts)}

  def write(self, workdir, records, metrics, protocol, config):
    bench_results.write(workdir, records, metrics["tasks"],
                        protocol.section("bench", runner.BenchSettings).model_name, config)


TASKS: dict[str, EvalTask] = {t.kind: t for t in (Tutoring(), Reasoning(), MathTutorBench())}
