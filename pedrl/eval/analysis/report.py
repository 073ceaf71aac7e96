"""The analysis as a researcher reads it: Markdown tables in paper 001's layouts and PNGs.

Tables (WORKDIR/tables/, all of them also in WORKDIR/analysis.md):
  response_statistics.md   tables 3 and 9: words per response, unique words, math content,
                           question rate
  schoenfeld_phases.md     table 10: Explore / General / Verify shares of the thinking
  major_categories.md      table 4: major category shares, by column (conditions or groups)
  top_codes.md             table 11: the ten most frequent codes
  chi_square.md            table 8: χ², df, p and φ / V per comparison, with its n
  shares.md                every share with its interval, and its count
  reliability.md           per labeller and scheme: units, labels, failures by cause, κ
Figures (WORKDIR/figures/):
  response_lengths.png     fig. 2 left: words per response, distributions per condition
  math_content.png         fig. 2 centre: mathematical content, visible and thinking; questions
  schoenfeld_phases.png    fig. 2 right: phase shares of the thinking, Explore enlarged
  categories.png           fig. 3 left: major categories by column
  top_codes.png            fig. 3 centre: the most frequent codes by column
  praise.png               fig. 3 right: praise per condition, paper 001's 5-8% band
Every interval is at the analysis's confidence; every figure's footer says when it was
made, by which labeller and from how many responses.
"""
from collections.abc import Sequence
import datetime
import math
import types
import typing
from typing import Any

import numpy as np

from pedrl import figures
from pedrl.figures import colors as condition_colors, pyplot  # Both read by the analysis job.
from pedrl.eval.analysis import significance, summary as summary_lib
from pedrl.eval.analysis.codebook import SHORT, Codebook
from pedrl.eval.analysis.labelling import PHASES

if typing.TYPE_CHECKING:  # Annotations only: pyplot loads when a figure is drawn.
  import matplotlib.axes
  import matplotlib.figure

PRAISE_BAND = (0.05, 0.08)  # Paper 001 section 4.2: "5-8% represents an effective praise level".


def _pct(x, digits: int = 2) -> str:
  return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.{digits}f}"


def _num(x, digits: int = 2) -> str:
  return "—" if x is None else f"{x:.{digits}f}"


def markdown(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  return "\n".join(lines + ["| " + " | ".join(map(str, r)) + " |" for r in rows])


def _p(p: float) -> str:
  return "<.001" if p < 0.001 else f"{p:.3f}".lstrip("0")


# -- Tables --------------------------------------------------------------------------------

def response_table(stats: dict) -> str:
  """Tables 3 and 9 in one: means per response (math and questions in %)."""
  rows = [[c, _num(s.visible), _num(s.thinking), _num(s.total), _num(s.unique),
           _pct(s.visible_math, 1), _pct(s.thinking_math, 1), _pct(s.question_rate, 1),
           s.responses] for c, s in stats.items()]
  return markdown(["Condition", "Visible", "Think", "Total", "Unique", "Math (vis.) %",
                   "Math (think) %", "Questions %", "Responses"], rows)


def phase_table(shares: dict, result: summary_lib.SchemeResult) -> str:
  """Table 10: phase shares (%) of each condition's labelled thinking units."""
  if not shares:
    return "(no condition has labelled thinking)"
  rows = [[c, *(_pct(s[p].value) for p in PHASES), s[PHASES[0]].n,
           sum(result.causes[c].values())] for c, s in shares.items()]
  return markdown(["Condition", "Explore", "General", "Verify", "Units", "Failures"], rows)


def category_table(result: summary_lib.SchemeResult, cols: Sequence[summary_lib.Column],
                   codebook: Codebook, confidence: float) -> str:
  """Table 4: every major category's share (%) per column."""
  per = {col.name: summary_lib.column_shares(result, col, codebook.categories,
                                             codebook.category_of, confidence)
         for col in cols}
  cell = lambda x: _pct(x) + ("%" if not math.isnan(x) else "")
  rows = [[SHORT.get(k, k), *(cell(per[col.name][k].value) for col in cols)]
          for k in codebook.categories]
  return markdown(["Category", *(col.name for col in cols)], rows)


def codes_table(top: list, cols: Sequence[summary_lib.Column]) -> str:
  """Table 11: the most frequent codes (%) per column."""
  rows = [[code.name, *(_pct(v[col.name].value) for col in cols)] for code, v in top]
  return markdown(["Code", *(col.name for col in cols)], rows)


def chi_square_table(tests: list) -> str:
  """Table 8: χ², df, p, φ or V (n.s. at p >= .05, as the paper writes), with n and sides."""
  rows = []
  for t in tests:
    c, r = t.comparison, t.result
    sides = f"{c.left} vs {c.right}"
    if r is None:
      rows.append([c.name, "–", "–", "–", f"not run: {t.skipped}", "–", sides])
    else:
      effect = "n.s." if r.p >= 0.05 else f"{r.effect_name}={r.effect:.3f}".replace("0.", ".")
      rows.append([c.name, f"{r.chi2:.2f}", r.df, _p(r.p), effect, r.n, sides])
  return markdown(["Comparison", "χ²", "df", "p", "Effect", "n", "Sides"], rows)


def shares_table(results: dict, codebook: Codebook, confidence: float) -> str:
  """Every share with its interval and count: categories and codes (codebook), phases."""
  out = []
  level = f"{confidence:.0%} interval"
  if "codebook" in results:
    r = results["codebook"]
    for title, levels, by, name in (
        ("Major categories", codebook.categories, codebook.category_of, lambda k: k),
        ("Codes", [c.id for c in codebook.codes], lambda x: x,
         lambda k: f"{k}. {codebook.by_id(k).name}")):
      rows = []
      for cond in r.labels:
        for k, s in r.shares(cond, levels, by, confidence).items():
          if s.count:
            rows.append([cond, name(k), _pct(s.value), f"[{_pct(s.low)}, {_pct(s.high)}]",
                         f"{s.count}/{s.n}"])
      out.append(f"### {title} (%)\n\n" + markdown(["Condition", "Level", "Share", level,
                                                     "Count"], rows))
  if "schoenfeld" in results:
    rows = [[c, p, _pct(s.value), f"[{_pct(s.low)}, {_pct(s.high)}]", f"{s.count}/{s.n}"]
            for c, ps in summary_lib.phase_shares(results["schoenfeld"], confidence).items()
            for p, s in ps.items()]
    out.append("### Schoenfeld phases (%)\n\n" + markdown(
        ["Condition", "Phase", "Share", level, "Count"], rows))
  return "\n\n".join(out)


def reliability_table(rows: list) -> str:
  """Per labeller and scheme: units, distinct texts, labels, failures by cause, κ."""
  return markdown(["Labeller", "Scheme", "Units", "Texts", "Labelled", "Failures",
                   "Failure causes", "κ vs first", "κ texts"], [
      [r["role"], r["scheme"], r["units"], r["texts"], r["labelled"], r["failures"],
       ", ".join(f"{k} {v}" for k, v in sorted(r["causes"].items())) or "–",
       _num(r.get("kappa"), 3) if r.get("kappa") is not None and not math.isnan(r["kappa"])
       else "–", r.get("kappa_texts", "–")] for r in rows])


# -- Figures -------------------------------------------------------------------------------

def add_footer(fig: "matplotlib.figure.Figure", text: str) -> None:
  """A grey line under the figure (the layout keeps room for it)."""
  fig.get_layout_engine().set(rect=(0, 0.035, 1, 0.965))
  fig.text(0.99, 0.005, text, ha="right", va="bottom", fontsize=6, color="0.4")


def finish_bars(fig: "matplotlib.figure.Figure", ax: "matplotlib.axes.Axes", footer: str,
                title: str, value_label: str, axis: str = "y", **legend: Any) -> None:
  """A one-panel bar figure's labels: the value axis (`axis`) named and gridded, the
  title, the legend (matplotlib's `legend` keywords) and the footer."""
  (ax.set_ylabel if axis == "y" else ax.set_xlabel)(value_label, fontsize=8)
  ax.set_title(title, fontsize=10)
  ax.legend(fontsize=7, frameon=False, **legend)
  ax.grid(alpha=0.3, axis=axis)
  add_footer(fig, footer)


def _boxes(ax, data: dict, colors: dict, title: str, ylabel: str, percent: bool = False) -> None:
  """Box plots (whiskers 5-95%) with every response as a faint point and the mean as a dot."""
  names = [n for n, v in data.items() if len(v)]
  if not names:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title, fontsize=9)
    return
  scale = 100 if percent else 1
  values = [np.asarray(data[n], float) * scale for n in names]
  bp = ax.boxplot(values, whis=(5, 95), showfliers=False, patch_artist=True, widths=0.55,
                  medianprops={"color": "black"})
  rng = np.random.default_rng(0)
  for i, (n, v) in enumerate(zip(names, values), 1):
    bp["boxes"][i - 1].set(facecolor=colors[n], alpha=0.35, edgecolor=colors[n])
    ax.scatter(i + rng.uniform(-0.18, 0.18, v.size), v, s=4, color=colors[n], alpha=0.35, lw=0)
    ax.plot(i, v.mean(), "o", color="black", ms=3.5, zorder=5)
  ax.set_xticks(range(1, len(names) + 1), names, rotation=20, ha="right", fontsize=7)
  figures.style_panel(ax, title, ylabel=ylabel, grid="y")


def response_figures(plt: types.ModuleType, per_response: dict, stats: dict, colors: dict,
                     confidence: float, footer: str) -> dict:
  fig, axes = plt.subplots(1, 4, figsize=(13, 3.6), layout="constrained")
  fig.suptitle("Words per tutor response (box: quartiles, whiskers: 5-95%, dot: mean)")
  parts = (("visible", lambda s: s.visible_words), ("thinking", lambda s: s.thinking_words),
           ("total", lambda s: s.total_words), ("unique", lambda s: s.unique_words))
  for ax, (name, get) in zip(axes, parts):
    data = {c: [get(s) for s in rs if get(s) is not None] for c, rs in per_response.items()}
    _boxes(ax, data, colors, f"{name} words", "words")
  add_footer(fig, footer)
  out = {"response_lengths": fig}

  fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained",
                           gridspec_kw={"width_ratios": [2, 1]})
  fig.suptitle("Mathematical content and questions")
  ax, conds = axes[0], list(per_response)
  for j, (part, get, hatch) in enumerate((("visible", lambda s: s.visible_math, None),
                                          ("thinking", lambda s: s.thinking_math, "//"))):
    for i, c in enumerate(conds):
      v = np.asarray([get(s) for s in per_response[c] if get(s) is not None], float) * 100
      if v.size:
        pos = i * 3 + j
        b = ax.boxplot([v], positions=[pos], whis=(5, 95), showfliers=False, widths=0.8,
                       patch_artist=True, medianprops={"color": "black"})
        b["boxes"][0].set(facecolor=colors[c], alpha=0.35 if j == 0 else 0.15,
                          edgecolor=colors[c], hatch=hatch)
        ax.plot(pos, v.mean(), "o", color="black", ms=3.5, zorder=5)
  ax.set_xticks([i * 3 + 0.5 for i in range(len(conds))], conds, rotation=20, ha="right",
                fontsize=7)
  from matplotlib.patches import Patch
  ax.legend(handles=[Patch(facecolor="0.75", edgecolor="0.4", label="visible"),
                     Patch(facecolor="white", edgecolor="0.4", hatch="//", label="thinking")],
            fontsize=7, frameon=False)
  figures.style_panel(ax, "math words / words per response (%)", ylabel="%", grid="y")
  ax = axes[1]
  for i, c in enumerate(conds):
    q = sum(s.questions for s in per_response[c])
    n = sum(s.sentences for s in per_response[c])
    sh = significance.share(q, n, confidence)
    if n:
      ax.bar(i, 100 * sh.value, color=colors[c], alpha=0.7,
             yerr=figures.whiskers(sh.value, sh.low, sh.high, 100), capsize=3)
  ax.set_xticks(range(len(conds)), conds, rotation=20, ha="right", fontsize=7)
  figures.style_panel(ax, f"questions / visible sentences (%, {confidence:.0%} Wilson)",
                      grid="y")
  add_footer(fig, footer)
  out["math_content"] = fig
  return out


def phase_figure(plt: types.ModuleType, shares: dict, footer: str,
                 confidence: float) -> "matplotlib.figure.Figure":
  fig, axes = plt.subplots(1, 2, figsize=(11, 0.5 * len(shares) + 2.2), layout="constrained",
                           gridspec_kw={"width_ratios": [3, 1.3]})
  fig.suptitle("Schoenfeld phases of the thinking (share of labelled units)")
  conds = list(shares)[::-1]
  colors = {"Explore": "#d95f02", "General": "#7570b3", "Verify": "#1b9e77"}
  ax, left = axes[0], np.zeros(len(conds))
  for p in PHASES:
    v = np.array([100 * shares[c][p].value for c in conds])
    ax.barh(conds, v, left=left, color=colors[p], label=p)
    for y, (l, w) in enumerate(zip(left, v)):
      if w >= 6:
        ax.text(l + w / 2, y, f"{w:.1f}", ha="center", va="center", fontsize=7, color="white")
    left += v
  ax.set_xlim(0, 100)
  ax.set_xlabel("%", fontsize=8)
  ax.legend(ncols=3, fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
  ax.tick_params(labelsize=7)
  ax = axes[1]
  for y, c in enumerate(conds):
    s = shares[c]["Explore"]
    ax.errorbar(100 * s.value, y, xerr=figures.whiskers(s.value, s.low, s.high, 100), fmt="o",
                color=colors["Explore"], capsize=3, ms=4)
  ax.set_yticks(range(len(conds)), conds)
  figures.style_panel(ax, f"Explore (%), {confidence:.0%} Wilson", grid="x")
  add_footer(fig, footer)
  return fig


def _grouped_bars(ax, labels, cols, values, colors, horizontal: bool = False) -> None:
  """values[col][i] = Averaged for labels[i]; one bar per column within each label."""
  width = 0.8 / max(len(cols), 1)
  for j, col in enumerate(cols):
    pos = np.arange(len(labels)) + (j - (len(cols) - 1) / 2) * width
    v = np.array([100 * a.value for a in values[col.name]])
    err = np.hstack([figures.whiskers(a.value, a.low, a.high, 100) for a in values[col.name]])
    bar = ax.barh if horizontal else ax.bar
    bar(pos, v, width, color=colors[col.name], label=col.name, alpha=0.8,
        **({"xerr": err} if horizontal else {"yerr": err}), capsize=2,
        error_kw={"lw": 0.8})


def codebook_figures(plt: types.ModuleType, result: summary_lib.SchemeResult,
                     cols: Sequence[summary_lib.Column], codebook: Codebook, top: list, footer: str,
                     confidence: float) -> dict:
  colors = condition_colors(plt, [c.name for c in cols])
  fig, ax = plt.subplots(figsize=(11, 4), layout="constrained")
  cats = list(codebook.categories)
  per = {col.name: summary_lib.column_shares(result, col, cats, codebook.category_of,
                                             confidence) for col in cols}
  _grouped_bars(ax, cats, cols, {k: [v[c] for c in cats] for k, v in per.items()}, colors)
  ax.set_xticks(range(len(cats)), [SHORT.get(c, c) for c in cats], rotation=15, ha="right",
                fontsize=7)
  finish_bars(fig, ax, footer, f"Major categories (whiskers: {confidence:.0%} intervals)",
              "% of labelled sentences")
  out = {"categories": fig}

  fig, ax = plt.subplots(figsize=(9, 0.45 * max(len(top), 1) + 1.6), layout="constrained")
  names = [code.name for code, _ in top][::-1]
  _grouped_bars(ax, names, cols, {col.name: [v[col.name] for _, v in top][::-1] for col in cols},
                colors, horizontal=True)
  ax.set_yticks(range(len(names)), names, fontsize=7)
  finish_bars(fig, ax, footer, f"The {len(top)} most frequent codes (whiskers: "
              f"{confidence:.0%} intervals)", "% of labelled sentences", axis="x",
              loc="lower right")
  out["top_codes"] = fig

  fig, ax = plt.subplots(figsize=(7, 3.6), layout="constrained")
  praise = codebook.code("Praise").id
  conds = list(result.labels)
  ccolors = condition_colors(plt, conds)
  ax.axhspan(100 * PRAISE_BAND[0], 100 * PRAISE_BAND[1], color="0.85", zorder=0,
             label="5-8%: the level paper 001 calls effective")
  for i, c in enumerate(conds):
    s = result.shares(c, [praise], confidence=confidence)[praise]
    if s.n:
      ax.bar(i, 100 * s.value, color=ccolors[c], alpha=0.8,
             yerr=figures.whiskers(s.value, s.low, s.high, 100), capsize=3)
      ax.text(i, 100 * s.high, f"{100 * s.value:.1f}", ha="center", va="bottom", fontsize=7)
  ax.set_xticks(range(len(conds)), conds, rotation=20, ha="right", fontsize=7)
  finish_bars(fig, ax, footer, f"Praise (whiskers: {confidence:.0%} Wilson)",
              "% of labelled sentences")
  out["praise"] = fig
  return out


def footer_text(labeller: str, n_responses: int) -> str:
  today = datetime.date.today().isoformat()
  return f"pedrl analysis, {today}; labeller: {labeller}; {n_responses} tutor responses"


def save(figs: dict, folder: str) -> list:
  return figures.save_png(figs, folder, dpi=130)
