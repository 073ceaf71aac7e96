r"""Runs tutor–student rollouts on a problem split and writes them with a summary.

  python -m pedrl.experiments.rollout --config=experiments/rollout.py:tiny --workdir=/tmp/rollout

Per batch of problems: dialogues (pedrl.env.rollout), the student's
pre-dialogue solve attempts, the rewards (pedrl.rewards.pipeline: judges,
post-dialogue attempts, UCO turns, weighted components), then the batch is
appended to WORKDIR/dialogues.jsonl. A rerun with the same workdir
skips the batches already written. WORKDIR/metrics.jsonl (and tensorboard/) has a
row per batch, named as the training job's: reward/<component>, reward_std/…
and the reward pipeline's counts pipeline/… (retries, parse failures,
policy-filled decisions, fallbacks); WORKDIR/summary.json and the last lines of
the log hold the summary (key=value), its counts over every batch.
"""
import sys

from pedrl import cli
from pedrl.jobs import settings

if __name__ == "__main__":  # First, before the imports below load JAX (pedrl.cli.check_job).
  cli.check_job(__spec__.name, sys.argv[1:],
                settings.read_settings)  # A dialogue job's DialogueSettings.)

import collections
import json
import os
import time
from collections.abc import Sequence

import ml_collections
import numpy as np
from absl import logging
from tqdm import tqdm

from pedrl import distributed, files, stopping
from pedrl.env import dialogue, rollout, solving
from pedrl.env.problems import LoadReport
from pedrl.rewards import assemble
from pedrl.jobs import metric_log, workdir as workdir_lib
from pedrl.jobs.checks import check_paths, read_settings
from pedrl.jobs.exits import define_flags, exit_on_signal, job_main
from pedrl.jobs.loading import load_party, load_problems, solver_party
from pedrl.jobs.reward_factory import api_backends, build_rewards

define_flags("experiments/rollout.py:tiny", "Output directory.")


def resume(workdir: str, group_size: int, writer: metric_log.MetricsWriter) -> tuple[list, list]:
  """(dialogues, metric rows) of the batches complete in `workdir`: a rerun skips them.

  Each batch writes its metrics row (step = batch number), then its dialogues,
  each synced. A batch is complete when its row is there and each of its
  problems has group_size dialogues; after a kill at any point, what belongs to
  an incomplete batch (a cut line, a row without its dialogues, part of a
  batch's dialogues) is removed from both files, and that batch runs again
  whole, with the same samples.
  """
  d_path = os.path.join(workdir, "dialogues.jsonl")
  _convert_old_rows(writer.path)
  rows = writer.rows()
  done = []
  if os.path.exists(d_path):
    if cut := files.repair_jsonl(d_path):
      logging.warning("%s: removed a partly written last line (%d bytes)", d_path, cut)
    done = dialogue.load_jsonl(d_path)
  if done and not rows:  # Rows are written first: only a lost metrics.jsonl gets here.
    raise dialogue.RecordError(
        f"{d_path} has {len(done)} dialogues but {writer.path} has no batch rows, so which "
        "batches are complete is unknown; restore metrics.jsonl or use a new workdir")
  count = collections.Counter(d.uid // group_size for d in done)  # Per problem position.
  complete = [r for r in rows if all(count[u] >= group_size for u in r["problem_uids"])]
  kept = {u for r in complete for u in r["problem_uids"]}
  whole = [d for d in done if d.uid // group_size in kept]
  if len(whole) < len(done) or len(complete) < len(rows):
    logging.warning("%s: dropping %d dialogues and %d metric rows of batches not completely "
                    "written; those batches run again", workdir, len(done) - len(whole),
                    len(rows) - len(complete))
    dialogue.save_jsonl(whole, d_path, mode="w")
  writer.resume(len(complete))  # Batches run in order: the complete ones are the first.
  return whole, complete


def _convert_old_rows(path: str) -> None:
  """Rewrites the metric rows of a workdir from before the shared metric names
  (batch_problem_uids, {component: {mean, std}}, pipeline: {…}) in today's names."""
  rows = files.read_rows(path, dialogue.RecordError)
  if not any(isinstance(r, dict) and "step" not in r and "batch_problem_uids" in r
             for r in rows):
    return
  out = []
  for step, r in enumerate(rows, 1):
    if "step" in r:
      out.append(r)
      continue
    stats = {k: assemble.Spread(v["mean"], v["std"]) for k, v in r.items()
             if isinstance(v, dict) and "mean" in v}
    out.append({"step": step, "problem_uids": r["batch_problem_uids"],
                **assemble.BatchRewards(stats, r.get("pipeline", {})).to_row()})
  files.append_rows(out, path, mode="w")
  logging.warning("%s: %d metric rows of an older pedrl rewritten in today's names", path,
                  len(rows))


def summarize(dialogues: Sequence[dialogue.Dialogue], seconds: dict, report: LoadReport) -> dict:
  """The run's numbers: per dialogue means, rates, end reasons, and where time went."""
  n = max(len(dialogues), 1)
  mean = lambda xs: float(np.mean(xs)) if len(xs) else float("nan")
  sampled = lambda d, role: sum(m.num_tokens for m in d.messages if m.role == role)
  post = [d.r_sol for d in dialogues if d.r_sol is not None]
  pre = [d.pre_solve_rate for d in dialogues if d.pre_solve_rate is not None]
  out = {
      "dialogues": len(dialogues),
      "problems": len({d.problem_id for d in dialogues}),
      "mean_turns": mean([d.turns for d in dialogues]),
      "mean_tutor_tokens": mean([sampled(d, dialogue.TUTOR) for d in dialogues]),
      "mean_student_tokens": mean([sampled(d, dialogue.STUDENT) for d in dialogues]),
      "pre_solve_rate": mean(pre),
      "post_solve_rate": mean(post),
      "delta_solve_rate": mean(post) - mean(pre) if post and pre else float("nan"),
      "truncation_rate": sum(d.truncated for d in dialogues) / n,
      "end_reasons": dict(collections.Counter(d.end_reason for d in dialogues)),
      "scenarios": dict(collections.Counter(d.scenario for d in dialogues)),
      "skipped_problem_rows": len(report.skipped),
      **{f"seconds_{k}": round(v, 2) for k, v in seconds.items()},
  }
  scored = [d for d in dialogues if d.rewards is not None]
  for name in (scored[0].rewards.components if scored else {}):
    out[f"reward_{name}"] = mean([d.rewards.components[name] for d in scored])
  if scored:
    out["reward_total"] = mean([d.rewards.total for d in scored])
  out["dropped_by_judges"] = sum(d.dropped for d in dialogues)
  return out


@job_main
def main(c: ml_collections.ConfigDict, workdir: str) -> None:
  main_process = distributed.is_main_process()  # The one that writes; all compute.
  s = read_settings(c)  # DialogueSettings: the rollout job's config is a dialogue job's.
  check_paths(s)
  name = workdir_lib.config_name(sys.argv)
  changed = workdir_lib.guard(workdir, "rollout", c, name)
  workdir_lib.claim(workdir, s, "rollout", name, main_process)
  workdir_lib.record_start(workdir, "rollout", c, name, changed, claimed=True)
  if main_process:
    workdir_lib.write_config(workdir, c)
  out_path = os.path.join(workdir, "dialogues.jsonl")
  writer = metric_log.MetricsWriter(workdir, active=main_process)
  mesh = s.mesh.make()
  seed, group_size = s.job.seed, s.job.group_size
  rows, report = load_problems(s.problems, seed)
  done, batch_rows = resume(workdir, group_size, writer) if main_process else ([], [])
  # Every process must run the same batches, whatever its view of the workdir.
  finished = set(distributed.broadcast_json(sorted({d.problem_id for d in done})))
  todo = [(i, p) for i, p in enumerate(rows) if p.id not in finished]
  if done:
    logging.info("resuming: %d dialogues already in %s; %d of %d problems left",
                 len(done), out_path, len(todo), len(rows))
  apis = api_backends(s)  # Keys and endpoints checked before the models load.

  start = time.perf_counter()
  tutor = load_party(s.tutor, mesh, s.job.scan_layers, {"enable_thinking": s.rollout.thinking})
  student = load_party(s.student, mesh, s.job.scan_layers)
  solver = solver_party(student, s.solve)
  rewards = build_rewards(s, student, solver, mesh, apis)
  seconds = collections.Counter(load=time.perf_counter() - start)

  b = s.job.batch_problems
  stopped_by = None
  with (tqdm(total=len(todo), unit="problem", desc="rollouts", disable=not main_process) as bar,
        stopping.StopRequest("the current batch") as signals):
    for lo in range(0, len(todo), b):
      uids, batch = zip(*todo[lo:lo + b])
      stats = rollout.RolloutStats()
      dialogues = rollout.run(batch, group_size, tutor, student, s.rollout, seed=seed,
                              problem_uids=uids, stats=stats)
      seconds["tutor"] += stats.tutor_seconds
      seconds["student"] += stats.student_seconds
      t0 = time.perf_counter()
      if s.solve.pre_dialogue:
        pre = solving.pre_dialogue(batch, solver, s.solve, seed=seed)
        for d in dialogues:
          d.pre_solve_rate = pre[d.problem_id].rate
      seconds["solve"] += time.perf_counter() - t0
      scored = rewards(dialogues)
      logging.info("batch %d: %s", lo // b, "  ".join(
          f"{k}={m:.3f}±{sd:.3f}" for k, (m, sd) in scored.stats.items()))
      row = {"step": len(batch_rows) + 1, "problem_uids": list(uids), **scored.to_row()}
      if main_process:  # The row first, then the dialogues: see `resume`.
        writer.write(row["step"], row)
        dialogue.save_jsonl(dialogues, out_path)
      done += dialogues
      batch_rows.append(row)
      bar.update(len(batch))
      bar.set_postfix(turns=f"{np.mean([d.turns for d in dialogues]):.1f}",
                      reward=f"{scored.total:.2f}")
      if distributed.any_process(signals.requested is not None):
        stopped_by = signals.requested or "SIGTERM"
        break
  writer.close()
  seconds["solve"] += rewards.seconds["solve"]
  seconds.update(judges=rewards.seconds["judges"], uco=rewards.seconds["uco"],
                 total=time.perf_counter() - start)
  if main_process:
    summary = summarize(done, dict(seconds), report)
    # Counted over every batch in the workdir, those of earlier invocations included.
    summary["reward_pipeline"] = dict(sorted(sum(
        (collections.Counter({k[len("pipeline/"):]: v for k, v in r.items()
                              if k.startswith("pipeline/")}) for r in batch_rows),
        collections.Counter()).items()))
    with open(os.path.join(workdir, "summary.json"), "w") as f:
      json.dump(summary, f, indent=2)
    if stopped_by is None:
      if not todo:
        workdir_lib.print_finished(f"every problem's dialogues were in {out_path} before")
      for k, v in summary.items():
        print(f"{k}={json.dumps(v) if isinstance(v, dict) else v}")
      workdir_lib.print_results(workdir, "summary.json", "dialogues.jsonl", "metrics.jsonl",
                                "run.json")
  exit_on_signal(stopped_by, f"{len({d.problem_id for d in done})} of {len(rows)} problems "
                 "(written)")


if __name__ == "__main__":
  cli.run(main)
