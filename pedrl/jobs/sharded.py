"""The loop of a sharded evaluation job (evaluate, mathtutorbench).

A task knows its items and how to compute a batch of them; this loop runs
this process's shard of the batches (pedrl.eval.shards): it refuses a workdir
of another protocol, skips the batches already written, loads the models only
when something is left to do, writes each batch's records and the shard's
status as it goes, stops after the running batch on SIGTERM/SIGINT, and the
shard that finishes the workdir's last merges them.

A task is a `ShardedTask`. Its records and how they merge are its protocol's
evaluation's (pedrl.eval.evaluations, by the protocol's kind), unless the job
gives its own `record_type` and `merge` (pedrl.experiments.baseline_data,
whose records are not an evaluation's).
"""
import os
import sys
import time
from typing import Callable, Protocol, Sequence

import jax
import ml_collections
from absl import logging
from tqdm import tqdm

from pedrl import distributed, files, stopping
from pedrl.eval import evaluations, records as records_lib, shards
from pedrl.eval.counts import Counts, api_counts  # noqa: F401 (re-exported: the jobs' names)
from pedrl.eval.protocol import EvalProtocol, ShardSettings
from pedrl.jobs import workdir as workdir_lib
from pedrl.jobs.settings import MeshSettings
from pedrl.jobs.exits import exit_on_signal


class ShardedTask(Protocol):
  """What a sharded job computes: its items in batches (pedrl.eval.shards.batches)."""
  sizes: int | Sequence[int]  # The item count, or the sizes of segments no batch spans.
  batch_size: int  # Items per batch.
  per_item: int  # Records per item.
  unit: str  # An item, for the progress bar ("problem", "example").

  def load(self, mesh: jax.sharding.Mesh) -> None:
    """Loads the models (only when some batch is left to run)."""

  def run(self, batch: int, items: range, counts: Counts) -> list[records_lib.Record]:
    """The records of batch `batch` (items `items`); adds what it counted to `counts`."""

  def postfix(self, records: list[records_lib.Record]) -> dict[str, str]:
    """What the progress bar shows of a batch's records."""


def run(task: ShardedTask, protocol: EvalProtocol, workdir: str, shard: ShardSettings,
        mesh_settings: MeshSettings, config: ml_collections.ConfigDict | None = None,
        label: str | None = None, record_type: type[records_lib.Record] | None = None,
        merge: Callable[[str], dict] | None = None) -> evaluations.Merged | dict | None:
  """Runs this process's shard of `task`; the merged metrics when this shard finished
  the workdir's last one, else None. Stopped by a signal, it exits (128 + signal).
  `record_type` and `merge`: a job's own (default: the protocol's evaluation's records,
  merged by pedrl.eval.shards.write_merged).
  `config` (the job's ConfigDict) is written to WORKDIR/config.json with absolute
  paths, and each shard's status records where its latest start came from. `label`:
  one run of a job of several (CPA's methods), shown on its progress bar, which is
  cleared when it ends (the job's own bar stays)."""
  main_process = distributed.is_main_process()
  i, n = shard.shard, shard.num_shards
  sizes = [task.sizes] if isinstance(task.sizes, int) else list(task.sizes)
  plan = shards.batches(sizes, task.batch_size, i, n)
  if not plan:  # Finished at once, so that the other shards' merge does not wait for it.
    logging.warning("shard %d of %d has no batch: %d %ss make %d batches of %d", i, n,
                    sum(sizes), task.unit, len(shards.batches(sizes, task.batch_size, 0, 1)),
                    task.batch_size)
  workdir_lib.refuse_checkpoint(workdir)
  distributed.on_main_process(shards.check_protocol, workdir, protocol)  # One reader decides.
  status_path = shards.status_path(workdir, i, n)
  out_path = shards.records_path(workdir, i, n)
  per_batch = {j: len(idx) * task.per_item for j, idx in plan}
  kind = record_type or shards.evaluation(protocol.kind).record_type
  done = shards.completed(workdir, i, n, per_batch, kind) if main_process else []
  finished = set(distributed.broadcast_json(sorted({r.batch for r in done})))
  todo = [(j, idx) for j, idx in plan if j not in finished]
  counts = Counts()
  if main_process and os.path.exists(status_path):  # Only process 0 writes the status.
    counts = Counts.from_json(files.read_json(status_path, shards.ShardError).get("counts", {}),
                              status_path)
  name = workdir_lib.config_name(sys.argv)
  start = workdir_lib.provenance() if main_process else None
  status = lambda finished_: {"protocol": protocol.to_dict(), "config": name, "shard": i,
                              "batches": [j for j, _ in plan],
                              "batch_records": [per_batch[j] for j, _ in plan],
                              "finished": finished_,
                              "counts": counts.to_json(), "provenance": start}
  if main_process:
    if config is not None:  # Shards of one protocol differ in their shard fields only.
      os.makedirs(workdir, exist_ok=True)
      workdir_lib.write_config(workdir, config)
    files.write_json(status_path, status(not todo))
  if done:
    logging.info("resuming shard %d of %d: %d of %d batches already in %s", i, n,
                 len(finished), len(plan), out_path)
  if plan and not todo and main_process and label is None:
    workdir_lib.print_finished(f"shard {i} of {n} had written all its {len(plan)} batches "
                               "before")

  stopped_by, j = None, None
  if todo:
    clock = time.perf_counter()
    task.load(mesh_settings.make())
    counts.tick("load", clock)
  total, done_now = sum(len(idx) for _, idx in todo), 0
  desc = f"shard {i}/{n}" if label is None else f"{label}, shard {i}/{n}"
  with (tqdm(total=total, unit=task.unit, desc=desc, disable=not main_process, smoothing=0.1,
             leave=label is None) as bar,
        stopping.StopRequest("the current batch") as signals):
    for j, idx in todo:
      records = task.run(j, idx, counts)
      done_now += len(records)
      if main_process:
        records_lib.save(records, out_path)
        files.write_json(status_path, status(False))
      bar.update(len(idx))
      rate = done_now / max(bar.format_dict["elapsed"], 1e-9)
      bar.set_postfix(records_per_s=f"{rate:.2f}", **task.postfix(records))
      if distributed.any_process(signals.requested is not None):
        stopped_by = signals.requested or "SIGTERM"
        break
  exit_on_signal(stopped_by, f"shard {i}, batch {j} (earlier batches written)")
  if not main_process:
    return None
  files.write_json(status_path, status(True))
  try:
    return (merge or shards.write_merged)(workdir)
  except shards.ShardError as err:  # Other shards still running: they merge, or report does.
    logging.info("shard %d of %d finished; not merged yet: %s", i, n, err)
    return None
