r"""MathTutorBench's nine numbers for a tutor, on pedrl's engine (papers 003, 000, 002).

  python -m pedrl.experiments.mathtutorbench --config=experiments/mathtutorbench.py:tiny --workdir=/tmp/mtb

Per task: the harness's examples from local data, prompts rendered from the
benchmark's own task files, replies from the model under test (a local
checkpoint batched on the engine, a training run's step, or an
OpenAI-compatible endpoint; greedy, the task's stop strings), parsed as the
harness does; the pedagogical tasks' replies and human teacher turns are
scored by Ped-RM; every reply is also checked by paper 002's BVR rules
(pedrl.mathtutorbench_rules.constraints: bvr per task in results.json, BVR and
BVR† in the printed table). Examples run in batches sharded like the evaluation job's
(`--config.eval.shard=I --config.eval.num_shards=N`, pedrl.jobs.sharded):
each batch's records are written as it ends, a rerun resumes after the last
whole batch, and the shard that finishes last (or `python -m pedrl.tools.report
WORKDIR`) merges them into WORKDIR/responses-<task>.jsonl,
generations-<model>-<task>.json (the four pedagogical tasks, in the benchmark's
format), results.json, results.md and metrics.json.
"""
import sys

from pedrl import cli
from pedrl.jobs import bench_settings

if __name__ == "__main__":  # First, before the imports below load JAX (pedrl.cli.check_job).
  cli.check_job(__spec__.name, sys.argv[1:], bench_settings.read_mathtutorbench)

import dataclasses
import os
import time
from typing import Any

import jax
import ml_collections
from absl import app, logging

from pedrl import distributed
from pedrl.eval import pedrm as pedrm_lib
from pedrl.eval.mathtutorbench_harness import results as results_lib, runner, tasks
from pedrl.eval.protocol import EvalProtocol, jsonable
from pedrl.eval.records import BenchRecord
from pedrl.eval.settings import BenchSettings, PedRMSettings
from pedrl.jobs import sharded, workdir as workdir_lib
from pedrl.jobs.exits import define_flags, job_main
from pedrl.jobs.loading import endpoint_party, tutor_checkpoint, tutor_party

define_flags("experiments/mathtutorbench.py:tiny", "Output directory (shards, responses, results).")


Settings = bench_settings.MathTutorBenchSettings


def read(config: ml_collections.ConfigDict) -> Settings:
  """The config's settings (pedrl.jobs.bench_settings), checked."""
  try:
    out = bench_settings.read_mathtutorbench(config)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  if out.endpoint.model and out.run.workdir:
    raise app.UsageError("give the model under test once: --config.tutor.endpoint.model or "
                         "--config.tutor.workdir")
  if out.endpoint.model and out.tutor.path:
    logging.info("tutor.endpoint.model given: the model under test is the endpoint's %s "
                 "(not tutor.path=%s)", out.endpoint.model, out.tutor.path)
  return out


def load_tasks(bench: BenchSettings, rm_settings: PedRMSettings
               ) -> dict[str, tuple[tasks.TaskFile, list[dict]]]:
  """{task: (its task file, its examples)}, every file and row checked, and the reward
  model's config: all before any model loads."""
  wanted = {"benchmark_dir": tasks.BENCHMARK,
            "data_dir": f"a directory laid out as {tasks.data_dir_layout()}"}
  for name, what in wanted.items():
    if not getattr(bench, name) or not os.path.isdir(getattr(bench, name)):
      raise app.UsageError(f"--config.{name}={getattr(bench, name)!r} is not a directory: "
                           f"give {what}")
  out = {}
  for task in bench.names:
    examples = tasks.examples(task, bench.data_dir)
    out[task] = (tasks.read_task(bench.benchmark_dir, task),
                 examples[:bench.limit] if bench.limit > 0 else examples)
  if rm_settings.path:
    pedrm_lib.check(rm_settings)
    if any(t in tasks.PEDAGOGICAL for t in bench.names) and not rm_settings.system_prompt_file:
      raise app.UsageError("the win rate needs --config.pedrm.system_prompt_file: the reward "
                           "model's system prompt, from the benchmark's reward_model/ script")
  return out


def protocol(s: Settings, **more: Any) -> EvalProtocol:  # Any: JSON sections.
  """Everything that decides the numbers: shards of one run must agree on it. `more`:
  a job's own sections (CPA's method and settings)."""
  model = ({"endpoint": [s.endpoint.model, s.endpoint.base_url]} if s.endpoint.model else
           {"path": s.tutor.path, **jsonable(s.run), **workdir_lib.architecture(s.tutor.path)})
  return EvalProtocol(kind="mathtutorbench", seed=s.job.seed, num_shards=s.shard.num_shards,
                      sections={"bench": jsonable(s.bench), "model": model,
                                "pedrm": jsonable(s.pedrm), **more})


def resolve_run(s: Settings, workdir: str) -> Settings:
  """With tutor.workdir: its base checkpoint, and the step given, else the one this
  workdir's shards recorded, else the latest (as the evaluation job)."""
  if not s.run.workdir:
    if s.run.step is not None:
      raise app.UsageError("--config.tutor.step needs --config.tutor.workdir (a training run)")
    return s
  base, step = tutor_checkpoint(s.run, workdir, ("model", "step"))
  return dataclasses.replace(s, tutor=dataclasses.replace(s.tutor, path=base),
                             run=dataclasses.replace(s.run, step=step))


class Bench:
  """The benchmark's tasks as one sharded job: items are (task, index, example) in task
  order, and no batch spans two tasks (each has its own prompt and stop strings)."""
  unit, per_item = "example", 1

  def __init__(self, s: Settings, loaded: dict):
    self.s = s
    self.files = {t: f for t, (f, _) in loaded.items()}
    self.items = [(t, i, x) for t, (_, xs) in loaded.items() for i, x in enumerate(xs)]
    self.sizes = [len(xs) for _, xs in loaded.values()]
    self.batch_size = s.bench.batch_examples
    self.policy = self.client = self.rm = None
    if s.endpoint.model:  # Checked now, with one request, before anything loads.
      self.connect()

  def connect(self) -> None:
    """The endpoint under test, answering as the harness asks (greedy, its token budget)."""
    s = self.s
    side = dataclasses.replace(s.tutor, temperature=s.bench.temperature, top_p=1.0, top_k=0)
    # In completion mode (the harness's default) only text completions are asked, as the
    # harness asks them: the check is one too, so an endpoint without a chat API passes.
    self.client = endpoint_party(side, s.endpoint, "model under test",
                                 max_new_tokens=s.bench.max_new_tokens,
                                 completions=s.bench.mode == "completion").client
    self.policy = runner.EndpointPolicy(self.client, s.bench)

  def load(self, mesh: jax.sharding.Mesh) -> None:
    s = self.s
    if self.policy is None:
      party = tutor_party(s.tutor, s.run, mesh, s.job.scan_layers)
      self.policy = runner.ModelPolicy(party, s.bench, s.job.seed)
    self.rm = pedrm_lib.PedRM(s.pedrm) if s.pedrm.path else None
    if self.rm is None:
      logging.warning("no --config.pedrm.path: the pedagogical tasks get no win rate")

  def run(self, j: int, idx: range, counts: sharded.Counts) -> list[BenchRecord]:
    clock = time.perf_counter()
    task = self.items[idx[0]][0]
    cut = self.rm.cut if self.rm else 0
    with sharded.api_counts(counts, endpoint=self.client):
      records = runner.answer(task, self.files[task], [self.items[k][2] for k in idx],
                              [self.items[k][1] for k in idx], j, self.policy, self.rm)
    if self.rm and task in tasks.PEDAGOGICAL:
      counts.pedrm_inputs_cut[task] += self.rm.cut - cut
    counts.tick(task, clock)
    return records

  @staticmethod
  def postfix(records: list[BenchRecord]) -> dict[str, str]:
    return {"task": records[0].task}


@job_main
def main(config: ml_collections.ConfigDict, workdir: str) -> None:
  s = resolve_run(read(config), workdir)
  name = workdir_lib.config_name(sys.argv)
  changed = workdir_lib.guard(workdir, "mathtutorbench", config, name)
  loaded = load_tasks(s.bench, s.pedrm)
  if not (s.endpoint.model or s.tutor.path):
    raise app.UsageError("give the model under test: --config.tutor.path (a Hugging Face "
                         "directory), --config.tutor.workdir (a training run) or "
                         "--config.tutor.endpoint.model (an OpenAI-compatible endpoint)")
  if s.endpoint.model and jax.process_count() > 1:
    raise app.UsageError("a tutor behind an endpoint is called from the host: run the "
                         "benchmark of an endpoint as one process (--multihost=off)")
  start = time.perf_counter()
  task = Bench(s, loaded)
  workdir_lib.record_start(workdir, "mathtutorbench", config, name, changed)
  metrics = sharded.run(task, protocol(s), workdir, s.shard, s.mesh, config)
  if metrics is not None:
    for name, m in metrics.metrics.tasks.items():
      logging.info("%s", results_lib.summary(name, m))
    print(results_lib.table({workdir_lib.config_name(sys.argv): metrics.metrics.tasks}))
  print(f"seconds={time.perf_counter() - start:.1f}")
  if distributed.is_main_process():
    workdir_lib.print_results(workdir, *(("results.md", "results.json", "metrics.json")
                                         if metrics is not None else ("shards",)))


if __name__ == "__main__":
  cli.run(main)
