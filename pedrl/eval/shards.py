"""How an evaluation splits into shards, what each shard writes, and how shards merge.

Items (problems, benchmark questions, MathTutorBench examples) are cut into
batches of a fixed size in order, a batch never spanning two segments (the
MathTutorBench tasks); batch j belongs to shard j mod N. An item is thus
always computed in the same batch, with the same padding and the same samples,
however many shards run: two shards merged give exactly the unsharded run's
records. Each shard writes

  WORKDIR/shards/records-I-of-N.jsonl   its EvalRecords, batch by batch (synced)
  WORKDIR/shards/status-I-of-N.json     its protocol, its batches, counts, seconds

and a rerun skips the batches whose records are all there (a batch cut by a
kill runs again whole, with the same samples). `merge` checks that every shard
is there, finished and of one protocol; `write_merged` writes the merged
records (eval_dialogues.jsonl, eval_reasoning.jsonl, or MathTutorBench's
files) and WORKDIR/metrics.json.
"""
import collections
import math
import os
from collections.abc import Sequence
from typing import Any

from pedrl import files
from pedrl.env.dialogue import RecordError
from pedrl.eval import evaluations, protocol as protocol_lib, records as records_lib
from pedrl.eval.counts import Counts
from pedrl.eval.protocol import EvalProtocol


class ShardError(ValueError):
  """Shards that cannot be resumed or merged (missing, unfinished, mixed protocols)."""


def batches(sizes: int | Sequence[int], batch_size: int, shard: int,
            num_shards: int) -> list[tuple[int, range]]:
  """[(batch index, range of item indices)] of one shard. sizes: the item count, or the
  sizes of consecutive segments (items numbered across them) no batch may span."""
  spans, lo = [], 0
  for n in ([sizes] if isinstance(sizes, int) else sizes):
    spans += [range(a, min(a + batch_size, lo + n)) for a in range(lo, lo + n, batch_size)]
    lo += n
  return [(j, idx) for j, idx in enumerate(spans) if j % num_shards == shard]


def _name(kind: str, shard: int, num_shards: int, ext: str) -> str:
  return os.path.join("shards", f"{kind}-{shard:05d}-of-{num_shards:05d}.{ext}")


def records_path(workdir: str, shard: int, num_shards: int) -> str:
  return os.path.join(workdir, _name("records", shard, num_shards, "jsonl"))


def status_path(workdir: str, shard: int, num_shards: int) -> str:
  return os.path.join(workdir, _name("status", shard, num_shards, "json"))


def check_protocol(workdir: str, protocol: EvalProtocol) -> None:
  """Refuses a workdir holding shards of another protocol (or another shard count)."""
  for name, other in _protocols(workdir).items():
    if other != protocol:
      raise ShardError(f"{workdir} holds {name} of a different evaluation "
                       f"({protocol.differences(other)}); use a new workdir for this one")


def recorded_protocol(workdir: str) -> EvalProtocol | None:
  """The protocol the shards of `workdir` recorded (the first's), or None: no shards."""
  return next(iter(_protocols(workdir).values()), None)


def recorded(workdir: str, keys: tuple[str, ...]) -> Any:
  """A protocol value an earlier shard of this workdir recorded, by its path in the
  status file (e.g. ("tutor", "step"): the tutor's training step), or None."""
  protocol = recorded_protocol(workdir)
  value = protocol.to_dict() if protocol else None
  for k in keys:
    value = value.get(k) if isinstance(value, dict) else None
  return value


def _statuses(workdir: str) -> dict:
  folder = os.path.join(workdir, "shards")
  if not os.path.isdir(folder):
    return {}
  return {n: files.read_json(os.path.join(folder, n), ShardError)
          for n in sorted(os.listdir(folder)) if n.startswith("status-") and n.endswith(".json")}


def _protocols(workdir: str) -> dict[str, EvalProtocol]:
  """Each status file's protocol, by file name; ShardError naming a file it cannot read."""
  out = {}
  for name, status in _statuses(workdir).items():
    try:
      out[name] = EvalProtocol.from_dict(status["protocol"])
    except (KeyError, TypeError, ValueError) as e:
      raise ShardError(f"{workdir}/shards/{name}: no protocol this pedrl reads ({e})") from None
  return out


def recorded_kind(workdir: str) -> str | None:
  """The job kind the shards of `workdir` recorded (None: no shards), read before the
  rest of their protocol: another job's shards need not have an evaluation's fields."""
  first = next(iter(_statuses(workdir).values()), None)
  return None if first is None else protocol_lib.kind_of(first.get("protocol", {}))


def evaluation(kind: str, workdir: str = "this workdir") -> evaluations.EvalTask:
  """The evaluation whose shards are of job `kind` (dialogues, reasoning answers,
  MathTutorBench's); ShardError for another job's shards."""
  if kind not in evaluations.TASKS:
    raise ShardError(f"{workdir}: not an evaluation workdir (its shards are a {kind!r} job's; "
                     f"evaluations are {', '.join(evaluations.TASKS)})")
  return evaluations.TASKS[kind]


def completed(workdir: str, shard: int, num_shards: int, plan: dict,
              kind: type[records_lib.Record] = records_lib.EvalRecord) -> list[records_lib.Record]:
  """The records of the shard's batches that are whole; a batch cut by a kill loses its
  records (rewritten without them, logged by the caller) and runs again.

  plan: {batch index: records it must have}."""
  path = records_path(workdir, shard, num_shards)
  have = records_lib.load(path, kind)
  count = collections.Counter(r.batch for r in have)
  whole = {b for b, n in plan.items() if count[b] == n}
  extra = set(count) - set(plan)
  if extra:
    raise ShardError(f"{path} holds batches {sorted(extra)} that are not this shard's")
  keep = [r for r in have if r.batch in whole]
  if len(keep) < len(have):
    records_lib.save(keep, path, mode="w")
  return keep


def gather(workdir: str, kind: type[records_lib.Record] | None = None
           ) -> tuple[list, EvalProtocol, Counts]:
  """(records in batch order, protocol, summed counts) of every shard in `workdir`, as
  `kind` (None: the protocol's evaluation records); ShardError when a shard is missing,
  unfinished or lacks records of its batches, or shards disagree on the protocol."""
  statuses = _statuses(workdir)
  if not statuses:
    raise ShardError(f"{workdir}: no evaluation shards (no shards/status-*.json)")
  kind = kind or evaluation(recorded_kind(workdir), workdir).record_type
  (first, protocol), *others = _protocols(workdir).items()
  for name, other in others:
    if other != protocol:
      raise ShardError(f"{workdir} mixes evaluation protocols: {first} and {name} differ in "
                       f"{other.differences(protocol)}")
  num_shards = protocol.num_shards
  missing, unfinished = _to_run(statuses, workdir, num_shards)
  if missing or unfinished:
    raise ShardError(f"{workdir}: of {num_shards} shards, " + "; ".join(filter(None, [
        missing and f"missing shards {missing} (run them with --config.eval.shard=I)",
        unfinished and f"unfinished {unfinished} (rerun them to resume)"])))
  out = []
  for i in range(num_shards):
    records = records_lib.load(records_path(workdir, i, num_shards), kind)
    _check_whole(workdir, i, num_shards, records,
                 statuses[os.path.basename(status_path(workdir, i, num_shards))])
    out += records
  out.sort(key=lambda r: r.batch)  # Stable: each batch is one shard's, in its order.
  seen = collections.Counter(r.key for r in out)
  if dup := [k for k, n in seen.items() if n > 1]:
    raise RecordError(f"{workdir}: {dup[0]} is recorded twice")
  counts = Counts()
  for name, s in statuses.items():
    counts.add(Counts.from_json(s.get("counts", {}), os.path.join(workdir, "shards", name)))
  return out, protocol, counts


def _to_run(statuses: dict, workdir: str, num_shards: int) -> tuple[list, list]:
  """(numbers of the shards with no status, status files of those not finished)."""
  missing = [i for i in range(num_shards)
             if os.path.basename(status_path(workdir, i, num_shards)) not in statuses]
  return missing, [n for n, s in statuses.items() if not s.get("finished")]


def running(workdir: str) -> bool:
  """Whether some shard of `workdir` is still to run or to finish (its protocol's shard
  count; no shard at all counts): what a merge must wait for, unlike a broken shard."""
  statuses = _statuses(workdir)
  if not statuses:
    return True
  num_shards = recorded_protocol(workdir).num_shards
  return any(_to_run(statuses, workdir, num_shards))


def _check_whole(workdir: str, shard: int, num_shards: int, records: list,
                 status: dict) -> None:
  """ShardError unless a finished shard's records hold every batch its status lists, each
  with the records it must have (a status written before `batch_records` was recorded:
  at least one): a records file lost, cut or edited after the shard finished."""
  batches = status.get("batches", [])
  want = dict(zip(batches, status.get("batch_records") or [None] * len(batches)))
  have = collections.Counter(r.batch for r in records)
  lost = [b for b, n in want.items() if have[b] == 0 or (n is not None and have[b] != n)]
  extra = sorted(set(have) - set(want))
  if lost or extra:
    path = records_path(workdir, shard, num_shards)
    raise ShardError(f"{path}: " + "; ".join(filter(None, [
        lost and f"batches {lost} are missing or incomplete",
        extra and f"batches {extra} are not this shard's"])) +
        f" although its status says finished; rerun shard {shard} of {num_shards} "
        "to redo the missing batches")


def merge(workdir: str) -> tuple[list, evaluations.Merged]:
  """(records in batch order, metrics and counts) of every shard in `workdir`, the metrics
  as the protocol's evaluation computes them; ShardError when a shard is missing or
  unfinished, or shards disagree on the protocol."""
  out, protocol, counts = gather(workdir)
  metrics = evaluation(protocol.kind, workdir).metrics(out, counts, protocol)
  return out, evaluations.Merged(metrics, counts)


def write_merged(workdir: str) -> evaluations.Merged:
  """Merges the shards into the evaluation's files (eval_dialogues.jsonl,
  eval_reasoning.jsonl, MathTutorBench's own) and WORKDIR/metrics.json."""
  out, merged = merge(workdir)
  protocol = recorded_protocol(workdir)
  config = next(iter(_statuses(workdir).values())).get("config", "?")
  evaluation(protocol.kind, workdir).write(workdir, out, merged.metrics, protocol, config)
  files.write_json(os.path.join(workdir, "metrics.json"), {
      **_nan_to_none(merged.to_json()), "config": config, "protocol": protocol.to_dict()})
  return merged


def _nan_to_none(value):
  """NaN (a metric nothing measured) as JSON null: strict JSON readers refuse NaN."""
  if isinstance(value, float) and math.isnan(value):
    return None
  if isinstance(value, dict):
    return {k: _nan_to_none(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_nan_to_none(v) for v in value]
  return value
