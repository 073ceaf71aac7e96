r"""χ² tests between conditions (paper 001 table 8), shares with intervals, Cohen's κ.

Table 8 tests "code distributions" between conditions with χ², its degrees of
freedom, p and φ (2×2 tables) or Cramér's V (larger ones), over more than
150,000 labelled sentences. pedrl computes the same with scipy: Pearson's χ²
without Yates' correction (`chi2_contingency(correction=False)`; with the
correction, scipy's default for 2×2 tables, the paper's φ² n = χ² would not
hold) and V = sqrt(χ² / (n (min(rows, columns) − 1))), which is |φ| for a 2×2
table (`scipy.stats.contingency.association`).

A comparison is two sides, each a condition or a group of conditions whose
units are pooled, and a target: the labels' levels that make the columns.

  categories      the codebook's major categories
  table4          table 4's four categories and the rest pooled as Other
  category=NAME   that major category against the rest (2×2)
  code=NAME       that code against the rest (2×2)
  phases          Explore / General / Verify
  phase=NAME      that phase against the rest

Columns no side has are left out (a χ² needs every expected count above 0).
The paper does not say which conditions its rows compare; pedrl's reading of
table 8 (`PAPER_COMPARISONS`) follows the sentence counts its rows imply
(n = χ² / φ²): about 165,000 for the Ped vs non-Ped rows, which fits the
four thinking conditions (Think* against Ped.*), and 116,000 for NoThink
against Ped.*.

Shares carry Wilson score intervals (`scipy.stats.binomtest`), units counted
as independent draws, as table 8's tests count them.
"""
from collections.abc import Callable, Iterable
import dataclasses
import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as scipy_stats
from scipy.stats import contingency

from pedrl.eval.analysis import AnalysisError, parse_named
from pedrl.eval.analysis.codebook import OTHER, TABLE4, Codebook
from pedrl.eval.analysis.labelling import PHASES
from pedrl.eval.settings import PAPER_COMPARISONS, PAPER_GROUPS  # Re-exported: defined there, importable without JAX.

REST = "rest"


@dataclasses.dataclass(frozen=True)
class ChiSquare:
  """A χ² test of independence of a contingency table (rows: sides, columns: levels)."""
  chi2: float
  df: int
  p: float
  n: int
  effect: float  # φ for 2×2 tables, else Cramér's V.
  effect_name: str  # "φ" or "V".


def chi_square(table: ArrayLike) -> ChiSquare:
  """Pearson's χ² (no continuity correction) with φ or Cramér's V; columns and rows with
  no counts are dropped first. AnalysisError when less than a 2×2 table is left."""
  t = np.asarray(table, dtype=np.int64)
  t = t[t.sum(axis=1) > 0][:, t.sum(axis=0) > 0] if t.size else t
  if t.ndim != 2 or min(t.shape) < 2:
    raise AnalysisError(f"a χ² test needs two sides and two levels with counts, got "
                        f"{np.asarray(table).tolist()}")
  res = scipy_stats.chi2_contingency(t, correction=False)
  effect = float(contingency.association(t, method="cramer", correction=False))
  return ChiSquare(float(res.statistic), int(res.dof), float(res.pvalue), int(t.sum()), effect,
                   "φ" if t.shape == (2, 2) else "V")


# -- Groups and comparisons ----------------------------------------------------------------

def parse_groups(text: str) -> dict:
  """{group: (condition, ...)} of 'NAME=A+B; NAME=C+D'."""
  out = {}
  for name, members in parse_named(text, ";", "groups", "CONDITION+CONDITION").items():
    out[name] = tuple(m.strip() for m in members.split("+") if m.strip())
  return out


@dataclasses.dataclass(frozen=True)
class Comparison:
  name: str
  left: str  # A condition or a group.
  right: str
  target: str  # See the module docstring.

  @property
  def scheme(self) -> str:
    return "schoenfeld" if self.target.startswith("phase") else "codebook"


TARGETS = ("categories", "table4", "phases")
TARGET_KEYS = ("category", "code", "phase")


def parse_comparisons(text: str) -> list:
  """[Comparison] of 'NAME: LEFT vs RIGHT: TARGET; …'."""
  out = []
  for item in (s.strip() for s in (text or "").split(";")):
    if not item:
      continue
    parts = [p.strip() for p in item.split(":")]
    sides = parts[1].split(" vs ") if len(parts) == 3 else []
    if len(sides) != 2 or not all(s.strip() for s in sides) or not parts[0]:
      raise AnalysisError(f"--config.comparisons: {item!r} is not 'NAME: LEFT vs RIGHT: TARGET'")
    target = parts[2]
    head = target.partition("=")[0].strip()
    if target not in TARGETS and not (head in TARGET_KEYS and "=" in target):
      raise AnalysisError(f"--config.comparisons: {item!r}: target {target!r} is not one of "
                          f"{', '.join(TARGETS)} or {', '.join(k + '=NAME' for k in TARGET_KEYS)}")
    out.append(Comparison(parts[0], sides[0].strip(), sides[1].strip(), target))
  return out


def members(side: str, groups: dict, conditions: Iterable[str]) -> tuple:
  """The conditions a side pools; AnalysisError naming a side that is neither."""
  found = groups.get(side, (side,))
  missing = [c for c in found if c not in conditions]
  if missing:
    raise AnalysisError(f"{side!r} names no analysed condition ({', '.join(missing)}); "
                        f"conditions: {', '.join(conditions)}; groups: {', '.join(groups)}")
  return found


def leveller(target: str, codebook: Codebook) -> tuple[Callable[[int | str], str], list[str]]:
  """(label -> column name, the columns in order) for a target."""
  head, _, value = target.partition("=")
  if target == "categories":
    return codebook.category_of, list(codebook.categories)
  if target == "table4":
    return (lambda c: codebook.category_of(c) if codebook.category_of(c) in TABLE4 else OTHER,
            list(TABLE4) + [OTHER])
  if target == "phases":
    return (lambda p: p), list(PHASES)
  value = value.strip()
  if head == "category":
    if value not in codebook.categories:
      raise AnalysisError(f"no major category {value!r}; the codebook's: "
                          f"{', '.join(codebook.categories)}")
    return (lambda c: value if codebook.category_of(c) == value else REST), [value, REST]
  if head == "code":
    code = codebook.code(value).id
    return (lambda c: value if c == code else REST), [value, REST]
  if value not in PHASES:
    raise AnalysisError(f"no phase {value!r}; the phases: {', '.join(PHASES)}")
  return (lambda p: value if p == value else REST), [value, REST]


def contingency_table(comparison: Comparison, labels: dict, groups: dict,
                      codebook: Codebook) -> tuple[np.ndarray, list[str]]:
  """(rows left/right × columns, the columns) from {condition: [label, ...]} (labelled
  units only)."""
  level, columns = leveller(comparison.target, codebook)
  rows = []
  for side in (comparison.left, comparison.right):
    counts = dict.fromkeys(columns, 0)
    for c in members(side, groups, list(labels)):
      for label in labels[c]:
        counts[level(label)] += 1
    rows.append([counts[k] for k in columns])
  return np.asarray(rows), columns


# -- Shares and agreement ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Share:
  count: int
  n: int
  low: float  # Wilson score interval.
  high: float

  @property
  def value(self) -> float:
    return self.count / self.n if self.n else math.nan


def share(count: int, n: int, confidence: float) -> Share:
  if not n:
    return Share(0, 0, math.nan, math.nan)
  ci = scipy_stats.binomtest(count, n).proportion_ci(confidence_level=confidence,
                                                     method="wilson")
  return Share(count, n, float(ci.low), float(ci.high))


def kappa(first: dict, second: dict) -> tuple[float, int]:
  """Cohen's κ of two labellers over the texts both labelled ({key: label}) and their
  number; NaN below two such texts (sklearn.metrics.cohen_kappa_score)."""
  from sklearn.metrics import cohen_kappa_score
  both = sorted(k for k in first if k in second and first[k] is not None
                and second[k] is not None)
  if len(both) < 2:
    return math.nan, len(both)
  a, b = [str(first[k]) for k in both], [str(second[k]) for k in both]
  if len(set(a) | set(b)) == 1:  # One label everywhere: agreement is total, κ undefined.
    return math.nan, len(both)
  return float(cohen_kappa_score(a, b)), len(both)
