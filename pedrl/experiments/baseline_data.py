r"""The offline baselines' data (paper 003 A.3): the untrained tutor's scored dialogues on a
seeded fraction of the training split, as preference pairs (MDPO) and accepted dialogues (SFT).

  python -m pedrl.experiments.baseline_data --config=experiments/baselines.py:tiny --workdir=/tmp/baselines

`baselines.fraction` of the configured split (paper: 30% of the training
problems), chosen by the seed (pedrl.streams.subset); per batch of problems,
group_size dialogues each (the rollout job's, pedrl.env.rollout) scored with the
configured training rewards (pedrl.rewards.pipeline: judges, post-dialogue solve
attempts, weights). Batches are shared out to shards as the evaluation jobs'
(--config.baselines.shard=I --config.baselines.num_shards=N; pedrl.eval.shards):
each shard appends its scored dialogues to WORKDIR/shards/records-I-of-N.jsonl
batch by batch, and a rerun skips the batches written. The shard that finishes
the workdir's last writes

  WORKDIR/dialogues.jsonl   every scored dialogue (token ids, mask, rewards, verdicts)
  WORKDIR/pairs.jsonl       preference pairs (pedrl.rl.offline_data.PreferencePair)
  WORKDIR/accepted.jsonl    accepted dialogues, deduplicated (AcceptedDialogue)
  WORKDIR/summary.json      the counts, also printed (key=value)
  WORKDIR/train_problems.json  the subset's problem ids, which SFT and MDPO runs inherit
                            (pedrl.jobs.trained_on)

with pedrl.rl.offline_data's rules: pairs within a group, a judge-accepted dialogue
against a judge-rejected one rewarded less (baselines.pairs=accepted_rejected), or any
two whose rewards differ (reward_order), the count printed as pairs=N; accepted = every judge accepted, one per problem and tutor text (of every
dialogue, or with baselines.sft_source=pairs of those in pairs).
"""
import sys

from pedrl import cli

if __name__ == "__main__":  # First, before the imports below load JAX (pedrl.cli.check_job).
  cli.check_job(__spec__.name, sys.argv[1:])

import dataclasses
import json
import os
import time

import jax
import ml_collections
import numpy as np
from absl import app

from pedrl import distributed, fields, files, streams
from pedrl.env import dialogue as dialogue_lib, rollout
from pedrl.eval import shards
from pedrl.eval.protocol import EvalProtocol, jsonable
from pedrl.jobs import settings as settings_lib, sharded, trained_on
from pedrl.jobs import workdir as workdir_lib
from pedrl.jobs.checks import check_history_thinking, check_paths, read_settings
from pedrl.jobs.exits import define_flags, job_main
from pedrl.jobs.loading import load_party, load_problems, solver_party
from pedrl.jobs.reward_factory import (api_backends, build_rewards, judges_protocol,
                                      rollout_protocol, solve_protocol)
from pedrl.rl import offline_data

define_flags("experiments/baselines.py:tiny", "Output directory (shards, dialogues, pairs).")


def read(config: ml_collections.ConfigDict
         ) -> tuple[settings_lib.DialogueSettings, settings_lib.BaselineDataSettings]:
  """(DialogueSettings, BaselineDataSettings) of the config; one `error: …` line for a bad
  value."""
  tree = config.to_dict()
  baselines = tree.pop("baselines")
  s = read_settings(ml_collections.ConfigDict(tree))
  try:
    b = settings_lib.BaselineDataSettings(**baselines)
  except (TypeError, ValueError) as e:
    raise app.UsageError(f"--config.baselines: {e}") from None
  if not s.rewards.needs_judges:
    raise app.UsageError(f"rewards.components={s.rewards.components!r} use no judges, so no "
                         "dialogue is accepted: the SFT set needs the pedagogical judges "
                         "(paper 003: pedagogy)")
  if s.job.group_size < 2:
    raise app.UsageError(f"group_size={s.job.group_size}: pairs need at least 2 dialogues "
                         "per problem")
  return s, b


def protocol(s: settings_lib.DialogueSettings,
             b: settings_lib.BaselineDataSettings) -> EvalProtocol:
  """Everything that decides the data: shards of one workdir must agree on it."""
  models = workdir_lib.identity(s, "baseline_data")
  return EvalProtocol(kind="baselines", seed=s.job.seed, num_shards=b.num_shards, sections={
      "baselines": {k: v for k, v in jsonable(b).items() if k != "shard"},
      "batch_problems": s.job.batch_problems, "group_size": s.job.group_size,
      "tutor": {**jsonable(s.tutor), **models["tutor"]},
      "student": {**jsonable(s.student), **models["student"]},
      "problems": jsonable(s.problems), "rollout": rollout_protocol(s.rollout, s.job.seed),
      "solve": solve_protocol(s.solve, s.job.seed),
      "rewards": rewards_protocol(s.rewards),
      "judges": judges_protocol(s)})  # `read` made sure the rewards use them.


def rewards_protocol(rewards: settings_lib.RewardSettings) -> dict:
  """The reward settings as the protocol records them: a setting added since protocols
  first recorded them (`pedrl.fields.ADDED`) only when it differs from the behaviour an
  earlier run had, so that a workdir of an earlier pedrl compares equal and resumes."""
  added = {k.removeprefix("rewards."): v for k, v in fields.ADDED.items()
           if k.startswith("rewards.")}
  return {k: v for k, v in jsonable(rewards).items() if k not in added or v != added[k]}


class ScoredRollouts:
  """The task of pedrl.jobs.sharded: G scored dialogues per problem of the subset."""
  unit = "problem"

  def __init__(self, s, b: settings_lib.BaselineDataSettings, apis):
    self.s, self.b, self.apis = s, b, apis
    rows, _ = load_problems(s.problems, s.job.seed)
    self.split_size = len(rows)
    self.items = [rows[i] for i in streams.subset(s.job.seed, len(rows), b.fraction)]
    self.sizes = len(self.items)
    self.batch_size, self.per_item = s.job.batch_problems, s.job.group_size

  def load(self, mesh: jax.sharding.Mesh) -> None:
    s = self.s
    self.tutor = load_party(s.tutor, mesh, s.job.scan_layers,
                            {"enable_thinking": s.rollout.thinking})
    self.student = load_party(s.student, mesh, s.job.scan_layers)
    self.rewards = build_rewards(s, self.student, solver_party(self.student, s.solve), mesh,
                                 self.apis)

  def run(self, j: int, idx: range,
          counts: sharded.Counts) -> list[offline_data.ScoredDialogue]:
    clock = time.perf_counter()
    # uid = item · G + rollout: a dialogue's draws do not depend on the shard running it.
    dialogues = rollout.run([self.items[i] for i in idx], self.per_item, self.tutor,
                            self.student, self.s.rollout, seed=self.s.job.seed,
                            problem_uids=list(idx))
    clock = counts.tick("dialogues", clock)
    scored = self.rewards(dialogues)
    counts.tick("rewards", clock)
    counts.pipeline.update(scored.counts)
    return [offline_data.ScoredDialogue(j, d) for d in dialogues]

  @staticmethod
  def postfix(records: list[offline_data.ScoredDialogue]) -> dict[str, str]:
    totals = [r.dialogue.rewards.total for r in records if r.dialogue.rewards is not None]
    return {"reward": f"{np.mean(totals):.2f}" if totals else "none"}

  def merge(self, workdir: str) -> dict:
    """Writes the dialogues, pairs, accepted dialogues and summary of every shard."""
    records, _, counts = shards.gather(workdir, offline_data.ScoredDialogue)
    dialogues = [r.dialogue for r in records]
    pairs, accepted, numbers = offline_data.build(dialogues, self.per_item, self.b.min_margin,
                                                  self.b.sft_source, self.b.pairs)
    dialogue_lib.save_jsonl(dialogues, os.path.join(workdir, offline_data.DIALOGUES), mode="w")
    offline_data.save(pairs, os.path.join(workdir, offline_data.PAIRS))
    offline_data.save(accepted, os.path.join(workdir, offline_data.ACCEPTED))
    summary = {"split_problems": self.split_size, "pair_rule": self.b.pairs,
               **dataclasses.asdict(numbers),
               "counts": counts.to_json()}
    files.write_json(os.path.join(workdir, "summary.json"), summary)
    trained_on.record(workdir, self.items, self.s.problems.path)
    return summary


@job_main
def main(config: ml_collections.ConfigDict, workdir: str) -> None:
  s, b = read(config)
  check_paths(s)
  check_history_thinking(s, "the SFT and MDPO baselines train on")
  name = workdir_lib.config_name(sys.argv)
  changed = workdir_lib.guard(workdir, "baseline_data", config, name)
  task = ScoredRollouts(s, b, api_backends(s))  # Keys and endpoints before the models load.
  workdir_lib.record_start(workdir, "baseline_data", config, name, changed)
  summary = sharded.run(task, protocol(s, b), workdir, b, s.mesh, config,
                        record_type=offline_data.ScoredDialogue, merge=task.merge)
  if summary is not None:
    for k, v in summary.items():
      print(f"{k}={json.dumps(v) if isinstance(v, dict) else v}")
    workdir_lib.print_results(workdir, "summary.json", offline_data.ACCEPTED,
                              offline_data.PAIRS, offline_data.DIALOGUES)
  elif distributed.is_main_process():
    workdir_lib.print_results(workdir, "shards")


if __name__ == "__main__":
  cli.run(main)
