"""Where one call's time goes: its XLA ops, from a jax.profiler trace.

`trace(fn)` runs `fn` once under the profiler and sums, per kernel and per kind of op
(matmul, attention, elementwise fusion, reduction, copy, ...), the time of every event
XLA tags with the HLO op it runs (the `hlo_op` stat): on a GPU the device's kernels and
transfers, on a CPU the thunks on XLA's host threads. Ops that XLA compiled to one
kernel (the same fusion in each of a model's layers) are summed together. `busy_s`, the
union of those events over time (over all devices, on a mesh), set against the call's
wall time says how long the device sat idle between them (launch gaps, host work); the
table says which kernels to make faster.
"""
import dataclasses
from collections.abc import Callable, Iterable
import glob
import os
import re
import shutil
import tempfile
import time

from absl import flags
import jax

# First match wins; tested on the op name and the kernel's name together (a cuBLAS
# kernel runs a `custom-call`, cuDNN's attention a `custom-call` or `fusion`).
KINDS = (
    ("collective", r"all-reduce|all-gather|reduce-scatter|all-to-all|collective-permute|nccl"),
    ("attention", r"cudnn|fmha|flash|sdpa"),
    ("matmul", r"gemm|\bdot|cublas|nvjet|xmma|cutlass|matmul|wgmma"),
    ("copy", r"copy|memcpy|memset|dynamic.update.slice|transpose|concatenate"),
    ("sort", r"sort|top.?k"),
    ("reduce", r"reduce|softmax"),
    ("fusion", r"fusion|loop|elementwise|wrapped"),
)
_KINDS = tuple((name, re.compile(pattern, re.I)) for name, pattern in KINDS)


def kind(op: str, kernel: str = "") -> str:
  """The kind of an XLA op from its HLO name and its kernel's name; "other" if none fits."""
  text = f"{op} {kernel}"
  return next((name for name, pattern in _KINDS if pattern.search(text)), "other")


def busy_seconds(intervals: Iterable[tuple[float, float]]) -> float:
  """Length of the union of (start_ns, duration_ns) intervals, in seconds."""
  total, end = 0, None
  for start, duration in sorted(intervals):
    stop = start + duration
    if end is None or start > end:
      total += duration
      end = stop
    elif stop > end:
      total += stop - end
      end = stop
  return total / 1e9


@dataclasses.dataclass(frozen=True)
class OpTime:
  """One kernel's events: summed seconds, how many ran, and the HLO ops that ran it
  (their count, and the first one's name)."""
  kernel: str
  kind: str
  seconds: float
  runs: int
  ops: int
  op: str


@dataclasses.dataclass(frozen=True)
class Profile:
  """One traced call: wall seconds, seconds with some op running, and ops by time."""
  wall_s: float
  busy_s: float
  ops: tuple[OpTime, ...]  # Per kernel, longest first.
  where: str  # The profiler planes the ops came from ("/device:GPU:0", "/host:CPU").

  @property
  def op_seconds(self) -> float:
    return sum(o.seconds for o in self.ops)

  def kinds(self) -> dict[str, float]:
    """Seconds per kind, largest first."""
    out = {}
    for o in self.ops:
      out[o.kind] = out.get(o.kind, 0.0) + o.seconds
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))

  def table(self, top: int = 20) -> str:
    total = self.op_seconds or 1.0
    runs = sum(o.runs for o in self.ops)
    lines = [f"traced call {self.wall_s * 1e3:.1f} ms wall; ops busy {self.busy_s * 1e3:.1f} ms "
             f"({self.busy_s / self.wall_s:.0%} of wall) on {self.where}; "
             f"{self.op_seconds * 1e3:.1f} ms of op time in {runs} runs",
             "kinds: " + ", ".join(f"{k} {s / total:.0%}" for k, s in self.kinds().items()),
             f"{'kind':<11}{'ms':>9}{'share':>7}{'runs':>7}{'us/run':>9}{'ops':>5}  kernel"]
    for o in self.ops[:top]:
      lines.append(f"{o.kind:<11}{o.seconds * 1e3:>9.2f}{o.seconds / total:>7.1%}{o.runs:>7}"
                   f"{o.seconds / o.runs * 1e6:>9.2f}{o.ops:>5}  {o.kernel[:90]}")
    return "\n".join(lines)


def _op_events(data):
  """(op, kernel, start_ns, duration_ns) of every event tagged with an HLO op, and the
  planes they came from: the device planes' (GPU kernels) when there are any, else the
  host's (CPU thunks)."""
  planes = list(data.planes)
  devices = [p for p in planes if p.name.startswith("/device:")]
  events, where = [], set()
  for plane in devices or [p for p in planes if p.name.startswith("/host:")]:
    lines = list(plane.lines)
    # A GPU plane's kernels are on its stream lines; others there summarize them again.
    streams = [line for line in lines if line.name.startswith("Stream")]
    for line in streams or lines:
      tagged = []
      for e in line.events:
        op = dict(e.stats).get("hlo_op")
        if op is None and not devices:
          continue  # Host bookkeeping (Python, the runtime), not XLA's work.
        tagged.append((str(op or e.name), e.name, int(e.start_ns), int(e.duration_ns)))
      # A stream runs kernels one after another (some start before the last ends, with
      # programmatic dependent launch); a host thread's ops nest.
      events += tagged if devices else leaves(tagged)
      where.update([plane.name] if tagged else [])
  return events, ", ".join(sorted(where)) or "nowhere"


def leaves(events: Iterable[tuple]) -> list[tuple]:
  """The events of one host timeline that hold no other: a CPU `while` or `conditional`
  op spans the ops of its body, which would count twice."""
  events = sorted(events, key=lambda e: (e[2], -e[3]))
  out = []
  for i, e in enumerate(events):
    nxt = events[i + 1] if i + 1 < len(events) else None
    if nxt is None or nxt[3] == 0 or nxt[2] + nxt[3] > e[2] + e[3]:
      out.append(e)  # The next event is empty or ends after this one: not inside it.
  return out


def read(path: str, wall_s: float) -> Profile:
  """The Profile of a saved trace (an .xplane.pb) of a call that took `wall_s`."""
  events, where = _op_events(jax.profiler.ProfileData.from_file(path))
  by_kernel = {}
  for op, kernel, _, duration in events:
    seconds, runs, ops = by_kernel.get(kernel, (0.0, 0, {}))
    ops.setdefault(op, None)
    by_kernel[kernel] = (seconds + duration / 1e9, runs + 1, ops)
  ops = sorted((OpTime(k, kind(next(iter(o)), k), s, n, len(o), next(iter(o)))
                for k, (s, n, o) in by_kernel.items()), key=lambda o: -o.seconds)
  busy = busy_seconds((start, duration) for _, _, start, duration in events)
  return Profile(wall_s, busy, tuple(ops), where)


def trace(fn: Callable[[], object], keep: str | None = None) -> Profile:
  """Runs fn() once under jax.profiler (compile it first: a first call's compiling would
  be traced too) and returns where its time went; `keep`: a path to save the trace to
  (an .xplane.pb, for TensorBoard's or XProf's viewers)."""
  with tempfile.TemporaryDirectory() as folder:
    with jax.profiler.trace(folder):
      start = time.perf_counter()
      jax.block_until_ready(fn())
      wall = time.perf_counter() - start
    path, = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
    if keep:
      os.makedirs(os.path.dirname(os.path.abspath(keep)), exist_ok=True)
      shutil.copyfile(path, keep)
    return read(path, wall)


def define_flags() -> None:
  """--profile_top and --trace_dir, for the benchmarks that trace a call after timing it."""
  flags.DEFINE_integer("profile_top", 0, "After timing, trace one more call with jax.profiler "
                       "and print its N longest XLA ops (0: no trace).", lower_bound=0)
  flags.DEFINE_string("trace_dir", "", "With --profile_top: save each traced call there as "
                      "NAME.xplane.pb (TensorBoard's or XProf's viewers read it).")


def show(fn: Callable[[], object], name: str, top: int, trace_dir: str = "") -> Profile | None:
  """Traces fn() and prints its op table under `name` when top > 0."""
  if top <= 0:
    return None
  keep = os.path.join(trace_dir, f"{name}.xplane.pb") if trace_dir else None
  p = trace(fn, keep)
  print(f"profile {name}:\n{p.table(top)}", flush=True)
  return p
