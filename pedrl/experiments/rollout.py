r"""Runs tutor–student rollouts on a problem split and writes them with a summary.

  python -m pedrl.experiments.rollout --config=experiments/rollout.py:tiny --workdir=/tmp/rollout

Per batch of problems: dialogues (pedrl.env.rollout), the student's
pre-dialogue solve attempts, the rewards (pedrl.rewards.pipeline: judges,
post-dialogue attempts, UCO turns, weighted components), then the batch is
appended to WORKDIR/dialogues.jsonl. A rerun with the same workdir
skips problems already written. WORKDIR/metrics.jsonl has each batch's reward
components (mean, std); WORKDIR/summary.json and the last lines of the log hold
the summary (key=value).
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

from pedrl import distributed, sharding
from pedrl.env import dialogue, problems as problems_lib, rollout, solving
from pedrl.experiments.common import (build_rewards, dialogue_settings, load_party,
                                      load_problems, solver_party)

config_flags.DEFINE_config_file("config", None, "Config file, e.g. experiments/rollout.py:tiny.")
flags.DEFINE_string("workdir", None, "Output directory.", required=True)
flags.DEFINE_enum("multihost", "auto", distributed.MODES,
                  "jax.distributed.initialize(): auto = when the environment shows several "
                  "processes (TPU pod, SLURM, Open MPI, JAX_COORDINATOR_ADDRESS).")
FLAGS = flags.FLAGS


def resume(path: str, group_size: int) -> list:
  """The dialogues of problems already complete in `path` (a rerun skips them).

  A line cut by a crash is removed, and problems with fewer than group_size
  dialogues written are dropped from the file, to be run again whole.
  """
  if not os.path.exists(path):
    return []
  cut = dialogue.repair_jsonl(path)
  if cut:
    logging.warning("%s: removed a partly written last line (%d bytes)", path, cut)
  done = dialogue.load_jsonl(path)
  count = collections.Counter(d.problem_id for d in done)
  whole = [d for d in done if count[d.problem_id] >= group_size]
  if len(whole) < len(done):
    logging.warning("%s: dropping %d dialogues of part-written problems; they run again",
                    path, len(done) - len(whole))
    dialogue.save_jsonl(whole, path, mode="w")
  return whole


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


def main(argv):
  del argv
  distributed.initialize(FLAGS.multihost)  # Before anything touches the devices.
  main_process = distributed.is_main_process()  # The one that writes; all compute.
  c = FLAGS.config
  os.makedirs(FLAGS.workdir, exist_ok=True)
  out_path = os.path.join(FLAGS.workdir, "dialogues.jsonl")
  mesh = sharding.make_mesh(**c.mesh.to_dict())
  settings, solve = dialogue_settings(c)
  try:
    rows, report = load_problems(c)
  except problems_lib.DataError as e:  # A bad row under on_error=fatal, before any work.
    sys.exit(f"error: {e}")
  done = resume(out_path, c.group_size) if main_process else []
  # Every process must run the same batches, whatever its view of the workdir.
  finished = set(distributed.broadcast_json(sorted({d.problem_id for d in done})))
  todo = [(i, p) for i, p in enumerate(rows) if p.id not in finished]
  if done:
    logging.info("resuming: %d dialogues already in %s; %d of %d problems left",
                 len(done), out_path, len(todo), len(rows))

  start = time.perf_counter()
  tutor = load_party(c.tutor, mesh, c.scan_layers, {"enable_thinking": settings.thinking})
  student = load_party(c.student, mesh, c.scan_layers)
  solver = solver_party(student, c)
  rewards = build_rewards(c, student, solver, solve, mesh)
  seconds = collections.Counter(load=time.perf_counter() - start)

  b = c.batch_problems
  with tqdm(total=len(todo), unit="problem", desc="rollouts", disable=not main_process) as bar:
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
      if main_process:
        with open(os.path.join(FLAGS.workdir, "metrics.jsonl"), "a") as f:
          f.write(json.dumps({"batch_problem_uids": list(uids), **{
              k: {"mean": m, "std": sd} for k, (m, sd) in batch_stats.items()}}) + "\n")
        dialogue.save_jsonl(dialogues, out_path)
      done += dialogues
      bar.update(len(batch))
      bar.set_postfix(turns=f"{np.mean([d.turns for d in dialogues]):.1f}",
                      reward=f"{batch_stats['total'][0]:.2f}")
  seconds["solve"] += rewards.seconds["solve"]
  seconds.update(judges=rewards.seconds["judges"], uco=rewards.seconds["uco"],
                 total=time.perf_counter() - start)
  if not main_process:
    return
  summary = summarize(done, dict(seconds), report)
  summary["reward_pipeline"] = dict(sorted(rewards.stats.items()))
  with open(os.path.join(FLAGS.workdir, "summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
  for k, v in summary.items():
    print(f"{k}={json.dumps(v) if isinstance(v, dict) else v}")


if __name__ == "__main__":
  app.run(main)
