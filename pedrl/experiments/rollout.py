r"""Runs tutor–student rollouts on a problem split and writes them with a summary.

  python -m pedrl.experiments.rollout --config=experiments/rollout.py:tiny --workdir=/tmp/rollout

Per batch of problems: dialogues (pedrl.env.rollout), the student's
pre-dialogue solve attempts, the rewards (pedrl.rewards.pipeline: judges,
post-dialogue attempts, UCO turns, weighted components), then the batch is
appended to WORKDIR/dialogues.jsonl. A rerun with the same workdir
skips the batches already written. WORKDIR/metrics.jsonl has each batch's reward
components (mean, std) and the reward pipeline's counts (retries, parse
failures, policy-filled decisions, fallbacks); WORKDIR/summary.json and the last
lines of the log hold the summary (key=value), its counts over every batch.
"""
import collections
import json
import os
import sys
import time

import numpy as np
from absl import app, flags, logging
from ml_collections import config_flags
from tqdm import tqdm

from pedrl import distributed, sharding, stopping
from pedrl.env import dialogue, problems as problems_lib, rollout, solving
from pedrl.experiments import workdir as workdir_lib
from pedrl.experiments.common import (api_backends, build_rewards, check_paths,
                                      dialogue_settings, exit_on_signal, exits_cleanly,
                                      load_party, load_problems, solver_party)

config_flags.DEFINE_config_file("config", None, "Config file, e.g. experiments/rollout.py:tiny.")
flags.DEFINE_string("workdir", None, "Output directory.", required=True)
flags.DEFINE_enum("multihost", "auto", distributed.MODES,
                  "jax.distributed.initialize(): auto = when the environment shows several "
                  "processes (TPU pod, SLURM, Open MPI, JAX_COORDINATOR_ADDRESS).")
FLAGS = flags.FLAGS


def _read_rows(path: str) -> list[dict]:
  """The JSON rows of metrics.jsonl (a line cut by a crash removed first)."""
  if not os.path.exists(path):
    return []
  if cut := dialogue.repair_jsonl(path):
    logging.warning("%s: removed a partly written last line (%d bytes)", path, cut)
  rows = []
  with open(path) as f:
    for n, line in enumerate(f, 1):
      if line.strip():
        try:
          rows.append(json.loads(line))
        except json.JSONDecodeError as e:
          raise problems_lib.DataError(f"{path}, line {n}: not JSON ({e})") from None
  return rows


def resume(workdir: str, group_size: int) -> tuple[list, list]:
  """(dialogues, metric rows) of the batches complete in `workdir`: a rerun skips them.

  Each batch writes its metrics row, then its dialogues, each synced. A batch is
  complete when its row is there and each of its problems has group_size
  dialogues; after a kill at any point, what belongs to an incomplete batch (a
  cut line, a row without its dialogues, part of a batch's dialogues) is removed
  from both files, and that batch runs again whole, with the same samples.
  """
  d_path, m_path = os.path.join(workdir, "dialogues.jsonl"), os.path.join(workdir, "metrics.jsonl")
  rows = _read_rows(m_path)
  done = []
  if os.path.exists(d_path):
    if cut := dialogue.repair_jsonl(d_path):
      logging.warning("%s: removed a partly written last line (%d bytes)", d_path, cut)
    done = dialogue.load_jsonl(d_path)
  count = collections.Counter(d.uid // group_size for d in done)  # Per problem position.
  complete = [r for r in rows if all(count[u] >= group_size for u in r["batch_problem_uids"])]
  kept = {u for r in complete for u in r["batch_problem_uids"]}
  whole = [d for d in done if d.uid // group_size in kept]
  if len(whole) < len(done) or len(complete) < len(rows):
    logging.warning("%s: dropping %d dialogues and %d metric rows of batches not completely "
                    "written; those batches run again", workdir, len(done) - len(whole),
                    len(rows) - len(complete))
    dialogue.save_jsonl(whole, d_path, mode="w")
    _write_rows(complete, m_path, mode="w")
  return whole, complete


def _write_rows(rows, path: str, mode: str = "a"):
  with open(path, mode) as f:  # One synced write: a crash can cut at most the last line.
    f.write("".join(json.dumps(r) + "\n" for r in rows))
    f.flush()
    os.fsync(f.fileno())


def summarize(dialogues, seconds: dict, report) -> dict:
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
  scored = [d for d in dialogues if d.rewards]
  for name in (scored[0].rewards if scored else {}):
    out[f"reward_{name}"] = mean([d.rewards[name] for d in scored])
  out["dropped_by_judges"] = sum(bool(d.judgement.get("dropped")) for d in dialogues)
  return out


@exits_cleanly
def main(argv):
  del argv
  distributed.initialize(FLAGS.multihost)  # Before anything touches the devices.
  main_process = distributed.is_main_process()  # The one that writes; all compute.
  c, workdir = FLAGS.config, FLAGS.workdir
  check_paths(c)
  workdir_lib.claim(workdir, c, "rollout", workdir_lib.config_name(sys.argv), main_process)
  out_path = os.path.join(workdir, "dialogues.jsonl")
  metrics_path = os.path.join(workdir, "metrics.jsonl")
  mesh = sharding.make_mesh(**c.mesh.to_dict())
  settings, solve = dialogue_settings(c)
  rows, report = load_problems(c)
  done, batch_rows = resume(workdir, c.group_size) if main_process else ([], [])
  # Every process must run the same batches, whatever its view of the workdir.
  finished = set(distributed.broadcast_json(sorted({d.problem_id for d in done})))
  todo = [(i, p) for i, p in enumerate(rows) if p.id not in finished]
  if done:
    logging.info("resuming: %d dialogues already in %s; %d of %d problems left",
                 len(done), out_path, len(todo), len(rows))
  apis = api_backends(c)  # Keys and endpoints checked before the models load.

  start = time.perf_counter()
  tutor = load_party(c.tutor, mesh, c.scan_layers, {"enable_thinking": settings.thinking})
  student = load_party(c.student, mesh, c.scan_layers)
  solver = solver_party(student, c)
  rewards = build_rewards(c, student, solver, solve, mesh, apis)
  seconds = collections.Counter(load=time.perf_counter() - start)

  b = c.batch_problems
  stopped_by = None
  with (tqdm(total=len(todo), unit="problem", desc="rollouts", disable=not main_process) as bar,
        stopping.StopRequest("the current batch") as signals):
    for lo in range(0, len(todo), b):
      uids, batch = zip(*todo[lo:lo + b])
      stats = rollout.RolloutStats()
      dialogues = rollout.run(batch, c.group_size, tutor, student, settings,
                              problem_uids=uids, stats=stats)
      seconds["tutor"] += stats.tutor_seconds
      seconds["student"] += stats.student_seconds
      t0 = time.perf_counter()
      if c.solve.pre_dialogue:
        pre = solving.pre_dialogue(batch, solver, solve)
        for d in dialogues:
          d.pre_solve_rate = pre[d.problem_id].rate
      seconds["solve"] += time.perf_counter() - t0
      batch_stats = rewards(dialogues)
      logging.info("batch %d: %s", lo // b, "  ".join(
          f"{k}={m:.3f}±{sd:.3f}" for k, (m, sd) in batch_stats.items()))
      row = {"batch_problem_uids": list(uids),
             **{k: {"mean": m, "std": sd} for k, (m, sd) in batch_stats.items()},
             "pipeline": dict(sorted(rewards.batch_stats.items()))}
      if main_process:  # The row first, then the dialogues: see `resume`.
        _write_rows([row], metrics_path)
        dialogue.save_jsonl(dialogues, out_path)
      done += dialogues
      batch_rows.append(row)
      bar.update(len(batch))
      bar.set_postfix(turns=f"{np.mean([d.turns for d in dialogues]):.1f}",
                      reward=f"{batch_stats['total'][0]:.2f}")
      if distributed.any_process(signals.requested is not None):
        stopped_by = signals.requested or "SIGTERM"
        break
  seconds["solve"] += rewards.seconds["solve"]
  seconds.update(judges=rewards.seconds["judges"], uco=rewards.seconds["uco"],
                 total=time.perf_counter() - start)
  if main_process:
    summary = summarize(done, dict(seconds), report)
    # Counted over every batch in the workdir, those of earlier invocations included.
    summary["reward_pipeline"] = dict(sorted(sum(
        (collections.Counter(r.get("pipeline", {})) for r in batch_rows),
        collections.Counter()).items()))
    with open(os.path.join(workdir, "summary.json"), "w") as f:
      json.dump(summary, f, indent=2)
    if stopped_by is None:
      for k, v in summary.items():
        print(f"{k}={json.dumps(v) if isinstance(v, dict) else v}")
  exit_on_signal(stopped_by, f"{len({d.problem_id for d in done})} of {len(rows)} problems "
                 "(written)")


if __name__ == "__main__":
  app.run(main)
