r"""PNG plots of one or more workdirs: training curves, rollout distributions, evaluation bars.

  python -m pedrl.tools.plot /runs/uco                          # /runs/uco/plots/*.png
  python -m pedrl.tools.plot /runs/uco /runs/ped --out=/runs/cmp  # the runs side by side

What each workdir gets depends on its job (run.json, else the files it holds):
  training    its metrics.jsonl, one small panel per quantity, in figures by theme:
              rewards.png (reward/<component> ± reward_std, the judges' accept rate),
              training.png (loss, kl, entropy, lr, grad norm, advantage mean ± std,
              signal/…, and any numeric key no other figure takes), dialogues.png,
              pipeline.png (the reward pipeline's counts) and time.png (seconds/…,
              tokens per second, time since the first step)
  rollout     its dialogues.jsonl, histograms over the dialogues:
              rollout_rewards.png (each reward component, the total, r_ped, r_think)
              and rollout_dialogues.png (turns, tokens, solve rates before and after)
  evaluation  its metrics.json: evaluation.png, a bar per run for each metric with
              its confidence interval
Several workdirs of a kind share the figures, one line, histogram or bar per run (named
by its folder), each run in one colour throughout. A quantity whose positive values span
two decades or more gets a log axis. PNGs go to --out, which several workdirs need (one
workdir's default is WORKDIR/plots); their paths are printed. A workdir with nothing to
plot is an error naming it, and nothing is written.

Needs matplotlib (`pip install "pedrl[plot]"`).
"""
import dataclasses
import json
import math
import os
import sys
import types
from collections.abc import Collection, Sequence

import numpy as np
from absl import app, flags

from pedrl import cli, paths as paths_lib
from pedrl.env import dialogue as dialogue_lib
from pedrl.jobs import metric_log, workdir as workdir_lib
from pedrl.figures import colors as run_colors, pyplot, save_png, style_panel, whiskers

TRAIN, ROLLOUT, EVAL = "training", "rollout", "evaluation"
MANY_POINTS = 30  # Lines with fewer points get markers (a 1-step run is then visible).
DECADES = 2  # A positive quantity whose max/min reaches 10**DECADES gets a log axis.

# Training figures by theme, in this order: (name, predicate, keys shown first, the
# rest following sorted). "training" takes every numeric key no other theme takes, so a
# new metric is never lost.
THEMES = (
    ("rewards", lambda k: k.startswith(("reward/", "judges/")), ("reward/total",)),
    ("training", None,
     ("loss", "kl", "entropy", "lr", "grad_norm", "clip_fraction", "advantage/mean",
      "sampler_trainer_logp_diff", "first_pass_ratio", "skipped_updates")),
    ("dialogues", lambda k: k in ("mean_turns", "mean_tutor_tokens", "dropped"), ()),
    ("pipeline", lambda k: k.startswith("pipeline/"), ()),
    ("time", lambda k: k == "time" or k.startswith("seconds/") or k == "tokens_per_second",
     ("time",)),
)
NOT_PLOTTED = ("step",)


class PlotError(ValueError):
  """A workdir with nothing to plot (one line, naming it)."""


@dataclasses.dataclass
class Run:
  workdir: str
  kind: str  # TRAIN, ROLLOUT or EVAL.
  name: str = ""  # The legend's label: the folder's name.
  rows: list = dataclasses.field(default_factory=list)  # metrics.jsonl (training).
  dialogues: list = dataclasses.field(default_factory=list)  # dialogues.jsonl (rollout).
  metrics: dict = dataclasses.field(default_factory=dict)  # metrics.json (evaluation).


# -- Reading workdirs ----------------------------------------------------------------------------

def _rows(path: str, parse=lambda row: row, what: str = "JSON") -> list:
  """`parse` of each line of a JSONL file (none if absent). Read only: the last line of
  a file a job is writing may be half there, and is skipped, not cut off (as the jobs'
  `read_rows` would)."""
  if not os.path.exists(path):
    return []
  with open(path, "rb") as f:
    lines = f.read().split(b"\n")[:-1]  # The piece after the last newline is unfinished.
  out = []
  for n, line in enumerate(lines, 1):
    if line.strip():
      try:
        out.append(parse(json.loads(line.decode("utf-8"))))
      except (UnicodeDecodeError, ValueError, TypeError, KeyError) as e:
        raise PlotError(f"{path}, line {n}: not {what} ({e})") from None
  return out


def kind(workdir: str) -> str:
  """TRAIN, ROLLOUT or EVAL; PlotError for a workdir that is none of them (yet)."""
  if not os.path.isdir(workdir):
    raise PlotError(f"{workdir}: no such directory")
  has = lambda name: os.path.exists(os.path.join(workdir, name))
  job = workdir_lib.recorded_job(workdir)
  if job in ("train", "sft", "mdpo"):  # GRPO's, and the offline baselines' (same loop).
    return TRAIN
  if job == "rollout":
    return ROLLOUT
  if job is not None or has("metrics.json") or has("shards"):
    return EVAL
  if has("metrics.jsonl"):
    return TRAIN
  raise PlotError(f"{workdir}: no metrics.jsonl, dialogues.jsonl or metrics.json: not a pedrl "
                  "workdir, or its run has not finished a step yet")


def load(workdir: str) -> Run:
  """The workdir's records for its kind; PlotError when there is nothing to plot."""
  run = Run(workdir, kind(workdir))
  if run.kind == TRAIN:
    path = os.path.join(workdir, "metrics.jsonl")
    run.rows = sorted((metric_log.renamed(r) for r in _rows(path)
                       if isinstance(r, dict) and "step" in r), key=lambda r: r["step"])
    if not run.rows:
      raise PlotError(f"{path}: no steps yet" if os.path.exists(path) else
                      f"{workdir}: a training workdir without metrics.jsonl (no step finished)")
    if not panels([run]):
      raise PlotError(f"{path}: no numeric metric in its rows")
  elif run.kind == ROLLOUT:
    path = os.path.join(workdir, "dialogues.jsonl")
    run.dialogues = _rows(path, dialogue_lib.Dialogue.from_dict, "a dialogue record")
    if not run.dialogues:
      raise PlotError(f"{workdir}: a rollout workdir without dialogues yet ({path})")
  else:
    path = os.path.join(workdir, "metrics.json")
    if not os.path.exists(path):
      raise PlotError(f"{workdir}: an evaluation without metrics.json yet, so no metric to plot "
                      "(the last shard writes it; `python -m pedrl.tools.report "
                      f"{workdir}` merges finished shards)")
    try:
      with open(path) as f:
        run.metrics = json.load(f)
    except ValueError as e:
      raise PlotError(f"{path}: not JSON ({e})") from None
    if not eval_metrics(run.metrics):
      raise PlotError(f"{path}: no numeric metric to plot")
  return run


def _names(workdirs) -> list[str]:
  """Folder names, or whole paths where two runs share a folder name."""
  names = [os.path.basename(os.path.normpath(os.path.abspath(w))) for w in workdirs]
  return [os.path.abspath(w) if names.count(n) > 1 else n for w, n in zip(workdirs, names)]


# -- Training curves -----------------------------------------------------------------------------

def _number(value) -> float | None:
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    return None
  return None if math.isnan(value) or math.isinf(value) else float(value)


def series(rows: list, key: str) -> tuple[list, list]:
  """(steps, values) of `key` where a row has a finite number; `time` as seconds since
  the run's first row."""
  if key == "time":
    points = [(r["step"], t) for r in rows if (t := _number(r.get("time"))) is not None]
    return ([s for s, _ in points], [t - points[0][1] for _, t in points]) if points else ([], [])
  points = [(r["step"], v) for r in rows if (v := _number(r.get(key))) is not None]
  return [s for s, _ in points], [v for _, v in points]


def std_key(key: str, keys: Collection[str]) -> str | None:
  """The key holding `key`'s spread, if the rows have one: reward/X → reward_std/X,
  P/mean → P/std."""
  if key.startswith("reward/"):
    std = "reward_std/" + key[len("reward/"):]
  elif key.endswith("/mean"):
    std = key[:-len("/mean")] + "/std"
  else:
    return None
  return std if std in keys else None


def panels(runs: list) -> dict:
  """{theme: [key, …]}: the numeric keys of the runs' rows, each in one theme, those
  drawn as another key's band left out."""
  keys = {k for run in runs for r in run.rows for k, v in r.items()
          if k not in NOT_PLOTTED and _number(v) is not None}
  keys -= {std_key(k, keys) for k in keys}
  taken = {theme: {k for k in keys if wanted(k)} for theme, wanted, _ in THEMES if wanted}
  rest = keys.difference(*taken.values())
  out = {}
  for theme, _, first in THEMES:
    if mine := taken.get(theme, rest):
      out[theme] = [k for k in first if k in mine] + sorted(
          mine - set(first), key=lambda k: (k.startswith("judges/"), k))
  return out


def log_scale(values: Sequence[float]) -> bool:
  """Positive values spanning DECADES decades or more."""
  values = np.asarray(values, float)
  return bool(values.size and values.min() > 0 and values.max() / values.min() >= 10**DECADES)


def _grid(plt, n: int, title: str):
  cols = min(n, 4)
  rows = math.ceil(n / cols)
  fig, axes = plt.subplots(rows, cols, figsize=(3.3 * cols + 0.5, 2.5 * rows + 0.9),
                           squeeze=False, layout="constrained")
  for ax in axes.flat[n:]:
    fig.delaxes(ax)
  fig.suptitle(title)
  return fig, list(axes.flat[:n])


def _legend(fig, runs, colors) -> None:
  """One legend per figure, under it: the runs' names in their colours."""
  from matplotlib.lines import Line2D
  handles = [Line2D([], [], color=colors[r.workdir], lw=2) for r in runs]
  fig.legend(handles, [r.name for r in runs], loc="outside lower center",
             ncols=min(len(runs), 4), fontsize=8, frameon=False)


def _curve(ax, run, key, color, keys):
  steps, values = series(run.rows, key)
  if not steps:
    return []
  marker = "o" if len(steps) < MANY_POINTS else None
  ax.plot(steps, values, color=color, marker=marker, markersize=3, lw=1.2)
  std = std_key(key, keys)
  if std:
    spread = dict(zip(*series(run.rows, std)))
    band = [(s, v, spread[s]) for s, v in zip(steps, values) if s in spread]
    if band:
      s, v, sd = map(np.asarray, zip(*band))
      ax.fill_between(s, v - sd, v + sd, color=color, alpha=0.2, lw=0)
  return values


def training_figures(plt: types.ModuleType, runs: list, colors: dict) -> dict:
  keys = {k for run in runs for r in run.rows for k in r}
  out = {}
  for theme, names in panels(runs).items():
    fig, axes = _grid(plt, len(names), f"{theme}: " + ", ".join(r.name for r in runs))
    for ax, key in zip(axes, names):
      values = [v for run in runs for v in _curve(ax, run, key, colors[run.workdir], keys)]
      if log_scale(values):
        ax.set_yscale("log")
      # min_n_ticks=1: else with one or two steps the locator falls back to fractions.
      ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True, min_n_ticks=1))
      style_panel(ax, key + (" ± std" if std_key(key, keys) else "") +
                  (" (s since the first step)" if key == "time" else ""), xlabel="step")
    _legend(fig, runs, colors)
    out[theme] = fig
  return out


# -- Rollout distributions -----------------------------------------------------------------------

def distributions(dialogues: list) -> dict:
  """{theme: {quantity: [value per dialogue]}} of a rollout's dialogues."""
  rewards, talk = {}, {}
  for d in dialogues:
    if d.rewards is not None:
      for name, v in {**d.rewards.components, "total": d.rewards.total}.items():
        rewards.setdefault(f"reward/{name}", []).append(v)
    for name in ("r_ped", "r_think"):
      if (v := getattr(d.judgement, name, None)) is not None:
        rewards.setdefault(f"judges/{name}", []).append(v)
    tokens = lambda role: sum(m.num_tokens for m in d.messages if m.role == role)
    talk.setdefault("turns", []).append(d.turns)
    talk.setdefault("tutor tokens", []).append(tokens(dialogue_lib.TUTOR))
    talk.setdefault("student tokens", []).append(tokens(dialogue_lib.STUDENT))
    for name, v in (("pre-dialogue solve rate", d.pre_solve_rate), ("r_sol (after)", d.r_sol)):
      if v is not None:
        talk.setdefault(name, []).append(v)
  return {"rollout_rewards": rewards, "rollout_dialogues": talk}


TITLES = {"rollout_rewards": "rewards per dialogue", "rollout_dialogues": "dialogues"}


def _bins(values):
  values = np.asarray(values, float)
  if np.all(values == np.round(values)) and 2 <= values.max() - values.min() <= 40:
    return np.arange(values.min() - 0.5, values.max() + 1.5)  # Counts: a bar per integer.
  return np.histogram_bin_edges(values, bins=min(20, max(5, int(np.sqrt(values.size)))))


def rollout_figures(plt: types.ModuleType, runs: list, colors: dict) -> dict:
  per_run = [distributions(r.dialogues) for r in runs]
  out = {}
  for theme in per_run[0]:
    names = list(dict.fromkeys(k for d in per_run for k in d[theme]))
    if not names:
      continue
    fig, axes = _grid(plt, len(names), f"rollout, {TITLES[theme]}: " + ", ".join(
        f"{r.name} ({len(r.dialogues)} dialogues)" for r in runs))
    for ax, name in zip(axes, names):
      bins = _bins([v for d in per_run for v in d[theme].get(name, ())])
      for run, d in zip(runs, per_run):
        if values := d[theme].get(name):
          color = colors[run.workdir]
          ax.hist(values, bins=bins, color=color, alpha=0.45 if len(runs) > 1 else 0.7,
                  edgecolor=color)
          ax.axvline(float(np.mean(values)), color=color, ls="--", lw=1)
      ax.yaxis.set_major_locator(plt.MaxNLocator(integer=True))
      style_panel(ax, f"{name} (dashed: mean)", ylabel="dialogues")
    _legend(fig, runs, colors)
    out[theme] = fig
  return out


# -- Evaluation bars -----------------------------------------------------------------------------

def eval_metrics(m: dict) -> dict:
  """{name: (value, (low, high) or None)} of an evaluation's metrics.json: the metrics
  measured with an interval (a `<name>_ci` beside them; counts and settings have none),
  MathTutorBench's leaderboard metrics as task/metric."""
  out = {}
  for k, v in m.items():
    ci = m.get(f"{k}_ci")
    if _number(v) is not None and isinstance(ci, (list, tuple)):
      whole = len(ci) == 2 and all(_number(x) is not None for x in ci)
      out[k] = (float(v), tuple(ci) if whole else None)
  if isinstance(tasks := m.get("tasks"), dict):
    from pedrl.eval.mathtutorbench_harness import results  # Slow to import: only for its runs.
    for task, metric, _ in results.COLUMNS:
      if (v := _number((tasks.get(task) or {}).get(metric))) is not None:
        out[f"{task}/{metric}"] = (v, None)
  return out


def evaluation_figures(plt: types.ModuleType, runs: list, colors: dict) -> dict:
  per_run = [eval_metrics(r.metrics) for r in runs]
  names = list(dict.fromkeys(k for m in per_run for k in m))
  confidence = _number(runs[0].metrics.get("confidence"))
  interval = f"{confidence:.0%} interval" if confidence else "interval"
  fig, axes = _grid(plt, len(names), f"evaluation (whiskers: {interval}): " +
                    ", ".join(f"{r.name} ({r.metrics.get('n_problems', '?')} problems)"
                              if "n_problems" in r.metrics else r.name for r in runs))
  for ax, name in zip(axes, names):
    ticks = {}
    for i, (run, m) in enumerate(zip(runs, per_run)):
      if name not in m:
        continue
      value, ci = m[name]
      err = whiskers(value, *ci) if ci else None
      # The edge keeps a bar of height 0 visible; the value is its tick label.
      ax.bar(i, value, color=colors[run.workdir], edgecolor=colors[run.workdir], lw=1.5,
             yerr=err, capsize=4, width=0.7)
      ticks[i] = f"{value:.3g}"
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xticks(list(ticks), list(ticks.values()))
    style_panel(ax, name, grid="y")
  _legend(fig, runs, colors)
  return {"evaluation": fig}


# -- Writing -------------------------------------------------------------------------------------

def figures(runs: list) -> dict:
  """{file stem: matplotlib Figure} for the runs (Run objects, see `load`): each kind's
  figures, the runs of a kind together, each run in its own colour in all of them."""
  plt = pyplot()
  colors = run_colors(plt, [r.workdir for r in runs])
  out = {}
  for kind_, draw in ((TRAIN, training_figures), (ROLLOUT, rollout_figures),
                      (EVAL, evaluation_figures)):
    if mine := [r for r in runs if r.kind == kind_]:
      out.update(draw(plt, mine, colors))
  return out


def load_all(workdirs: Sequence[str]) -> list:
  """The runs of `workdirs` (a path or several), named for the legends."""
  workdirs = [workdirs] if isinstance(workdirs, (str, os.PathLike)) else list(workdirs)
  if not workdirs:
    raise PlotError("no workdir given")
  runs = [load(str(w)) for w in workdirs]
  for run, name in zip(runs, _names([r.workdir for r in runs])):
    run.name = name
  return runs


def plot(workdirs: Sequence[str], out: str | None = None) -> list[str]:
  """Writes the PNGs of `workdirs` (a path or several) to `out` (default, for one
  workdir: its plots/); returns their paths. PlotError, before writing anything, when a
  workdir has nothing to plot or several have no `out`."""
  runs = load_all(workdirs)
  if len(runs) > 1 and not out:  # Else the comparison would replace W1's own plots.
    raise PlotError("several workdirs: give --out=DIR for their plots (WORKDIR/plots is "
                    "for one workdir's own)")
  figs = figures(runs)
  if not figs:
    raise PlotError(f"nothing to plot in {', '.join(r.workdir for r in runs)}")
  return save_png(figs, out or os.path.join(runs[0].workdir, "plots"), dpi=110)


def main(argv: list[str]) -> None:
  workdirs = [paths_lib.find(w) for w in argv[1:]]  # Found as config paths are.
  if not workdirs:
    raise app.UsageError("give a workdir, or several and --out: python -m pedrl.tools.plot "
                         "W1 [W2 … --out=DIR]")
  cli.require("pedrl.tools.plot", "matplotlib")
  try:
    paths = plot(workdirs, flags.FLAGS.out)
  except (PlotError, ImportError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  for path in paths:
    print(path)


if __name__ == "__main__":  # Flags only for the command: the functions import cleanly.
  flags.DEFINE_string("out", None, "Folder for the PNGs (default for one workdir: its plots/; "
                      "several need it).")
  cli.run(main)
