"""The papers' tutoring metrics over evaluation records, with bootstrap intervals over problems.

Papers 003 (table 2) and 001 (table 1) report one number per tutor; their
reference evaluation reduces each problem first and then averages problems,
so a problem with more sampled dialogues does not weigh more. pedrl does the
same for every metric but Ped-RM's, defined by pooling: micro over all scored
turns, macro over the dialogues' means (with one dialogue per problem, the
papers' setting, the two reductions agree). A dialogue without a scored tutor
turn counts 0 in the macro, as in the reference's eval.py
(`... if len(score) != 0 else 0`), or is left out (`pedrm_unscored="drop"`);
either way it is counted (`pedrm_unscored_dialogues`). No scored turn at all (no
Ped-RM given) leaves both NaN. Intervals resample problems (the unit the test
split samples), 95% percentile bootstrap by default; the papers give none.

Judge samples are "OK", "REJECT" or None (the judge's reply never parsed).
An unparsed sample counts in neither the numerator nor the denominator; a
dialogue whose samples all failed has no value for that judge, and is counted
(`<judge>_unparsed_dialogues`), never read as OK.
"""
import collections
import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from pedrl.env.dialogue import TUTOR
from pedrl.eval.records import EvalRecord
# Re-exported: defined there, importable without JAX.
from pedrl.eval.settings import CONFIDENCE, RESAMPLES, UNSCORED

OK, REJECT = "OK", "REJECT"


# -- One dialogue ----------------------------------------------------------------------------

def share(decisions: Sequence[str | None], value: str) -> float | None:
  """Share of `value` among a dialogue's parsed judge samples; None if none parsed.

  The reference's leak rate per dialogue: share of REJECT samples (paper 003
  section 6); the helpful rate's: share of OK samples (paper 001 table 1)."""
  parsed = [d for d in decisions if d is not None]
  return sum(d == value for d in parsed) / len(parsed) if parsed else None


def any_reject(decisions: Sequence[str | None]) -> float | None:
  """1 if any parsed sample is REJECT, else 0; None if none parsed (r_ped's rule,
  paper 003 eq. 3: a single REJECT fails the dialogue)."""
  parsed = [d for d in decisions if d is not None]
  return float(REJECT in parsed) if parsed else None


# -- Per problem, then over problems ------------------------------------------------------------

def per_problem(records: Iterable[EvalRecord],
                value: Callable[[EvalRecord], float | None]) -> dict[str, float]:
  """{problem_id: mean of value(record) over its records}, skipping None values;
  problems where every value is None are left out."""
  groups = collections.defaultdict(list)
  for r in records:
    v = value(r)
    if v is not None:
      groups[r.problem_id].append(v)
  return {p: float(np.mean(vs)) for p, vs in groups.items()}


def delta_per_problem(records: Iterable[EvalRecord]) -> dict[str, float]:
  """Per problem: mean post-dialogue solve rate over its dialogues − its pre-dialogue
  rate (paper 003 section 6, Δ solve rate; never penalised)."""
  post = per_problem(records, lambda r: r.post_solve_rate)
  pre = per_problem(records, lambda r: r.pre_solve_rate)
  return {p: post[p] - pre[p] for p in post if p in pre}


def bootstrap_interval(values: Sequence[float], seed: int, resamples: int = RESAMPLES,
                       confidence: float = CONFIDENCE) -> tuple[float, float]:
  """Percentile bootstrap interval of the mean of per-problem values; (nan, nan)
  with fewer than two problems (no spread to resample)."""
  values = np.asarray(values, float)
  if values.size < 2:
    return (math.nan, math.nan)
  if np.all(values == values[0]):
    return (float(values[0]), float(values[0]))
  res = scipy_stats.bootstrap((values,), np.mean, n_resamples=resamples,
                              confidence_level=confidence, method="percentile",
                              rng=np.random.default_rng(seed))
  return (float(res.confidence_interval.low), float(res.confidence_interval.high))


def pooled_interval(sums: Sequence[float], counts: Sequence[float], seed: int,
                    resamples: int = RESAMPLES,
                    confidence: float = CONFIDENCE) -> tuple[float, float]:
  """Percentile bootstrap interval of Σ sums / Σ counts, resampling problems (their
  sums and counts together): a pooled mean such as Ped-RM micro."""
  sums, counts = np.asarray(sums, float), np.asarray(counts, float)
  if sums.size < 2:
    return (math.nan, math.nan)
  ratio = lambda s, c, axis=-1: s.sum(axis) / c.sum(axis)
  if np.all(sums / counts == sums[0] / counts[0]):
    return (float(sums[0] / counts[0]),) * 2
  res = scipy_stats.bootstrap((sums, counts), ratio, n_resamples=resamples, paired=True,
                              confidence_level=confidence, method="percentile",
                              rng=np.random.default_rng(seed))
  return (float(res.confidence_interval.low), float(res.confidence_interval.high))


# -- The table's numbers ----------------------------------------------------------------------

def pedrm_micro_part(record: EvalRecord) -> tuple[float, int]:
  """Ped-RM micro (paper 003, table 2: "averaging of all individual scores"): a dialogue
  adds the sum and the count of its tutor turns' scores."""
  return float(np.sum(record.pedrm_turn_scores)), len(record.pedrm_turn_scores)


def pedrm_macro_part(record: EvalRecord, unscored: str = "zero") -> tuple[float, int]:
  """Ped-RM macro (paper 003, table 2: "averaging per conversation"): a scored dialogue
  adds its mean turn score, counted once; an unscored one adds 0, counted once (the
  reference's eval.py), or nothing (`unscored="drop"`)."""
  scores = record.pedrm_turn_scores
  if len(scores):
    return float(np.mean(scores)), 1
  if unscored not in UNSCORED:
    raise ValueError(f"pedrm_unscored {unscored!r} is not one of {UNSCORED}")
  return 0.0, int(unscored == "zero")


def pooled_mean(records: Sequence[EvalRecord],
                part: Callable[[EvalRecord], tuple[float, int]]) -> float:
  """Σ sums / Σ counts of `part(record)` over the records; NaN when nothing counts."""
  sums, counts = zip(*map(part, records)) if records else ((), ())
  return sum(sums) / sum(counts) if sum(counts) else math.nan


def pedrm_micro(records: Iterable[EvalRecord]) -> float:
  return pooled_mean(list(records), pedrm_micro_part)


def pedrm_macro(records: Iterable[EvalRecord], unscored: str = "zero") -> float:
  return pooled_mean(list(records), functools.partial(pedrm_macro_part, unscored=unscored))


def _mean(values) -> float:
  return float(np.mean(values)) if len(values) else math.nan


def compute(records: Iterable[EvalRecord], seed: int = 0, resamples: int = RESAMPLES,
            confidence: float = CONFIDENCE, pedrm_unscored: str = "zero") -> dict[str, Any]:
  """Every metric of `records` (EvalRecord-like: problem_id, pre/post_solve_rate,
  leak/helpful_decisions, thinking_scores, pedrm_turn_scores), each with
  `<name>_ci`, plus the counts a reader needs to trust them.

    leak_rate         per dialogue the share of REJECT samples (the reference's)
    leak_any_rate     per dialogue 1 if any sample is REJECT
    helpful_rate      per dialogue the share of OK samples (paper 001)
    helpful_all_rate  per dialogue 1 if no sample is REJECT
    pedrm_macro       mean over dialogues of their mean turn score (pooled; an unscored
                      dialogue by `pedrm_unscored`)
    pedrm_micro       mean over all scored tutor turns (pooled)
  A metric no record has a value for is NaN (e.g. no thinking judge).
  """
  records = list(records)
  by_problem = {
      "pre_solve_rate": per_problem(records, lambda r: r.pre_solve_rate),
      "post_solve_rate": per_problem(records, lambda r: r.post_solve_rate),
      "delta_solve_rate": delta_per_problem(records),
      "leak_rate": per_problem(records, lambda r: share(r.leak_decisions, REJECT)),
      "leak_any_rate": per_problem(records, lambda r: any_reject(r.leak_decisions)),
      "helpful_rate": per_problem(records, lambda r: share(r.helpful_decisions, OK)),
      "helpful_all_rate": per_problem(records, lambda r: _not(any_reject(r.helpful_decisions))),
      "thinking_score": per_problem(records, lambda r: _mean_or_none(r.thinking_scores)),
  }
  out = {"n_problems": len({r.problem_id for r in records}), "n_dialogues": len(records)}
  for name, values in by_problem.items():
    xs = list(values.values())
    out[name] = _mean(xs)
    out[f"{name}_ci"] = list(bootstrap_interval(xs, seed, resamples, confidence))
  # Ped-RM (paper 003): micro pools every scored turn, macro every scored dialogue's mean;
  # both resample problems (their sums and counts together).
  turns = sum(len(r.pedrm_turn_scores) for r in records)
  unscored = pedrm_unscored if turns else "drop"  # No Ped-RM at all: NaN, not 0.
  pooled = {"pedrm_micro": pedrm_micro_part,
            "pedrm_macro": functools.partial(pedrm_macro_part, unscored=unscored)}
  for name, part in pooled.items():
    sums, counts = collections.Counter(), collections.Counter()
    for r in records:
      total, n = part(r)
      sums[r.problem_id] += total
      counts[r.problem_id] += n
    scored = [p for p in counts if counts[p]]
    out[name] = pooled_mean(records, part)
    out[f"{name}_ci"] = list(pooled_interval([sums[p] for p in scored],
                                             [counts[p] for p in scored], seed, resamples,
                                             confidence))
  out["pedrm_turns"] = turns
  out["pedrm_dialogues"] = sum(bool(r.pedrm_turn_scores) for r in records)
  out["pedrm_unscored_dialogues"] = len(records) - out["pedrm_dialogues"]
  out["pedrm_unscored"] = pedrm_unscored
  for judge, decisions in (("leak", lambda r: r.leak_decisions),
                           ("helpful", lambda r: r.helpful_decisions)):
    samples = [d for r in records for d in decisions(r)]
    out[f"{judge}_samples"] = len(samples)
    out[f"{judge}_unparsed_samples"] = sum(d is None for d in samples)
    out[f"{judge}_unparsed_dialogues"] = sum(
        1 for r in records if decisions(r) and share(decisions(r), OK) is None)
  out["confidence"], out["bootstrap_resamples"], out["bootstrap_seed"] = (confidence, resamples,
                                                                          seed)
  return out


def _not(x: float | None) -> float | None:
  return None if x is None else 1.0 - x


def _mean_or_none(values) -> float | None:
  values = [v for v in values if v is not None]
  return float(np.mean(values)) if values else None


@dataclasses.dataclass(frozen=True)
class Counts:
  """How the dialogues went, beside the metrics (the reference eval's other numbers)."""
  mean_turns: float
  mean_tutor_turns: float
  tutor_words_per_turn: float
  end_reasons: dict


def dialogue_counts(records: Sequence[EvalRecord]) -> dict[str, Any]:
  """Turns per dialogue, tutor turns, tutor words per turn and end reasons."""
  tutor = [m for r in records for m in r.dialogue.messages if m.role == TUTOR]
  return dataclasses.asdict(Counts(
      mean_turns=_mean([len(r.dialogue.messages) for r in records]),
      mean_tutor_turns=_mean([sum(m.role == TUTOR for m in r.dialogue.messages)
                              for r in records]),
      tutor_words_per_turn=_mean([len(m.text.split()) for m in tutor]),
      end_reasons=dict(collections.Counter(r.dialogue.end_reason for r in records))))
