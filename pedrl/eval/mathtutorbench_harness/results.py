"""MathTutorBench's numbers and files from its records (every shard's, merged).

Per task: the harness's metrics over its examples in the harness's order, for
the four pedagogical tasks the Ped-RM win rate from the scores each record
carries, and beside them paper 002's benchmark violation rate (BVR: the share of
replies that break a rule of pedrl.mathtutorbench_rules.constraints, the checker
of CPA's table 3) with the replies per rule broken, for every tutor alike: a
local model, a trained tutor, an endpoint or an agent. Written into the workdir
as the harness and its reward-model script lay them out:
responses-<task>.jsonl, generations-<model>-<task>.json, results.json (keyed by
task, the harness's metric names, plus bvr and violations/<rule>) and
results.md (the leaderboard's nine columns, then BVR over all tasks and BVR† on
the hard splits, where paper 002 reports it).
"""
import collections
import json
import os
from collections.abc import Collection, Iterable
from typing import Any

from pedrl import files
from pedrl.eval.counts import Counts
from pedrl.eval.mathtutorbench_harness import tasks, win_rate
from pedrl.eval.records import BenchRecord
from pedrl.mathtutorbench_rules import constraints, scoring

# The leaderboard's nine columns: (task, metric, title).
COLUMNS = (("problem_solving", "accuracy_strict-match", "Problem solving"),
           ("socratic_questioning", "bleu", "Socratic questioning"),
           ("solution_correctness", "f1", "Solution correctness"),
           ("mistake_location", "f1_micro", "Mistake location"),
           ("mistake_correction", "accuracy", "Mistake correction"),
           ("scaffolding_generation", "win_rate", "Scaffolding (win rate)"),
           ("pedagogy_following", "win_rate", "Pedagogy following (win rate)"),
           ("scaffolding_generation_hard", "win_rate", "Scaffolding, hard"),
           ("pedagogy_following_hard", "win_rate", "Pedagogy following, hard"))
HARD = ("scaffolding_generation_hard", "pedagogy_following_hard")  # Paper 002 table 3's †.


def by_task(records: Iterable[BenchRecord]) -> dict[str, list[BenchRecord]]:
  """{task: its records in the harness's example order}, tasks in the benchmark's order."""
  out = collections.defaultdict(list)
  for r in records:
    out[r.task].append(r)
  return {t: sorted(out[t], key=lambda r: r.index) for t in tasks.TASKS if t in out}


def violations(records: Iterable[BenchRecord]) -> list[tuple[str, tuple]]:
  """(task, the rules its reply breaks) per record: constraints.violations on the reply
  as the harness kept it, a tutoring reply's leak judged against the reference solution
  the record's context carries (the metric may read it; the tutor never does)."""
  return [(r.task, constraints.violations(r.task, r.response, r.context or {}))
          for r in records]


def metrics(records: Iterable[BenchRecord],
            counts: Counts | None = None) -> dict[str, dict[str, Any]]:
  """{task: the harness's metrics, the win rate where Ped-RM scored every reply, bvr,
  broken (replies breaking any rule) and violations/<rule> (replies breaking it), and
  examples, prompts_cut, pedrm_inputs_cut, seconds and examples_per_s (the last three
  from the shards' counts)}."""
  counts = counts or Counts()
  out = {}
  for task, rows in by_task(records).items():
    m = scoring.compute(task, [r.prediction for r in rows], [r.target for r in rows])
    if task in tasks.PEDAGOGICAL and all(r.score is not None for r in rows):
      m.update(win_rate.win_rate([r.score for r in rows], [r.baseline_score for r in rows]))
    rates = constraints.rates(violations(rows))
    m.update(bvr=rates["bvr"], broken=rates["broken"],
             **{k: v for k, v in rates.items() if k.startswith("violations/")})
    m.update(examples=len(rows), prompts_cut=sum(r.prompt_cut for r in rows))
    if task in counts.pedrm_inputs_cut:  # Ped-RM inputs cut to its context (tiny runs).
      m["pedrm_inputs_cut"] = counts.pedrm_inputs_cut[task]
    seconds = counts.seconds.get(task)
    if seconds:  # Summed over shards: examples per shard-second.
      m.update(seconds=round(seconds, 2), examples_per_s=round(len(rows) / seconds, 3))
    out[task] = m
  return out


def write(workdir: str, records: Iterable[BenchRecord], results: dict, model_name: str,
          run: str) -> None:
  """The harness's files in `workdir`, and results.md: the leaderboard table with one
  row, named `run`."""
  for task, rows in by_task(records).items():
    skip = ("context", "trace", "schema")
    files.append_rows([{k: v for k, v in r.to_dict().items() if k not in skip} for r in rows],
                      os.path.join(workdir, f"responses-{task}.jsonl"), mode="w")
    if task in tasks.PEDAGOGICAL:
      gens = [{**r.context, "generated_teacher_utterance": r.prediction} for r in rows]
      with open(os.path.join(workdir, f"generations-{model_name}-{task}.json"), "w",
                encoding="utf-8") as f:
        json.dump(gens, f, indent=2, ensure_ascii=False)
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump(results, f, indent=2)
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write(table({run: results}) + "\n")


def summary(task: str, m: dict) -> str:
  """One short line for a task's results: its leaderboard number (percent), how many
  examples, prompts cut, seconds. results.json holds every metric."""
  metric = next(k for name, k, _ in COLUMNS if name == task)
  value = m.get(metric)
  parts = [f"{m['examples']} examples"]
  if m.get("prompts_cut"):
    parts.append(f"{m['prompts_cut']} prompt{'s' if m['prompts_cut'] > 1 else ''} cut")
  if m.get("seconds"):
    parts.append(f"{m['seconds']:.1f} s")
  shown = "–" if value is None else f"{100 * value:.1f}%"
  return f"{task}: {metric} {shown} ({', '.join(parts)})"


def pooled_bvr(results: dict, names: Collection[str] | None = None) -> float | None:
  """BVR over the tasks `names` (default: every task) of one run's results: the share
  of their replies that break a rule (their counts, `broken`, pooled); None where no such
  task has them."""
  got = [(m["broken"], m["examples"]) for t, m in results.items()
         if "broken" in m and (names is None or t in names)]
  n = sum(e for _, e in got)
  return sum(v for v, _ in got) / n if n else None


def table(runs: dict) -> str:
  """The leaderboard's nine columns, then BVR over all tasks and BVR† on the hard
  splits, one row per run ({name: results}), in percent."""
  head = ["run"] + [title for _, _, title in COLUMNS] + ["BVR", "BVR† (hard)"]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for name, results in runs.items():
    cells = [results.get(task, {}).get(metric) for task, metric, _ in COLUMNS]
    cells += [pooled_bvr(results), pooled_bvr(results, HARD)]
    lines.append("| " + " | ".join([name] + ["–" if v is None else f"{100 * v:.1f}"
                                             for v in cells]) + " |")
  return "\n".join(lines)
