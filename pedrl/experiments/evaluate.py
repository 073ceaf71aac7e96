r"""Evaluates a tutor: Δ solve rate, leak and helpful rates, Ped-RM micro/macro (papers 003, 001).

  python -m pedrl.experiments.evaluate --config=experiments/evaluate.py:tiny --workdir=/tmp/eval
  python -m pedrl.tools.report /tmp/eval

Per batch of problems: the student alone (K attempts, pre-dialogue solve
rate), samples_per_problem dialogues with the tutor under test, K attempts
after each (post), the evaluation judges (every sample kept, unparsed ones as
None) and Ped-RM on every tutor turn; then the batch's EvalRecords are
appended to this shard's file (pedrl.eval.shards). A rerun resumes after the
last whole batch. When every shard of the workdir has finished, the one that
finishes last merges them into WORKDIR/eval_dialogues.jsonl and
WORKDIR/metrics.json and prints the metrics (key=value); `pedrl.tools.report`
merges and tabulates any time.
"""
import collections
import dataclasses
import json
import os
import sys
import time

import numpy as np
from absl import app, flags, logging
from tqdm import tqdm

from pedrl import distributed, stopping
from pedrl.env import rollout, solving
from pedrl.eval import judges as eval_judges, pedrm as pedrm_lib, records as records_lib
from pedrl.eval import shards
from pedrl.experiments import workdir as workdir_lib
from pedrl.experiments.common import (api_backends, check_paths, define_flags, endpoint_party,
                                      exit_on_signal, exits_cleanly, judge_panel, load_party,
                                      load_problems, read_settings, solver_party)
from pedrl.rewards import asking
from pedrl.rl import checkpoint

define_flags("experiments/evaluate.py:tiny", "Evaluation directory (shards, records, metrics).")
FLAGS = flags.FLAGS


def protocol(s, config: str) -> dict:
  """Everything that decides the numbers: shards of one evaluation must agree on it."""
  asdict = lambda x: json.loads(json.dumps(dataclasses.asdict(x)))  # As read back: lists.
  e = asdict(s.evaluation)
  del e["shard"]
  judge_model = (s.openai.get("model"), s.openai.get("base_url")) if (
      s.judging.judge_backend == "openai") else s.local_judge.path if (
      s.judging.judge_backend == "local") else "rules"
  return {
      "config": config, "seed": s.job.seed, "batch_problems": s.job.batch_problems,
      "num_shards": s.evaluation.num_shards, "eval": e,
      "tutor": {**asdict(s.tutor), **asdict(s.tutor_run), **_endpoint(s.tutor_endpoint),
                **workdir_lib.identity(s, "evaluate")["tutor"]},
      "student": {**asdict(s.student), **_endpoint(s.student_endpoint),
                  **workdir_lib.identity(s, "evaluate")["student"]},
      "problems": asdict(s.problems), "rollout": asdict(s.rollout),
      "solve": {k: v for k, v in asdict(s.solve).items() if k != "prompts_per_call"},
      "judges": {"panel": s.judging.judges, "backend": s.judging.judge_backend,
                 "model": judge_model, "samples": s.judging.judge_samples,
                 "rounds": s.judging.judge_rounds},
      "pedrm": asdict(s.pedrm),
  }


def _endpoint(e) -> dict:
  return {"endpoint": [e.model, e.base_url]} if e.model else {}


def resolve_tutor_run(s):
  """With tutor.workdir: the tutor's path becomes the run's base checkpoint (its
  tokenizer and architecture) and tutor.step a saved step (the latest if not given),
  fixed before any work so that a resumed evaluation reads the same weights."""
  run = s.tutor_run
  if not run.workdir:
    if run.step is not None:
      raise app.UsageError("--config.tutor.step needs --config.tutor.workdir (a training run)")
    return s
  base, _, steps = checkpoint.training_run(run.workdir)
  step = steps[-1] if run.step is None and steps else run.step
  if step not in steps:
    raise checkpoint.CheckpointError(f"{run.workdir}: no checkpoint at step {step}; saved "
                                     f"steps: {steps}")
  if s.tutor.path and os.path.abspath(s.tutor.path) != os.path.abspath(base):
    logging.info("tutor.workdir given: the tutor is %s step %d on %s (not tutor.path=%s)",
                 run.workdir, step, base, s.tutor.path)
  return dataclasses.replace(s, tutor=dataclasses.replace(s.tutor, path=base),
                             tutor_run=dataclasses.replace(run, step=step))


def evaluate_batch(batch, uids, j: int, parties, s, specs, backend, rm, counts) -> list:
  """The EvalRecords of one batch of problems (see the module docstring)."""
  tutor, student, solver = parties
  clock = time.perf_counter()
  apis = {"judge_backend": backend, "tutor_endpoint": getattr(tutor, "client", None),
          "student_endpoint": getattr(student, "client", None),
          "solve_endpoint": getattr(solver, "client", None)}
  before = {name: dict(getattr(x, "stats", None) or {}) for name, x in apis.items()}
  try:
    return _evaluate(batch, uids, j, parties, s, specs, backend, rm, counts, clock)
  finally:  # API calls, tokens and retries of this batch, also when it failed.
    for name, x in apis.items():
      counts.update({f"{name}/{k}": v - before[name].get(k, 0)
                     for k, v in (getattr(x, "stats", None) or {}).items()})


def _evaluate(batch, uids, j: int, parties, s, specs, backend, rm, counts, clock) -> list:
  tutor, student, solver = parties
  pre = solving.pre_dialogue(batch, solver, s.solve)
  clock = _tick(counts, "seconds/pre_solve", clock)
  dialogues = rollout.run(batch, s.evaluation.samples_per_problem, tutor, student, s.rollout,
                          problem_uids=uids)
  clock = _tick(counts, "seconds/dialogues", clock)
  solving.post_dialogue(dialogues, solver, s.solve)  # Every dialogue: Δ is never penalised.
  clock = _tick(counts, "seconds/post_solve", clock)
  stats = asking.AskStats()
  try:
    answers = eval_judges.judge(dialogues, specs, backend, s.judging.judge_rounds,
                                s.judging.max_failed_share, stats)
  finally:
    counts.update({f"judge/{k}": v for k, v in stats.items()})
  clock = _tick(counts, "seconds/judges", clock)
  scores = rm.score_dialogues(dialogues) if rm else [[] for _ in dialogues]
  _tick(counts, "seconds/pedrm", clock)
  return [records_lib.EvalRecord(
      problem_id=d.problem_id, sample=d.rollout, batch=j,
      pre_solve_rate=pre[d.problem_id].rate, post_solve_rate=d.r_sol,
      leak_decisions=a.get("leakage", []), helpful_decisions=a.get("helpfulness", []),
      thinking_scores=a.get("thinking", []), pedrm_turn_scores=t, dialogue=d)
      for d, a, t in zip(dialogues, answers, scores)]


def _tick(counts, key: str, since: float) -> float:
  now = time.perf_counter()
  counts[key] += round(now - since, 3)
  return now


@exits_cleanly
def main(argv):
  del argv
  distributed.initialize(FLAGS.multihost)
  main_process = distributed.is_main_process()
  workdir = FLAGS.workdir
  s = resolve_tutor_run(read_settings(FLAGS.config, evaluation=True))
  e = s.evaluation
  check_paths(s)
  if s.pedrm.path:
    if not os.path.isfile(os.path.join(s.pedrm.path, "config.json")):
      raise app.UsageError(f"--config.eval.pedrm.path={s.pedrm.path!r} is not a checkpoint "
                           "directory (no config.json)")
    pedrm_lib.check(s.pedrm)
  apis = api_backends(s)  # Endpoints and keys checked before models load or files are written.
  tutor = student = solver = None
  if s.tutor_endpoint.model:
    tutor = endpoint_party(s.tutor, s.tutor_endpoint, "tutor")
  if s.student_endpoint.model:
    student = endpoint_party(s.student, s.student_endpoint, "student")
    solver = endpoint_party(s.student, s.student_endpoint, "student", s.solve.temperature,
                            s.solve.max_new_tokens)
  rows, _ = load_problems(s)
  plan = shards.batches(len(rows), s.job.batch_problems, e.shard, e.num_shards)
  if not plan:
    raise app.UsageError(f"shard {e.shard} of {e.num_shards} has no problems: {len(rows)} "
                         f"problems make {-(-len(rows) // s.job.batch_problems)} batches of "
                         f"{s.job.batch_problems}")
  proto = protocol(s, workdir_lib.config_name(sys.argv))
  shards.check_protocol(workdir, proto, e.shard, e.num_shards)
  status_path = shards.status_path(workdir, e.shard, e.num_shards)
  out_path = shards.records_path(workdir, e.shard, e.num_shards)
  per_batch = {j: len(idx) * e.samples_per_problem for j, idx in plan}
  done = shards.completed(workdir, e.shard, e.num_shards, per_batch) if main_process else []
  finished = set(distributed.broadcast_json(sorted({r.batch for r in done})))
  todo = [(j, idx) for j, idx in plan if j not in finished]
  counts = collections.Counter()
  if os.path.exists(status_path):
    counts.update(shards.read_json(status_path).get("counts", {}))
  status = lambda finished_: {"protocol": proto, "shard": e.shard,
                              "batches": [j for j, _ in plan], "finished": finished_,
                              "counts": dict(counts)}
  if main_process:
    shards.write_json(status_path, status(not todo))
  if done:
    logging.info("resuming shard %d of %d: %d of %d batches already in %s", e.shard,
                 e.num_shards, len(finished), len(plan), out_path)

  mesh = s.mesh.make()
  clock = time.perf_counter()
  if tutor is None:
    params = None
    if s.tutor_run.workdir:
      _, _, params, _ = checkpoint.trained_tutor(s.tutor_run.workdir, s.tutor_run.step,
                                                 s.job.scan_layers, mesh)
    tutor = load_party(s.tutor, mesh, s.job.scan_layers,
                       {"enable_thinking": s.rollout.thinking}, params=params)
  if student is None:
    student = load_party(s.student, mesh, s.job.scan_layers)
    solver = solver_party(student, s.solve)
  parties = (tutor, student, solver)
  specs, backend = judge_panel(s, mesh, apis)
  rm = pedrm_lib.PedRM(s.pedrm) if s.pedrm.path else None
  if rm is None:
    logging.warning("no eval.pedrm.path: Ped-RM micro/macro will be NaN")
  _tick(counts, "seconds/load", clock)

  stopped_by = None
  total = sum(len(idx) for _, idx in todo)
  with (tqdm(total=total, unit="problem", desc=f"evaluating shard {e.shard}/{e.num_shards}",
             disable=not main_process, smoothing=0.1) as bar,
        stopping.StopRequest("the current batch") as signals):
    for j, idx in todo:
      batch = [rows[i] for i in idx]
      records = evaluate_batch(batch, list(idx), j, parties, s, specs, backend, rm, counts)
      counts["dialogues"] += len(records)
      if main_process:
        records_lib.save(records, out_path)
        shards.write_json(status_path, status(False))
      bar.update(len(batch))
      rate = counts["dialogues"] / max(bar.format_dict["elapsed"], 1e-9)
      bar.set_postfix(dialogues_per_s=f"{rate:.2f}",
                      post=f"{np.mean([r.post_solve_rate for r in records]):.2f}")
      if distributed.any_process(signals.requested is not None):
        stopped_by = signals.requested or "SIGTERM"
        break
  if stopped_by is None and main_process:
    shards.write_json(status_path, status(True))
    try:
      metrics = shards.write_merged(workdir)
    except shards.ShardError as err:  # Other shards still running: they merge, or report does.
      logging.info("shard %d of %d finished; not merged yet: %s", e.shard, e.num_shards, err)
    else:
      for k in summary_keys(metrics):
        print(f"{k}={metrics[k]}")
  exit_on_signal(stopped_by, f"shard {e.shard}, batch {j} (earlier batches written)")


def summary_keys(metrics: dict) -> list[str]:
  """The metrics printed at the end of a run, in the papers' table order."""
  names = ("n_problems", "n_dialogues", "pre_solve_rate", "post_solve_rate", "delta_solve_rate",
           "leak_rate", "leak_any_rate", "helpful_rate", "thinking_score", "pedrm_micro",
           "pedrm_macro")
  return [k for n in names for k in (n, f"{n}_ci") if k in metrics]


if __name__ == "__main__":
  app.run(main)
