r"""Evaluates a tutor: Δ solve rate, leak and helpful rates, Ped-RM micro/macro (papers 003, 001).

  python -m pedrl.experiments.evaluate --config=experiments/evaluate.py:tiny --workdir=/tmp/eval
  python -m pedrl.tools.report /tmp/eval

Per batch of problems: the student alone (K attempts, pre-dialogue solve
rate), samples_per_problem dialogues with the tutor under test, K attempts
after each (post), the evaluation judges (every sample kept, unparsed ones as
None) and Ped-RM on every tutor turn (pedrl.eval.tasks computes a batch; the job
reads the settings, loads the parties and writes); then the batch's EvalRecords are
appended to this shard's file (pedrl.eval.shards; the loop is
pedrl.jobs.sharded, shared with the MathTutorBench job). A rerun
resumes after the last whole batch. When every shard of the workdir has finished, the one that
finishes last merges them into WORKDIR/eval_dialogues.jsonl and
WORKDIR/metrics.json and prints the metrics (key=value); `pedrl.tools.report`
merges and tabulates any time.
"""
import sys

from pedrl import cli
from pedrl.jobs import settings

if __name__ == "__main__":  # First, before the imports below load JAX (pedrl.cli.check_job).
  cli.check_job(__spec__.name, sys.argv[1:],
                lambda c: settings.read_settings(c, settings.EvaluationSettings))

import dataclasses
import json
import os

import jax
import ml_collections
import numpy as np
from absl import app, logging

from pedrl import distributed
from pedrl.agents import backbone as backbone_lib, bench as agent_bench, tutor as agent_tutor
from pedrl.env import party as party_lib
from pedrl.env.dialogue import GUIDED
from pedrl.eval import pedrm as pedrm_lib, reasoning, tasks
from pedrl.eval.records import EvalRecord, ReasoningRecord
from pedrl.eval.protocol import EvalProtocol, jsonable
from pedrl.jobs import conditions, settings as settings_lib, sharded, trained_on
from pedrl.jobs import workdir as workdir_lib
from pedrl.jobs.checks import check_paths, read_settings
from pedrl.jobs.exits import define_flags, job_main
from pedrl.jobs.loading import (endpoint_party, load_party, load_problems, solver_party,
                                tutor_checkpoint, tutor_party)
from pedrl.jobs.reward_factory import (api_backends, judge_panel, judges_protocol,
                                      rollout_protocol, solve_protocol)

define_flags("experiments/evaluate.py:tiny", "Evaluation directory (shards, records, metrics).")


def protocol(s: settings_lib.EvaluationSettings) -> EvalProtocol:
  """Everything that decides the numbers: shards of one evaluation must agree on it."""
  e = jsonable(s.evaluation)
  del e["shard"]
  # The config's name is in the status, not here: a path spelt otherwise is the same run.
  models = workdir_lib.identity(s, "evaluate")
  tutor = {**jsonable(s.tutor), **jsonable(s.tutor_run), **_endpoint(s.tutor_endpoint),
           **models["tutor"]}
  if s.tutor_agent.agent:  # Only when set: earlier runs' protocols stay the same.
    tutor["agent"] = {**jsonable(s.tutor_agent), "cpa": jsonable(s.tutor_cpa)}
  common = dict(seed=s.job.seed, num_shards=s.evaluation.num_shards)
  if s.reasoning.names:
    return EvalProtocol(kind="reasoning", **common, sections={
        "eval": e, "tutor": tutor, "reasoning": jsonable(s.reasoning),
        "thinking": s.rollout.thinking})
  return EvalProtocol(kind="tutoring", **common, sections={
      "eval": e, "tutor": tutor, "batch_problems": s.job.batch_problems,
      "student": {**jsonable(s.student), **_endpoint(s.student_endpoint), **models["student"]},
      "problems": jsonable(s.problems), "rollout": rollout_protocol(s.rollout, s.job.seed),
      "solve": solve_protocol(s.solve, s.job.seed), "judges": judges_protocol(s),
      "pedrm": jsonable(s.pedrm),
  })


def _endpoint(e) -> dict:
  return {"endpoint": [e.model, e.base_url]} if e.model else {}


def resolve_tutor_run(s: settings_lib.EvaluationSettings,
                      workdir: str) -> settings_lib.EvaluationSettings:
  """With tutor.workdir: the tutor's path becomes the run's base checkpoint (its
  tokenizer and architecture) and tutor.step a saved step: the one given, else the
  one this evaluation's workdir recorded (a resumed or later shard reads the weights
  the first one read, even if training saved newer steps since), else the latest."""
  run = s.tutor_run
  if not run.workdir:
    if run.step is not None:
      raise app.UsageError("--config.tutor.step needs --config.tutor.workdir (a training run)")
    return s
  base, step = tutor_checkpoint(run, workdir, ("tutor", "step"))
  warn_other_dialogues(s, run.workdir)
  if s.tutor.path and os.path.abspath(s.tutor.path) != os.path.abspath(base):
    logging.info("tutor.workdir given: the tutor is %s step %d on %s (not tutor.path=%s)",
                 run.workdir, step, base, s.tutor.path)
  return dataclasses.replace(s, tutor=dataclasses.replace(s.tutor, path=base),
                             tutor_run=dataclasses.replace(run, step=step))


def warn_other_dialogues(s: settings_lib.EvaluationSettings, run_workdir: str) -> None:
  """Logs the dialogue settings in which the training run under test differs from this
  evaluation (a tutor evaluated in dialogues other than its training's; intended for
  `uco_003`, a mistake otherwise: each training config names its evaluation variant)."""
  path = os.path.join(run_workdir, "config.json")
  if not os.path.isfile(path):
    return
  with open(path) as f:
    diffs = conditions.differences(json.load(f), s)
  if diffs:
    logging.warning("%s was trained in other dialogues than this evaluation's: %s",
                    run_workdir, "; ".join(diffs))


class Tutoring:
  """Papers 003/001/000's protocol: dialogues, solve attempts, judges and Ped-RM per problem."""
  unit = "problem"

  def __init__(self, s, apis):
    self.s, self.apis = s, apis
    self.items, _ = load_problems(s.problems, s.job.seed)
    if s.tutor_run.workdir:  # A training run is never evaluated on its training problems.
      trained_on.check_disjoint(s.tutor_run.workdir, self.items,
                                f"--config.problems.path={s.problems.path}")
    self.sizes = len(self.items)
    self.batch_size, self.per_item = s.job.batch_problems, s.evaluation.samples_per_problem
    self.tutor = self.student = self.solver = None  # Endpoints: checked now, before loading.
    if s.tutor_endpoint.model:
      self.tutor = endpoint_party(s.tutor, s.tutor_endpoint, "tutor")
    if s.student_endpoint.model:
      self.student = endpoint_party(s.student, s.student_endpoint, "student")
      self.solver = endpoint_party(s.student, s.student_endpoint, "student",
                                   s.solve.temperature, s.solve.max_new_tokens)

  def load(self, mesh: jax.sharding.Mesh) -> None:
    s = self.s
    self.tutor = self.tutor or load_tutor(s, mesh)
    if s.tutor_agent.agent:  # The model (or endpoint) becomes the agent's backbone.
      backbone = (backbone_lib.EndpointBackbone(self.tutor.client, s.job.seed)
                  if isinstance(self.tutor, party_lib.EndpointParty) else
                  backbone_lib.LocalBackbone(self.tutor, settings_lib.sampling(s.tutor),
                                             s.job.seed,
                                             truncate_prompts=s.tutor_agent.truncate_prompts))
      self.tutor = agent_tutor.AgentTutor(
          agent_bench.build(s.tutor_agent.agent, backbone, s.tutor_cpa),
          max_new_tokens=s.tutor.max_new_tokens)
    if self.student is None:
      self.student = load_party(s.student, mesh, s.job.scan_layers)
      self.solver = solver_party(self.student, s.solve)
    self.specs, self.backend = judge_panel(s, mesh, self.apis)
    self.rm = pedrm_lib.PedRM(s.pedrm, s.rollout.attempt_prefix) if s.pedrm.path else None
    if self.rm is None:
      logging.warning("no eval.pedrm.path: Ped-RM micro/macro will be NaN")

  def run(self, j: int, idx: range, counts: sharded.Counts) -> list[EvalRecord]:
    return tasks.tutoring_batch([self.items[i] for i in idx], list(idx), j,
                                (self.tutor, self.student, self.solver), self.s, self.specs,
                                self.backend, self.rm, counts)

  @staticmethod
  def postfix(records: list[EvalRecord]) -> dict[str, str]:
    return {"post": f"{np.mean([r.post_solve_rate for r in records]):.2f}"}


class Reasoning:
  """Reasoning preservation (pedrl.eval.reasoning): the tutor alone on benchmark questions."""
  unit = "question"

  def __init__(self, s, apis):
    del apis
    self.s, r = s, s.reasoning
    self.items = reasoning.examples(r)
    self.sizes = len(self.items)
    self.batch_size, self.per_item = r.batch_examples, 1
    side = dataclasses.replace(s.tutor, temperature=r.temperature, top_p=r.top_p, top_k=0,
                               max_new_tokens=r.max_new_tokens)
    self.tutor = (endpoint_party(side, s.tutor_endpoint, "tutor")
                  if s.tutor_endpoint.model else None)
    self.side = side

  def load(self, mesh: jax.sharding.Mesh) -> None:
    if self.tutor is None:
      tutor = load_tutor(self.s, mesh)
      self.tutor = dataclasses.replace(tutor, sampling=settings_lib.sampling(self.side))
      context = tutor.sampler.cfg.max_position_embeddings
      need = [(len(tutor.chat.prompt_ids(list(x.chat))) + self.side.max_new_tokens, x.id)
              for x in self.items]
      over = [n for n in need if n[0] > context]
      if over:
        raise app.UsageError(
            f"{len(over)} benchmark prompts with max_new_tokens={self.side.max_new_tokens} "
            f"exceed the tutor's context of {context} tokens (the longest, {max(over)[1]}, needs "
            f"{max(over)[0]}); use fewer shots or a smaller eval.reasoning.max_new_tokens")

  def run(self, j: int, idx: range, counts: sharded.Counts) -> list[ReasoningRecord]:
    return tasks.reasoning_batch([self.items[i] for i in idx], list(idx), j, self.tutor,
                                 self.s.job.seed, counts)

  @staticmethod
  def postfix(records: list[ReasoningRecord]) -> dict[str, str]:
    return {"accuracy": f"{np.mean([r.correct for r in records]):.2f}"}


def load_tutor(s: settings_lib.EvaluationSettings,
               mesh: jax.sharding.Mesh | None) -> party_lib.Party:
  """The local tutor under test: a Hugging Face directory, or a training run's step."""
  return tutor_party(s.tutor, s.tutor_run, mesh, s.job.scan_layers,
                     {"enable_thinking": s.rollout.thinking})


@job_main
def main(config: ml_collections.ConfigDict, workdir: str) -> None:
  s = resolve_tutor_run(read_settings(config, settings_lib.EvaluationSettings), workdir)
  name = workdir_lib.config_name(sys.argv)
  changed = workdir_lib.guard(workdir, "evaluate", config, name)
  e = s.evaluation
  task_type = Reasoning if s.reasoning.names else Tutoring
  if s.tutor_agent.agent and task_type is Reasoning:
    raise app.UsageError("tutor.agent plays the tutor in dialogues; the reasoning benchmarks "
                         "ask the model itself (leave tutor.agent empty)")
  check_paths(s, dialogues=task_type is Tutoring)
  if s.pedrm.path and task_type is Tutoring:
    pedrm_lib.check(s.pedrm)
  if task_type is Tutoring and (missing := unreferenced_prompts(s)):
    logging.warning("pedrl's own wording stands in for the reference code's prompt files "
                    "not given by path (%s; docs/reproduction.md): the numbers they decide need "
                    "not sit beside the papers'", ", ".join(f"--config.{k}" for k in missing))
  # Endpoints and keys are checked before models load or files are written.
  task = task_type(s, api_backends(s) if task_type is Tutoring else {})
  workdir_lib.record_start(workdir, "evaluate", config, name, changed)
  metrics = sharded.run(task, protocol(s), workdir, e, s.mesh, config)
  if metrics is not None:
    row = metrics.to_json()
    for k in summary_keys(row):
      print(f"{k}={row[k]}")
    workdir_lib.print_results(workdir, "metrics.json", "eval_dialogues.jsonl",
                              "eval_reasoning.jsonl", "run.json")
  elif distributed.is_main_process():  # Other shards still running: they, or report, merge.
    workdir_lib.print_results(workdir, "shards")


def unreferenced_prompts(s: settings_lib.EvaluationSettings) -> list[str]:
  """The settings of paper 003's reference prompt files (its code's, not printed in the
  paper) an evaluation leaves empty: the pre-dialogue attempt, the attempted scenario's
  first attempt where that scenario occurs, and, with paper 003's judges, their two."""
  keys = ["solve.pre_prompt_file"]
  if s.rollout.scenario != GUIDED:
    keys.append("rollout.attempt_prompt_file")
  if s.judging.judges == "pedagogical_rl" and s.judging.judge_backend != "rule":
    keys += ["rewards.leakage_prompt_file", "rewards.helpfulness_prompt_file"]
  values = {"solve": s.solve, "rollout": s.rollout, "rewards": s.judging}
  return [k for k in keys if not getattr(values[k.split(".")[0]], k.split(".")[1])]


def summary_keys(metrics: dict) -> list[str]:
  """The metrics printed at the end of a run, in the papers' table order."""
  names = ("n_problems", "n_dialogues", "pre_solve_rate", "post_solve_rate", "delta_solve_rate",
           "leak_rate", "leak_any_rate", "helpful_rate", "thinking_score", "pedrm_micro",
           "pedrm_macro", "n_examples") + tuple(f"{b}_accuracy" for b in reasoning.BENCHMARKS)
  names += tuple(sorted(k for k in metrics if k.startswith("wbeb/") and k.endswith("_accuracy")))
  return [k for n in names for k in (n, f"{n}_ci") if k in metrics]


if __name__ == "__main__":
  cli.run(main)
