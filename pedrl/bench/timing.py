"""Timing shared by the benchmarks: engines timed in alternation on one machine, and
the flags of what a benchmark times (--repeats, --scan_layers)."""
import time

from absl import flags


def define_repeats(per: str) -> None:
  """--repeats: the timed runs behind each reported time, the best of them."""
  flags.DEFINE_integer("repeats", 3, f"Timed runs per {per}; the best is reported.",
                       lower_bound=1)


def define_scan_layers(default: bool) -> None:
  """--scan_layers; each benchmark picks the layout it measures by default."""
  flags.DEFINE_bool("scan_layers", default, "Scanned layers: one compiled layer body (the "
                    "engine's default); off: unrolled, which decodes faster on XLA:CPU and GPU "
                    "(ModelConfig.scan_layers).")


def interleaved_best(runs: dict, n: int, repeats: int) -> dict:
  """Best wall time of runs[name](n) per engine, alternating engines each round so a
  slow spell of a shared machine hits both alike."""
  best = {name: float("inf") for name in runs}
  for _ in range(repeats):
    for name, run in runs.items():
      t = time.perf_counter()
      run(n)
      best[name] = min(best[name], time.perf_counter() - t)
  return best
