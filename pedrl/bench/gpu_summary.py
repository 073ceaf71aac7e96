r"""The table of launch/gpu_bench.sh's figures against their goals, from its results file.

  python -m pedrl.bench.gpu_summary gpu_bench_results/gpu_bench_DATE.txt
  python -m pedrl.bench.gpu_summary RESULTS.txt > docs/includes/gpu_bench.md

The script runs it at its end (the table goes to the results file and beside it as
gpu_summary_DATE.md); docs/performance.md includes docs/includes/gpu_bench.md, the
table of the run recorded there. Each figure is the `key=value` line its benchmark
ends with, read from the step that ran it; a step that did not run, failed or timed
out before printing it says so in the table instead of a number.
"""
import dataclasses
import operator
import re
import sys

from pedrl import cli

@dataclasses.dataclass(frozen=True)
class Goal:
  figure: str
  step: str
  key: str
  goal: float | None  # None: measured, no goal.
  better: str  # ">=" or "<=".
  unit: str = ""  # "%": the value is a fraction shown as a percentage; else "s", "x".

  def show(self, value: float | None, digits: int = 2) -> str:
    if value is None:
      return "n/a"
    return f"{value:.0%}" if self.unit == "%" else f"{value:.{digits}f}{self.unit}"

  def met(self, value: float) -> str:  # "yes", "no", or "" without a goal.
    if self.goal is None:
      return ""
    return "yes" if {">=": operator.ge, "<=": operator.le}[self.better](value, self.goal) else "no"

  def wanted(self) -> str:
    if self.goal is None:
      return "—"
    return f"{self.better.replace('>=', '≥').replace('<=', '≤')} {self.show(self.goal, 0)}"


# The goals on one H100 (docs/performance.md); the bandwidth and MFU figures are
# fractions of the device's own limits, so they read alike on an H200.
GOALS = (
    Goal("7B bf16 decode, batch 1, HBM bandwidth", "sampling", "decode_hbm_utilization_batch1", 0.80, ">=", "%"),
    Goal("7B bf16 decode, batch 16, HBM bandwidth", "sampling", "decode_hbm_utilization_batch16", 0.75, ">=", "%"),
    Goal("the same, one matmul for q, k and v, batch 1", "sampling_fused_qkv", "decode_hbm_utilization_batch1", None, ">=", "%"),
    Goal("the same, one matmul for q, k and v, batch 16", "sampling_fused_qkv", "decode_hbm_utilization_batch16", None, ">=", "%"),
    Goal("the same, the Pallas decode-attention kernel, batch 1", "sampling_pallas", "decode_hbm_utilization_batch1", None, ">=", "%"),
    Goal("the same, the Pallas decode-attention kernel, batch 16", "sampling_pallas", "decode_hbm_utilization_batch16", None, ">=", "%"),
    Goal("rollout warm-up, cold caches (bench shape)", "rollout_cold", "rollout_warmup_s", 10.0, "<=", " s"),
    Goal("rollout warm-up, warm caches (bench shape)", "rollout_warm", "rollout_warmup_s", 2.0, "<=", " s"),
    Goal("rollout speed against transformers_kv, bench shape", "rollout_warm", "rollout_speedup_vs_transformers_kv", 5.0, ">=", "×"),
    Goal("the same warm-ups, scanned layers and the quickest compile options, cold", "rollout_cold_quick", "rollout_warmup_s", None, "<=", " s"),
    Goal("the same, warm", "rollout_warm_quick", "rollout_warmup_s", None, "<=", " s"),
    Goal("their rollout speed against transformers_kv", "rollout_warm_quick", "rollout_speedup_vs_transformers_kv", None, ">=", "×"),
    Goal("tiny rollout job, first run from empty caches", "job_warm", "job_cold_s", None, "<=", " s"),
    Goal("pedrl.tools.warm filling the caches for it", "job_warm", "warm_tool_s", None, "<=", " s"),
    Goal("the job after tools.warm", "job_warm", "job_after_warm_s", None, "<=", " s"),
    Goal("rollout speed against transformers_kv, 7B + 8B, 4 layers", "rollout_7b+8b", "rollout_speedup_vs_transformers_kv", 5.0, ">=", "×"),
    Goal("GRPO update, Qwen2.5-1.5B, MFU", "train_step_1.5b", "train_step_mfu", 0.40, ">=", "%"),
)

_STEP_START = re.compile(r"^=== (\S+) \(limit (\d+)s\): ")
_STEP_END = re.compile(r"^=== (\S+): (.+) in (\d+) s$")
_FIGURE = re.compile(r"^([a-z_0-9]+)=([-+0-9.eE]+|n/a)$")
_PYTEST = re.compile(r"^=*\s*(.*\b(passed|failed)\b.* in [0-9.]+s.*?)\s*=*$")


@dataclasses.dataclass
class Step:
  name: str
  limit: int
  verdict: str = "did not finish"
  seconds: int | None = None
  figures: dict = dataclasses.field(default_factory=dict)
  tests: str | None = None


@dataclasses.dataclass
class Results:
  header: list
  steps: dict

  @classmethod
  def read(cls, text: str) -> "Results":
    header, steps, current = [], {}, None
    for line in text.splitlines():
      if m := _STEP_START.match(line):
        current = steps[m[1]] = Step(m[1], int(m[2]))
      elif (m := _STEP_END.match(line)) and m[1] in steps:
        steps[m[1]].verdict, steps[m[1]].seconds, current = m[2], int(m[3]), None
      elif line.startswith("=== summary"):
        break
      elif current is None:
        if not steps and line.strip():
          header.append(line.strip())
      elif m := _FIGURE.match(line.strip()):
        current.figures[m[1]] = None if m[2] == "n/a" else float(m[2])
      elif current.name == "tests" and (m := _PYTEST.match(line.strip())):
        current.tests = m[1]
    return cls(header, steps)


def table(results: Results) -> str:
  """Markdown: the run's header lines, then figure | goal | measured | met | step."""
  lines = [f"    {h}" for h in results.header] + [""]
  lines += ["| figure | goal | measured | met | step |", "|---|---|---|---|---|"]
  for g in GOALS:
    step = results.steps.get(g.step)
    if step is None:
      measured, met, where = "not run", "", g.step
    else:
      where = f"{g.step} ({step.verdict}, {step.seconds if step.seconds is not None else '?'} s)"
      if g.key in step.figures:
        value = step.figures[g.key]
        measured, met = f"**{g.show(value)}**", "" if value is None else g.met(value)
      else:
        measured, met = "no figure", "no" if g.goal is not None else ""
    lines.append(f"| {g.figure} | {g.wanted()} | {measured} | {met} | {where} |")
  tests = results.steps.get("tests")
  if tests is not None:
    lines.append(f"| GPU test subset | passes | {tests.tests or 'no pytest summary'} | "
                 f"{'yes' if tests.verdict == 'ok' else 'no'} | tests ({tests.verdict}, "
                 f"{tests.seconds if tests.seconds is not None else '?'} s) |")
  ran = [s for s in results.steps.values() if s.seconds is not None]
  lines += ["", f"Steps: {len(ran)} ran in {sum(s.seconds for s in ran)} s "
            f"({', '.join(f'{s.name} {s.seconds} s' for s in ran)})."]
  return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
  if len(argv) != 2:
    print("usage: python -m pedrl.bench.gpu_summary RESULTS.txt", file=sys.stderr)
    return 2
  try:
    with open(argv[1]) as f:
      text = f.read()
  except OSError as e:
    print(f"error: cannot read the results file {argv[1]}: {e.strerror}", file=sys.stderr)
    return 2
  sys.stdout.write(table(Results.read(text)))
  return 0


if __name__ == "__main__":
  cli.run(main)
