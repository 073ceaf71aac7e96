"""The numbers of the analysis, from the responses and their labels: what the tables and
figures show (pedrl.eval.analysis.report) and analysis.json holds.

Shares are over a condition's labelled units; its failures (units the
labeller gave no readable label) are counted beside them, never in them.
A column of tables 4 and 11 is a condition or a group whose share is the mean
of its conditions' shares, as the paper's notes define Think* and Ped.*; its
interval is the normal one of that mean (the conditions' binomial variances
p (1 − p) / n, summed, over the number of conditions squared).
"""
import collections
from collections.abc import Callable, Sequence
import dataclasses
import math
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from pedrl.eval.analysis import significance, text as text_lib
from pedrl.eval.analysis.codebook import Codebook
from pedrl.eval.analysis.labelling import PHASES, THINKING_UNITS
from pedrl.eval.settings import AnalysisSettings  # Re-exported: defined there, importable without JAX.


@dataclasses.dataclass
class SchemeResult:
  """One scheme's labels per condition (units in order; None: a failure)."""
  scheme: str
  labels: dict  # condition -> [label | None] per unit.
  causes: dict  # condition -> Counter of failure causes.

  def labelled(self, condition: str) -> list:
    return [x for x in self.labels[condition] if x is not None]

  def labelled_all(self) -> dict:
    return {c: self.labelled(c) for c in self.labels}

  def shares(self, condition: str, levels: Sequence[Any], level: Callable[[Any], Any] = lambda x: x,
             confidence: float = 0.95) -> dict:
    """{level: Share} of the condition's labelled units."""
    got = collections.Counter(map(level, self.labelled(condition)))
    n = sum(got.values())
    return {k: significance.share(got[k], n, confidence) for k in levels}


@dataclasses.dataclass(frozen=True)
class Column:
  """A column of tables 4 and 11: a condition, or a group averaging conditions."""
  name: str
  members: tuple


def columns(spec: str, conditions: Sequence[str], groups: dict) -> list:
  """The columns `spec` names ('NoThink,Think*,Ped.*') whose conditions are all analysed
  (the caller logs the others); one per condition if `spec` is empty or none is left."""
  names = [s.strip() for s in spec.split(",") if s.strip()]
  out = [Column(n, groups.get(n, (n,))) for n in names
         if all(c in conditions for c in groups.get(n, (n,)))]
  return out or [Column(c, (c,)) for c in conditions]


@dataclasses.dataclass(frozen=True)
class Averaged:
  value: float
  low: float
  high: float


def averaged(shares: Sequence[significance.Share], confidence: float) -> Averaged:
  """The mean of conditions' shares with its normal interval (module docstring)."""
  shares = [s for s in shares if s.n]
  if not shares:
    return Averaged(math.nan, math.nan, math.nan)
  value = float(np.mean([s.value for s in shares]))
  if len(shares) == 1:
    return Averaged(value, shares[0].low, shares[0].high)
  sd = math.sqrt(sum(s.value * (1 - s.value) / s.n for s in shares)) / len(shares)
  z = scipy_stats.norm.ppf(0.5 + confidence / 2)
  return Averaged(value, max(value - z * sd, 0.0), min(value + z * sd, 1.0))


def column_shares(result: SchemeResult, column: Column, levels: Sequence[Any],
                  level: Callable[[Any], Any], confidence: float) -> dict:
  per = [result.shares(c, levels, level, confidence) for c in column.members]
  return {k: averaged([p[k] for p in per], confidence) for k in levels}


def top_codes(result: SchemeResult, cols: Sequence[Column], codebook: Codebook, n: int,
              confidence: float, rank: str = "first") -> list:
  """The n codes with the highest share, most frequent first: [(code, {column:
  Averaged})]. `rank` "first": the first column's share, as paper 001's table 11 lists
  its rows (descending in NoThink; ties by the mean); "mean": the mean over the columns."""
  ids = [c.id for c in codebook.codes]
  per = {col.name: column_shares(result, col, ids, lambda x: x, confidence) for col in cols}
  mean = {i: np.nanmean([per[col.name][i].value for col in cols]) for i in ids}
  first = {i: np.nan_to_num(per[cols[0].name][i].value) for i in ids} if cols else mean
  key = {"first": lambda i: (-first[i], -mean[i]), "mean": lambda i: -mean[i]}[rank]
  ranked = sorted((i for i in ids if mean[i] > 0), key=key)[:n]
  return [(codebook.by_id(i), {col.name: per[col.name][i] for col in cols}) for i in ranked]


@dataclasses.dataclass(frozen=True)
class TestResult:
  comparison: significance.Comparison
  table: list  # Rows left, right; columns as `levels`.
  levels: list
  result: significance.ChiSquare | None
  skipped: str = ""  # Why no test ran (a side without labels, one level only).


def run_tests(comparisons: Sequence[significance.Comparison], results: dict, groups: dict,
              codebook: Codebook) -> list:
  """Each comparison's χ² test, or why it could not run (a scheme not labelled, a side
  naming no analysed condition, too few counts): reported in the table, not fatal."""
  out = []
  for comp in comparisons:
    result = results.get(comp.scheme)
    if result is None:
      out.append(TestResult(comp, [], [], None, f"the {comp.scheme} scheme was not labelled"))
      continue
    table, levels = [], []
    try:
      table, levels = significance.contingency_table(comp, result.labelled_all(), groups,
                                                     codebook)
      out.append(TestResult(comp, table.tolist(), levels, significance.chi_square(table)))
    except significance.AnalysisError as e:
      out.append(TestResult(comp, np.asarray(table).tolist(), levels, None, str(e)))
  return out


def response_summary(per_response: dict, total: str) -> dict:
  """{condition: ConditionStats}."""
  return {c: text_lib.summarize(stats, total) for c, stats in per_response.items()}


def phase_shares(result: SchemeResult, confidence: float) -> dict:
  """{condition: {phase: Share}} (table 10), conditions with thinking only."""
  return {c: result.shares(c, PHASES, confidence=confidence) for c in result.labels
          if result.labelled(c)}
