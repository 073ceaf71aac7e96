r"""CPA (paper 002) on MathTutorBench: table 2 (CPA and the prompting baselines on one
backbone) and table 3 (CPA's ablations, the hard win rates and BVR).

  python -m pedrl.experiments.cpa --config=experiments/cpa.py:tiny --workdir=/tmp/cpa

Every method (`agents.methods`: cpa, no_m1, no_m2_loop, no_m2_sim, no_m3_monitor,
no_m4, cot, plan_solve, sot) and seed (`agents.seeds`, paper 002's 42, 43, 44)
is one MathTutorBench job in WORKDIR/<method>/seed<seed> (sharded and resumed
like pedrl.experiments.mathtutorbench), answered by `pedrl.agents.bench.AgentPolicy`
over one backbone: a local checkpoint (`tutor.path`, `tutor.workdir`) loaded once,
or an endpoint (`tutor.endpoint.model`). The tables average the seeds (± their
standard deviation); BVR is pedrl.mathtutorbench_rules.constraints' rule count on
the replies (as every MathTutorBench job reports it), BVR† on the two hard splits
(paper 002 reports it there); `repair` the share of replies whose monitor
repaired a step.
WORKDIR/tables.md holds the tables; `python -m pedrl.tools.show_trace
WORKDIR/<method>/seed<seed> --task=T --index=i` prints one trace.
"""
import sys

from pedrl import cli
from pedrl.jobs import bench_settings

if __name__ == "__main__":  # First, before the imports below load JAX (pedrl.cli.check_job).
  cli.check_job(__spec__.name, sys.argv[1:], bench_settings.read_cpa)

import dataclasses
import os
import time
import collections
from collections.abc import Sequence

import jax
import ml_collections
from absl import app, logging
import numpy as np
from tqdm import tqdm

from pedrl import distributed
from pedrl.agents import backbone as backbone_lib, bench as agent_bench
from pedrl.agents.cpa.state import Trace
from pedrl.env.party import ChatClient, Party
from pedrl.eval import evaluations, pedrm as pedrm_lib, shards
from pedrl.eval.mathtutorbench_harness import results as results_lib
from pedrl.eval.protocol import jsonable
from pedrl.eval.records import BenchRecord
from pedrl.jobs import settings as settings_lib, sharded, workdir as workdir_lib
from pedrl.experiments import mathtutorbench as mtb
from pedrl.jobs.exits import define_flags, job_main
from pedrl.jobs.loading import endpoint_party, tutor_party
from pedrl.mathtutorbench_rules import constraints
# Re-exported: defined there, importable without JAX.
from pedrl.agents.settings import AgentRuns

define_flags("experiments/cpa.py:tiny", "Output directory (one MathTutorBench job per method and seed).")


Settings = bench_settings.CPAJobSettings


def read(config: ml_collections.ConfigDict) -> Settings:
  """The config's settings (pedrl.jobs.bench_settings)."""
  try:
    out = bench_settings.read_cpa(config)
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  return out


@dataclasses.dataclass
class SharedModels:
  """The models every method and seed of the job shares, each loaded once per process."""
  client: ChatClient | None = None  # The backbone endpoint, checked once by main; or
  party: Party | None = None  # the local backbone, loaded by the first run that needs it.
  rm: pedrm_lib.PedRM | None = None  # Ped-RM (win rates), if the config names one.


class AgentBench(mtb.Bench):
  """The benchmark job of one method and seed; the backbone model is loaded once per
  process and shared by every method (`models`)."""

  def __init__(self, s: Settings, loaded_tasks: dict, method: str, models: SharedModels):
    self.method, self.models = method, models
    super().__init__(s, loaded_tasks)

  def connect(self) -> None:
    """The backbone endpoint, checked once by main and shared by every method."""
    self.client = self.models.client

  def run(self, j: int, idx: range, counts: sharded.Counts) -> list[BenchRecord]:
    with sharded.api_counts(counts, backbone=self.backbone):
      return super().run(j, idx, counts)

  def load(self, mesh: jax.sharding.Mesh) -> None:
    s = self.s
    if self.client is not None:
      backbone = backbone_lib.EndpointBackbone(self.client, s.job.seed)
    else:
      if self.models.party is None:
        self.models.party = tutor_party(s.tutor, s.run, mesh, s.job.scan_layers)
      backbone = backbone_lib.LocalBackbone(
          self.models.party, settings_lib.sampling(s.tutor), s.job.seed,
          truncate_prompts=s.agents.truncate_prompts)
    self.backbone = backbone
    self.policy = agent_bench.AgentPolicy(agent_bench.build(self.method, backbone, s.cpa))
    if self.models.rm is None and s.pedrm.path:
      self.models.rm = pedrm_lib.PedRM(s.pedrm)
    self.rm = self.models.rm


HARD = results_lib.HARD  # Table 3's † splits.


@dataclasses.dataclass(frozen=True)
class TraceStats:
  """Table 3's numbers of one method's job at one seed (`trace_stats`)."""
  bvr: float | None  # Share of replies breaking a rule, all tasks (None: no replies).
  bvr_hard: float | None  # The same on the hard splits (table 3's BVR†).
  rates: dict  # constraints.rates: BVR per task and replies per rule broken.
  repair_share: float  # Share of replies whose monitor repaired a step.
  fallbacks: int  # Stand-ins for unread stage replies, over all replies.
  calls_per_instance: float
  tokens_per_instance: float
  seconds_per_instance: float


@dataclasses.dataclass(frozen=True)
class SeedRun:
  """One method's job at one seed: the benchmark's metrics per task and `trace_stats`."""
  tasks: dict
  stats: TraceStats

  def summary(self) -> str:
    """One line: the hard win rates, BVR and what an instance cost (tables.md has it all)."""
    pct = lambda x: "–" if x is None else f"{100 * x:.0f}%"
    st = self.stats
    wins = ", ".join(f"{t.split('_')[0]}† win "
                     f"{pct(self.tasks.get(t, {}).get('win_rate'))}" for t in HARD)
    return (f"{wins}, BVR† {pct(st.bvr_hard)}, BVR {pct(st.bvr)}, repaired "
            f"{pct(st.repair_share)}, {st.fallbacks} stand-ins; per instance "
            f"{st.calls_per_instance:.1f} calls, {st.tokens_per_instance:.0f} tokens, "
            f"{st.seconds_per_instance:.2f} s")


def trace_stats(records: Sequence[BenchRecord], counts: sharded.Counts) -> TraceStats:
  """BVR overall, on the hard splits and per task, the share of replies with a monitor
  repair, stand-ins, and per instance the backbone's calls and tokens and the seconds
  (shards' counts)."""
  rows = results_lib.violations(records)  # The MathTutorBench job's BVR, the same rows.
  rates = constraints.rates(rows)
  traces = [Trace.from_dict(r.trace) if r.trace else None for r in records]
  n = max(len(records), 1)
  backbone = counts.clients.get("backbone", collections.Counter())
  return TraceStats(
      bvr=rates.get("bvr"),
      bvr_hard=constraints.rates(row for row in rows if row[0] in HARD).get("bvr"),
      rates=rates,
      repair_share=float(np.mean([t is not None and t.repairs > 0 for t in traces])),
      fallbacks=int(sum(sum(t.fallbacks.values()) for t in traces if t is not None)),
      calls_per_instance=backbone["calls"] / n,
      tokens_per_instance=(backbone["prompt_tokens"] + backbone["completion_tokens"]) / n,
      seconds_per_instance=sum(v for k, v in counts.seconds.items() if k != "load") / n)


def _cell(values) -> str:
  values = [v for v in values if v is not None]
  if not values:
    return "–"
  m = 100 * float(np.mean(values))
  return f"{m:.1f}" if len(values) < 2 else f"{m:.1f} ± {100 * float(np.std(values)):.1f}"


def tables(runs: dict[str, list[SeedRun]]) -> str:
  """Table 2 (the nine numbers per method) and table 3 (per CPA variant: the hard
  win rates, BVR on them and overall, repair share), averaged over seeds."""
  head = ["method"] + [title for _, _, title in results_lib.COLUMNS]
  lines = ["Table 2 (paper 002): MathTutorBench, percent, mean ± std over seeds", "",
           "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for method, seeds in runs.items():
    cells = [_cell([r.tasks.get(task, {}).get(metric) for r in seeds])
             for task, metric, _ in results_lib.COLUMNS]
    lines.append("| " + " | ".join([method] + cells) + " |")
  lines += ["", "Table 3 (paper 002): CPA's ablations (hard splits; BVR lower is better), and "
            "what each method cost per instance", "",
            "| method | Scaff.† win | Inst.† win | BVR† | BVR (all tasks) | monitor repair | "
            "stand-ins | calls | tokens | seconds |", "|---|---|---|---|---|---|---|---|---|---|"]
  for method, seeds in runs.items():
    win = lambda t: _cell([r.tasks.get(t, {}).get("win_rate") for r in seeds])
    stat = lambda k: _cell([getattr(r.stats, k) for r in seeds])
    mean = lambda k: np.mean([getattr(r.stats, k) for r in seeds])
    lines.append(f"| {method} | {win(HARD[0])} | {win(HARD[1])} | {stat('bvr_hard')} | "
                 f"{stat('bvr')} | {stat('repair_share')} | "
                 f"{sum(r.stats.fallbacks for r in seeds)} | {mean('calls_per_instance'):.1f} | "
                 f"{mean('tokens_per_instance'):.0f} | {mean('seconds_per_instance'):.2f} |")
  return "\n".join(lines)


def finished_run(where: str, metrics: evaluations.Merged | None) -> SeedRun | None:
  """The run in `where` (one method and seed) once every shard of it has finished: merged
  by this shard (`metrics`), or by another shard that finished after this one's batches
  (read back from its files); None while a shard of it still runs. A finished run that
  does not merge (records lost, mixed protocols) is the merge's ShardError."""
  if metrics is None:
    if shards.running(where):
      return None
    records, metrics = shards.merge(where)
  else:
    records, _ = shards.merge(where)
  return SeedRun(metrics.metrics.tasks, trace_stats(records, metrics.counts))


@job_main(single_process="cpa's agent calls its backbone and judges from the host; several "
                          "processes would each repeat every call")
def main(config: ml_collections.ConfigDict, workdir: str) -> None:
  s = read(config)
  s = mtb.resolve_run(s, workdir)
  name = workdir_lib.config_name(sys.argv)
  changed = workdir_lib.guard(workdir, "cpa", config, name)
  loaded = mtb.load_tasks(s.bench, s.pedrm)
  if not (s.endpoint.model or s.tutor.path):
    raise app.UsageError("give the backbone: --config.tutor.path (a Hugging Face directory), "
                         "--config.tutor.workdir (a training run) or --config.tutor.endpoint.model")
  workdir_lib.record_start(workdir, "cpa", config, name, changed)
  start = time.perf_counter()
  models = SharedModels()
  if s.endpoint.model:  # Checked with one request before anything runs.
    models.client = endpoint_party(s.tutor, s.endpoint, "CPA backbone").client
  runs, pending = {}, []
  jobs = [(method, seed) for method in s.agents.method_names for seed in s.agents.seed_list]
  with tqdm(total=len(jobs), unit="run", desc="cpa: methods × seeds",
            disable=not distributed.is_main_process()) as bar:
    for method, seed in jobs:
      run_s = dataclasses.replace(s, job=dataclasses.replace(s.job, seed=seed))
      where = os.path.join(workdir, method, f"seed{seed}")
      protocol = mtb.protocol(run_s, method=method, cpa=jsonable(s.cpa))
      metrics = sharded.run(AgentBench(run_s, loaded, method, models), protocol, where,
                            s.shard, s.mesh, config, label=f"{method} seed {seed}")
      bar.update(1)
      run = finished_run(where, metrics)
      if run is None:  # Other shards still running: they, or a rerun, finish the table.
        pending.append(f"{method} seed {seed}")
        continue
      runs.setdefault(method, []).append(run)
      logging.info("%s seed %d: %s", method, seed, run.summary())
  text = tables(runs)
  if pending:  # A table of fewer seeds must say so: its mean ± std is over those it has.
    note = (f"Incomplete: {len(pending)} of {len(jobs)} runs still have shards running "
            f"({', '.join(pending)}); rerun any shard when they finish.")
    logging.warning("%s", note)
    text = f"{note}\n\n{text}"
  with open(os.path.join(workdir, "tables.md"), "w") as f:
    f.write(text + "\n")
  print(text)
  print(f"seconds={time.perf_counter() - start:.1f}")
  if distributed.is_main_process():
    workdir_lib.print_results(workdir, "tables.md")


if __name__ == "__main__":
  cli.run(main)
