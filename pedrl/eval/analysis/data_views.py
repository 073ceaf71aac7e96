"""The data views: paper 003's table 1 and fig. 3, paper 000's fig. 3.

003 table 1: the problems of the training and test splits by source (BigMath's
`source` field), with their count and mean pre-dialogue solve rate (%); the
split is the jobs' own (pedrl.env.problems_path.split, the paper's filter first if
set), so the table describes what training and evaluation run on.

003 fig. 3: the problems by pre-dialogue solve-rate bucket (1-10%, 10-20%, …
60%, edges in `buckets`; a rate on an edge falls in the higher bucket, 1.0 in
the last). The rate is the file's `llama8b_solve_rate` (Llama-3.1-8B, 64
samples, as BigMath annotates it) or, given an evaluation workdir, the
student's measured pre-dialogue rate per problem (the mean over its records).

000 fig. 3: the rollouts-per-problem sweep (G = 2 … 8 on 100 training
problems; `experiments/uco.py:rollouts=G`). From each run's metrics.jsonl: the
step's mean reward and the students' post-dialogue solve rate (`reward/r_sol`,
or the mean r_sol of the step's dialogues in dialogues.jsonl) against the step;
the step's wall time (the sum of its seconds/… entries: rollout, rewards,
update) and the run's cumulative hours; and, given an
evaluation workdir per run, its Δ solve rate, leak rate and Ped-RM with their
intervals against G, the panels of the paper's figure.
"""
import collections
from collections.abc import Iterable, Sequence
import dataclasses
import json
import math
import os
import types
import typing

import numpy as np

from pedrl import figures, files
from pedrl.env import dialogue as dialogue_lib, problems as problems_lib
from pedrl.eval.analysis import AnalysisError
from pedrl.eval.analysis import report
from pedrl.eval.analysis.report import markdown
from pedrl.eval.analysis.responses import parse_runs
# Re-exported: defined there, importable without JAX.
from pedrl.eval.settings import BUCKETS, ViewSettings

if typing.TYPE_CHECKING:  # Annotations only: pyplot loads when a figure is drawn.
  import matplotlib.axes
  import matplotlib.figure



# -- Paper 003 -----------------------------------------------------------------------------

def source_name(source: str) -> str:
  return (source or "unknown")[:1].upper() + (source or "unknown")[1:]


def by_source(problems: Iterable[problems_lib.Problem]) -> list:
  """[(source, count, mean solve rate or None)], the largest source first."""
  groups = collections.defaultdict(list)
  for p in problems:
    groups[source_name(p.source)].append(p.solve_rate)
  rows = [(s, len(v), float(np.mean([x for x in v if x is not None]))
           if any(x is not None for x in v) else None) for s, v in groups.items()]
  return sorted(rows, key=lambda r: (-r[1], r[0]))


def split_problems(v: ViewSettings
    ) -> tuple[list[problems_lib.Problem], list[problems_lib.Problem]]:
  """(train, test): the released splits as given (views.test_path), or the file split as
  the jobs split a pool (views.split_seed)."""
  if v.test_path:
    try:
      return (problems_lib.load_published_train(v.problems_path)[0],
              problems_lib.load_published(v.test_path, v.n_test)[0])
    except problems_lib.DataError as e:
      raise AnalysisError(str(e)) from None
  rows, report = problems_lib.load_bigmath(v.problems_path)
  if v.filter:
    rows = problems_lib.paper_filter(rows)
  if not rows:
    raise AnalysisError(f"{v.problems_path}: no problems ({report.summary()}, filter={v.filter})")
  try:
    return problems_lib.split(rows, v.n_train, v.n_test, v.split_seed)
  except problems_lib.DataError as e:
    raise AnalysisError(f"{v.problems_path}: {e} (views.n_test={v.n_test})") from None


def dataset_table(train: Sequence[problems_lib.Problem],
                  test: Sequence[problems_lib.Problem]) -> str:
  """Paper 003 table 1's layout: train and test side by side, a row per source."""
  a, b = by_source(train), by_source(test)
  rate = lambda r: "–" if r is None else f"{100 * r:.2f}"
  rows = []
  for i in range(max(len(a), len(b))):
    left = [a[i][0], a[i][1], rate(a[i][2])] if i < len(a) else ["", "", ""]
    right = [b[i][0], b[i][1], rate(b[i][2])] if i < len(b) else ["", "", ""]
    rows.append(left + right)
  rows.append(["Total", len(train), rate(_mean_rate(train)), "Total", len(test),
               rate(_mean_rate(test))])
  head = ["Dataset", "Samples", "Solve Rate (%)"]
  return ("Training set (left), test set (right)\n\n" + markdown(head + head, rows))


def _mean_rate(problems):
  rates = [p.solve_rate for p in problems if p.solve_rate is not None]
  return float(np.mean(rates)) if rates else None


def measured_rates(workdir: str) -> dict:
  """{problem_id: mean measured pre-dialogue solve rate} of an evaluation workdir."""
  from pedrl.eval import metrics, records as records_lib
  path = os.path.join(workdir, "eval_dialogues.jsonl")
  if not os.path.exists(path):
    raise AnalysisError(f"{workdir}: no eval_dialogues.jsonl (a finished evaluation)")
  rates = metrics.per_problem(records_lib.load(path), lambda r: r.pre_solve_rate)
  if not rates:
    raise AnalysisError(f"{path}: no pre-dialogue solve rates (solve.pre_dialogue was off)")
  return rates


def bucket_counts(rates: Iterable[float], edges: Sequence[float]) -> collections.OrderedDict:
  """{label: count} over [e_i, e_i+1) buckets (the last closed), with below/above ones
  only when some rate falls there."""
  out = collections.OrderedDict()
  rates = np.asarray(rates, float)
  if (rates < edges[0]).any():
    out[f"<{100 * edges[0]:g}%"] = int((rates < edges[0]).sum())
  for i, (lo, hi) in enumerate(zip(edges, edges[1:])):
    last = i == len(edges) - 2
    inside = (rates >= lo) & ((rates <= hi) if last else (rates < hi))
    out[f"{100 * lo:g}-{100 * hi:g}%"] = int(inside.sum())
  if (rates > edges[-1]).any():
    out[f">{100 * edges[-1]:g}%"] = int((rates > edges[-1]).sum())
  return out


def solve_rate_figure(plt: types.ModuleType, sets: dict, edges: Sequence[float], what: str,
                      footer: str) -> "matplotlib.figure.Figure":
  """Fig. 3: problems per solve-rate bucket, one bar group per set (train, test)."""
  fig, ax = plt.subplots(figsize=(7.5, 3.6), layout="constrained")
  counts = {name: bucket_counts(r, edges) for name, r in sets.items() if len(r)}
  labels = list(bucket_counts([x for r in sets.values() for x in r], edges))  # In rate order.
  width = 0.8 / max(len(counts), 1)
  for j, (name, c) in enumerate(counts.items()):
    n = sum(c.values())
    pos = np.arange(len(labels)) + (j - (len(counts) - 1) / 2) * width
    share = [100 * c.get(k, 0) / n for k in labels]
    ax.bar(pos, share, width, label=f"{name} ({n} problems)", alpha=0.8)
    for x, s, k in zip(pos, share, labels):
      ax.text(x, s, str(c.get(k, 0)), ha="center", va="bottom", fontsize=6)
  ax.set_xticks(range(len(labels)), labels, fontsize=7)
  ax.set_xlabel(f"pre-dialogue solve rate ({what})", fontsize=8)
  report.finish_bars(fig, ax, footer, "Problem difficulty", "% of problems (bar labels: counts)")
  return fig


# -- Paper 000 -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class SweepRun:
  group_size: int
  steps: list
  reward: list  # reward/total per step.
  solve: list  # The students' post-dialogue solve rate per step, where recorded.
  seconds: list  # Wall seconds per step (sum of seconds/...).
  evaluation: dict  # metrics.json of its evaluation, or {}.


SOLVE_KEYS = ("reward/r_sol",)  # A run whose reward has r_sol logs it; else dialogues.jsonl.


def read_sweep(v: ViewSettings) -> list:
  """The sweep's runs in G order; AnalysisError naming a run without steps."""
  evals = {_g(k, "views.sweep_evals"): w
           for k, w in parse_runs(v.sweep_evals, "views.sweep_evals").items()}
  out = []
  for g, workdir in sorted((_g(k, "views.sweep"), w)
                           for k, w in parse_runs(v.sweep, "views.sweep").items()):
    path = os.path.join(workdir, "metrics.jsonl")
    if not os.path.exists(path):
      raise AnalysisError(f"views.sweep: {path} does not exist (a training workdir)")
    with open(path) as f:
      rows = [json.loads(line) for line in f if line.strip()]
    rows = sorted((r for r in rows if "step" in r), key=lambda r: r["step"])
    if not rows:
      raise AnalysisError(f"views.sweep: {path} has no steps")
    steps = [r["step"] for r in rows]
    solve_key = next((k for k in SOLVE_KEYS if k in rows[0]), None)
    solve = [r.get(solve_key, math.nan) for r in rows] if solve_key else _step_solve_rates(
        os.path.join(workdir, "dialogues.jsonl"), steps)
    evaluation = {}
    if g in evals:
      with open(os.path.join(evals[g], "metrics.json")) as f:
        evaluation = json.load(f)
    out.append(SweepRun(
        g, steps, [r.get("reward/total", math.nan) for r in rows], solve,
        [sum(x for k, x in r.items() if k.startswith("seconds/") and isinstance(x, (int, float)))
         for r in rows], evaluation))
  return out


def _g(name: str, flag: str) -> int:
  if not name.isdigit():
    raise AnalysisError(f"--config.{flag}: {name!r} is not a group size G (2, 4, …)")
  return int(name)


def _step_solve_rates(path: str, steps) -> list:
  """Per step, the mean post-dialogue solve rate (r_sol) of the dialogues a training run
  kept in dialogues.jsonl; [] without the file or any r_sol."""
  by_step = collections.defaultdict(list)
  for row in files.read_rows(path, dialogue_lib.RecordError):
    if row.get("r_sol") is not None and row.get("step") is not None:
      by_step[row["step"]].append(row["r_sol"])
  if not by_step:
    return []
  return [float(np.mean(by_step[s])) if by_step[s] else math.nan for s in steps]


EVAL_PANELS = (("delta_solve_rate", "Δ solve rate"), ("leak_rate", "leak rate"),
               ("pedrm_micro", "Ped-RM micro"), ("pedrm_macro", "Ped-RM macro"))


def sweep_figure(plt: types.ModuleType, runs: list, footer: str) -> "matplotlib.figure.Figure":
  """000 fig. 3: per step reward, solve rate and wall time per G; hours and, with
  evaluations, the table metrics against G."""
  evaluated = [r for r in runs if r.evaluation]
  panels = 3 + (1 if any(r.solve for r in runs) else 0) + (len(EVAL_PANELS) if evaluated else 0)
  cols = min(panels, 4)
  fig, axes = plt.subplots(math.ceil(panels / cols), cols, figsize=(3.4 * cols, 2.9 *
                                                                    math.ceil(panels / cols)),
                           layout="constrained", squeeze=False)
  axes = list(axes.flat)
  for ax in axes[panels:]:
    fig.delaxes(ax)
  fig.suptitle("Rollouts per problem (G): training signal, cost and results")
  color = figures.colors(plt, [r.group_size for r in runs])
  i = 0
  per_step = [("reward", "mean reward per step"), ("seconds", "wall seconds per step")]
  if any(r.solve for r in runs):
    per_step.insert(1, ("solve", "post-dialogue solve rate per step"))
  for name, title in per_step:
    ax = axes[i]
    i += 1
    for r in runs:
      if getattr(r, name):
        ax.plot(r.steps, getattr(r, name), marker="o", ms=3, color=color[r.group_size],
                label=f"G={r.group_size}")
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True, min_n_ticks=1))
    figures.style_panel(ax, title, xlabel="step")
  axes[0].legend(fontsize=7, frameon=False)
  ax = axes[i]
  i += 1
  gs = [r.group_size for r in runs]
  hours = [sum(r.seconds) / 3600 for r in runs]
  ax.bar(range(len(gs)), hours, color=[color[g] for g in gs])
  for x, h in enumerate(hours):
    ax.text(x, h, f"{h:.2g} h", ha="center", va="bottom", fontsize=7)
  ax.set_ylim(0, max(hours) * 1.15 or 1)
  ax.set_xticks(range(len(gs)), [f"G={g}" for g in gs], fontsize=7)
  figures.style_panel(ax, "training time (sum of step seconds)", grid="y")
  for key, title in EVAL_PANELS if evaluated else ():
    ax = axes[i]
    i += 1
    for r in evaluated:
      value, ci = r.evaluation.get(key), r.evaluation.get(f"{key}_ci")
      if value is None:
        continue
      err = figures.whiskers(value, *ci) if ci and None not in ci else None
      ax.errorbar(r.group_size, value, yerr=err, fmt="o", color=color[r.group_size], capsize=3)
    ax.plot([r.group_size for r in evaluated if r.evaluation.get(key) is not None],
            [r.evaluation[key] for r in evaluated if r.evaluation.get(key) is not None],
            color="0.5", lw=0.8)
    figures.style_panel(ax, f"{title} (evaluation)", xlabel="G (rollouts per problem)")
  report.add_footer(fig, footer)
  return fig


def sweep_table(runs: list) -> str:
  head = ["G", "Steps", "Hours", "Final reward"] + [t for _, t in EVAL_PANELS]
  rows = []
  for r in runs:
    ev = [("–" if r.evaluation.get(k) is None else f"{r.evaluation[k]:.3f}")
          for k, _ in EVAL_PANELS]
    rows.append([r.group_size, len(r.steps), f"{sum(r.seconds) / 3600:.3f}",
                 f"{r.reward[-1]:.3f}", *ev])
  return markdown(head, rows)
