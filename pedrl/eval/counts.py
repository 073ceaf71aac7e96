"""What a sharded job counts beside its records (`Counts`), summed over shards into
metrics.json's `counts`: seconds per stage, what each API client used, the judges'
asking, the reward pipeline's and Ped-RM's cut inputs (pedrl.jobs.sharded).

In files (a shard's status, metrics.json, summary.json) the counts are one flat JSON
object keyed GROUP/KEY (`seconds/dialogues`, `judge/requests`, `tutor_endpoint/calls`),
as pedrl has always written them; `Counts.to_json` and `Counts.from_json` are the only
code that reads or writes those keys.
"""
import collections
from collections.abc import Iterator, Mapping
import contextlib
import dataclasses
import time
from typing import Any

_counter = lambda: dataclasses.field(default_factory=collections.Counter)


@dataclasses.dataclass
class Counts:
  """A shard's (or, summed, a run's) counts by group."""
  # Seconds per stage: "load", then the task's ("pre_solve", "dialogues", …; a
  # MathTutorBench task's name).
  seconds: collections.Counter = _counter()
  # Per API client, by the name the job gives it (judge_backend, tutor_endpoint,
  # backbone, …): what its `stats` counted (calls, tokens, retries).
  clients: dict[str, collections.Counter] = dataclasses.field(default_factory=dict)
  judge: collections.Counter = _counter()  # The judges' asking (asking.AskStats).
  pipeline: collections.Counter = _counter()  # The reward pipeline's (baseline data).
  pedrm_inputs_cut: collections.Counter = _counter()  # Per MathTutorBench task.

  # The groups a flat key can name; any other GROUP names an API client.
  GROUPS = ("seconds", "judge", "pipeline", "pedrm_inputs_cut")

  def tick(self, stage: str, since: float) -> float:
    """Adds the seconds since `since` to `stage`'s; now."""
    now = time.perf_counter()
    self.seconds[stage] += round(now - since, 3)
    return now

  def client(self, name: str) -> collections.Counter:
    return self.clients.setdefault(name, collections.Counter())

  def add(self, other: "Counts") -> None:
    """Sums `other` into these counts."""
    for group in self.GROUPS:
      getattr(self, group).update(getattr(other, group))
    for name, counted in other.clients.items():
      self.client(name).update(counted)

  def to_json(self) -> dict[str, float]:
    """The flat GROUP/KEY object of the files, keys sorted."""
    flat = {f"{g}/{k}": v for g in self.GROUPS for k, v in getattr(self, g).items()}
    flat.update({f"{name}/{k}": v for name, c in self.clients.items() for k, v in c.items()})
    return dict(sorted(flat.items()))

  @classmethod
  def from_json(cls, flat: Mapping[str, float], where: str = "counts") -> "Counts":
    """The counts a file holds (`where` names it in the error a key without a group gets)."""
    out = cls()
    for key, value in flat.items():
      group, sep, name = key.partition("/")
      if not sep:
        raise ValueError(f"{where}: the count {key!r} names no group (GROUP/KEY)")
      counter = getattr(out, group) if group in cls.GROUPS else out.client(group)
      counter[name] += value
    return out


@contextlib.contextmanager
def api_counts(counts: Counts, **clients: Any) -> Iterator[None]:
  """Adds to each client's counts what its `stats` counted inside the block (calls,
  tokens, retries), also when the block fails; None clients count nothing."""
  stats = lambda c: dict(getattr(c, "stats", None) or {})
  before = {name: stats(c) for name, c in clients.items() if c is not None}
  try:
    yield
  finally:
    for name, c in clients.items():
      if c is not None:
        counts.client(name).update({k: v - before[name].get(k, 0)
                                    for k, v in stats(c).items()})
