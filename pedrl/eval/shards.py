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
import dataclasses
import json
import math
import os

from pedrl.env.dialogue import RecordError
from pedrl.eval import metrics as metrics_lib, reasoning, records as records_lib
from pedrl.eval.mathtutorbench import results as bench_results


class ShardError(ValueError):
  """Shards that cannot be resumed or merged (missing, unfinished, mixed protocols)."""


@dataclasses.dataclass(frozen=True)
class ShardSettings:
  """Which shard of how many this process runs (`--config.eval.shard`, `num_shards`)."""
  shard: int = 0
  num_shards: int = 1

  def __post_init__(self):
    if self.num_shards < 1:
      raise ValueError(f"num_shards={self.num_shards} must be at least 1")
    if not 0 <= self.shard < self.num_shards:
      raise ValueError(f"shard={self.shard} is not in [0, num_shards={self.num_shards}): shards "
                       f"are numbered 0 to {self.num_shards - 1}")


@dataclasses.dataclass(frozen=True)
class EvalSettings(ShardSettings):
  """The config's `eval` section (the protocol's own settings; the rest is the dialogue
  config's: problems, rollout, solve, rewards.judges)."""
  samples_per_problem: int = 1  # Dialogues per problem (the reference evaluates one).
  # Ped-RM macro: a dialogue with no scored turn counts 0 (the reference's eval.py) or is
  # left out ("drop"); either way it is counted (metrics.json: pedrm_unscored_dialogues).
  pedrm_unscored: str = "zero"
  bootstrap_resamples: int = metrics_lib.RESAMPLES
  confidence: float = metrics_lib.CONFIDENCE

  def __post_init__(self):
    super().__post_init__()
    if self.samples_per_problem < 1:
      raise ValueError("samples_per_problem must be positive")
    if not 0 < self.confidence < 1:
      raise ValueError(f"confidence={self.confidence} is not in (0, 1)")
    if self.pedrm_unscored not in metrics_lib.UNSCORED:
      raise ValueError(f"pedrm_unscored={self.pedrm_unscored!r} is not one of "
                       f"{metrics_lib.UNSCORED}")


@dataclasses.dataclass(frozen=True)
class TutorRun:
  """The config's `tutor.workdir` and `tutor.step`: the tutor under test is a pedrl
  training run's checkpoint, read straight from orbax (no export step)."""
  workdir: str | None = None
  step: int | None = None  # None: the latest saved step, fixed when the evaluation starts.


def jsonable(settings) -> dict:
  """A settings dataclass as a protocol records it: as JSON reads it back (tuples as lists),
  so a resumed shard compares equal."""
  return json.loads(json.dumps(dataclasses.asdict(settings)))


def batches(sizes, batch_size: int, shard: int, num_shards: int) -> list[tuple]:
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


def write_json(path: str, value) -> None:
  """Through a temporary file renamed over `path`: a kill leaves the old or the new file."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f"{path}.tmp{os.getpid()}"  # Shards finishing together each write their own.
  with open(tmp, "w") as f:
    json.dump(value, f, indent=2)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def read_json(path: str):
  try:
    with open(path) as f:
      return json.load(f)
  except ValueError as e:
    raise ShardError(f"{path}: not JSON ({e})") from None


def check_protocol(workdir: str, protocol: dict) -> None:
  """Refuses a workdir holding shards of another protocol (or another shard count)."""
  for name, status in _statuses(workdir).items():
    other = status.get("protocol", {})
    if other != protocol:
      raise ShardError(f"{workdir} holds {name} of a different evaluation ({_diff(other, protocol)}"
                       f"); use a new workdir for this one")


def recorded(workdir: str, keys: tuple):
  """A protocol value an earlier shard of this workdir recorded (e.g. the tutor's
  training step), or None."""
  for status in _statuses(workdir).values():
    value = status.get("protocol", {})
    for k in keys:
      value = value.get(k) if isinstance(value, dict) else None
    if value is not None:
      return value
  return None


def _diff(a: dict, b: dict) -> str:
  keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
  return "; ".join(f"{k}: {json.dumps(a.get(k))} there, {json.dumps(b.get(k))} here"
                   for k in keys)


def _statuses(workdir: str) -> dict:
  folder = os.path.join(workdir, "shards")
  if not os.path.isdir(folder):
    return {}
  return {n: read_json(os.path.join(folder, n)) for n in sorted(os.listdir(folder))
          if n.startswith("status-") and n.endswith(".json")}


RECORDS = {"tutoring": records_lib.EvalRecord, "reasoning": records_lib.ReasoningRecord,
           "mathtutorbench": records_lib.BenchRecord}


def is_evaluation(protocol: dict) -> bool:
  """Whether shards of this protocol are an evaluation's (other jobs shard too: baselines)."""
  return protocol.get("kind", "tutoring") in RECORDS


def record_kind(protocol: dict, workdir: str = "this workdir"):
  """The record type of an evaluation: dialogues, reasoning answers, MathTutorBench's;
  ShardError for another job's shards."""
  kind = protocol.get("kind", "tutoring")
  if kind not in RECORDS:
    raise ShardError(f"{workdir}: not an evaluation workdir (its shards are a {kind!r} job's; "
                     f"evaluations are {', '.join(RECORDS)})")
  return RECORDS[kind]


def completed(workdir: str, shard: int, num_shards: int, plan: dict,
              kind=records_lib.EvalRecord) -> list:
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


def gather(workdir: str, kind=None) -> tuple[list, dict, collections.Counter]:
  """(records in batch order, protocol, summed counts) of every shard in `workdir`, as
  `kind` (None: the protocol's record type); ShardError when a shard is missing or
  unfinished, or shards disagree on the protocol."""
  statuses = _statuses(workdir)
  if not statuses:
    raise ShardError(f"{workdir}: no evaluation shards (no shards/status-*.json)")
  protocols = {json.dumps(s.get("protocol"), sort_keys=True): n for n, s in statuses.items()}
  if len(protocols) > 1:
    (a, na), (b, nb) = list(protocols.items())[:2]
    raise ShardError(f"{workdir} mixes evaluation protocols: {na} and {nb} differ in "
                     f"{_diff(json.loads(a), json.loads(b))}")
  num_shards = next(iter(statuses.values()))["protocol"]["num_shards"]
  missing = [i for i in range(num_shards)
             if os.path.basename(status_path(workdir, i, num_shards)) not in statuses]
  unfinished = [n for n, s in statuses.items() if not s.get("finished")]
  if missing or unfinished:
    raise ShardError(f"{workdir}: of {num_shards} shards, " + "; ".join(filter(None, [
        missing and f"missing shards {missing} (run them with --config.eval.shard=I)",
        unfinished and f"unfinished {unfinished} (rerun them to resume)"])))
  protocol = statuses[next(iter(statuses))]["protocol"]
  out = []
  for i in range(num_shards):
    out += records_lib.load(records_path(workdir, i, num_shards),
                            kind or record_kind(protocol, workdir))
  out.sort(key=lambda r: r.batch)  # Stable: each batch is one shard's, in its order.
  seen = collections.Counter(r.key for r in out)
  if dup := [k for k, n in seen.items() if n > 1]:
    raise RecordError(f"{workdir}: {dup[0]} is recorded twice")
  counts = collections.Counter()
  for s in statuses.values():
    counts.update(s.get("counts", {}))
  return out, protocol, counts


def merge(workdir: str) -> tuple[list, dict]:
  """(records in batch order, metrics) of every shard in `workdir`; ShardError when a
  shard is missing or unfinished, or shards disagree on the protocol."""
  out, protocol, counts = gather(workdir)
  kind = protocol.get("kind", "tutoring")
  if kind == "mathtutorbench":
    metrics = {"n_examples": len(out), "tasks": bench_results.metrics(out, counts)}
  else:
    e = protocol["eval"]
    args = dict(seed=protocol["seed"], resamples=e["bootstrap_resamples"],
                confidence=e["confidence"])
    if kind == "reasoning":  # Protocols written before a setting existed: its behaviour then.
      mmlu = protocol["reasoning"].get("mmlu_average", "question")
      metrics = {"n_examples": len(out), **reasoning.accuracy(out, mmlu_average=mmlu, **args)}
    else:
      metrics = metrics_lib.compute(out, pedrm_unscored=e.get("pedrm_unscored", "drop"), **args)
      metrics.update(metrics_lib.dialogue_counts(out))
  metrics["counts"] = dict(sorted(counts.items()))
  return out, metrics


def write_merged(workdir: str) -> dict:
  """Merges the shards into WORKDIR/eval_dialogues.jsonl (eval_reasoning.jsonl for the
  reasoning benchmarks; MathTutorBench's own files) and WORKDIR/metrics.json."""
  out, metrics = merge(workdir)
  first = next(iter(_statuses(workdir).values()))
  protocol, config = first["protocol"], first.get("config", "?")
  kind = protocol.get("kind", "tutoring")
  if kind == "mathtutorbench":
    bench_results.write(workdir, out, metrics["tasks"], protocol["bench"]["model_name"], config)
  else:
    name = "eval_reasoning.jsonl" if kind == "reasoning" else "eval_dialogues.jsonl"
    records_lib.save(out, os.path.join(workdir, name), mode="w")
  write_json(os.path.join(workdir, "metrics.json"),
             {**_nan_to_none(metrics), "config": config, "protocol": protocol})
  return metrics


def _nan_to_none(value):
  """NaN (a metric nothing measured) as JSON null: strict JSON readers refuse NaN."""
  if isinstance(value, float) and math.isnan(value):
    return None
  if isinstance(value, dict):
    return {k: _nan_to_none(v) for k, v in value.items()}
  if isinstance(value, list):
    return [_nan_to_none(v) for v in value]
  return value
