"""What a sharded job counts beside its records, summed over shards into metrics.json's
`counts`: seconds per stage and what each API client used (pedrl.jobs.sharded)."""
import collections
from collections.abc import Iterator
import contextlib
import time
from typing import Any


def tick(counts: collections.Counter, key: str, since: float) -> float:
  """Adds the seconds since `since` to counts[key]; now."""
  now = time.perf_counter()
  counts[key] += round(now - since, 3)
  return now


@contextlib.contextmanager
def api_counts(counts: collections.Counter, **clients: Any) -> Iterator[None]:
  """Adds to counts, as NAME/KEY, what each API client's `stats` counted inside the block
  (calls, tokens, retries), also when the block fails; None clients count nothing."""
  stats = lambda c: dict(getattr(c, "stats", None) or {})
  before = {name: stats(c) for name, c in clients.items()}
  try:
    yield
  finally:
    for name, c in clients.items():
      counts.update({f"{name}/{k}": v - before[name].get(k, 0) for k, v in stats(c).items()})
