"""The problems a training run trained on (WORKDIR/train_problems.json), and the
evaluation's check that it evaluates none of them.

A split alone cannot promise it: pedrl's own hold-out is disjoint only within
one pool, and a training file and a test file given separately (rd211's `train`
and `test`, or any two) may share problems. So every job that makes a tutor's
training data records the ids (pedrl.env.problems.problem_id: a hash of the
text, whatever the file) of the problems it draws from: GRPO the whole training
split, baseline_data the subset it rolled out on, SFT and MDPO their data
workdir's record. An evaluation of a run (--config.tutor.workdir) stops with
one line when any of its problems is among them. A run recorded before this
file existed is evaluated with a warning that nothing was checked.
"""
from collections.abc import Sequence
import dataclasses
import os

from absl import logging

from pedrl import files
from pedrl.env import sources as sources_lib
from pedrl.env.problems import DataError, Problem

RECORD = "train_problems.json"


@dataclasses.dataclass(frozen=True)
class TrainingProblems:
  sources: tuple[str, ...]  # The problem files, as the runs that drew from them gave them.
  ids: frozenset[str]


def read(workdir: str) -> TrainingProblems | None:
  """The run's record; None for a run without one."""
  path = os.path.join(workdir, RECORD)
  if not os.path.exists(path):
    return None
  value = files.read_json(path, DataError)
  try:
    return TrainingProblems(tuple(value["sources"]), frozenset(value["ids"]))
  except (KeyError, TypeError) as e:
    raise DataError(f"{path}: not a record of training problems (no {e})") from None


def _write(workdir: str, record: TrainingProblems) -> None:
  files.write_json(os.path.join(workdir, RECORD),
                    {"sources": list(record.sources), "problems": len(record.ids),
                     "ids": sorted(record.ids)})


def record(workdir: str, problems: Sequence[Problem], source: str) -> None:
  """Adds `problems` (from `source`) to the run's record: a run resumed on other problems
  has trained on both."""
  have = read(workdir) or TrainingProblems((), frozenset())
  if sources_lib.tfds_split(source) is None:
    source = os.path.abspath(source)
  sources = have.sources + ((source,) if source not in have.sources else ())
  _write(workdir, TrainingProblems(sources, have.ids | {p.id for p in problems}))


def inherit(data_workdir: str, workdir: str) -> None:
  """An offline run trains on the problems its data was sampled on: their record is its own."""
  have = read(data_workdir)
  if have is None:
    logging.warning("%s records no training problems (%s): evaluations of %s cannot check "
                    "that they evaluate none", data_workdir, RECORD, workdir)
    return
  mine = read(workdir) or TrainingProblems((), frozenset())
  _write(workdir, TrainingProblems(tuple(dict.fromkeys(mine.sources + have.sources)),
                                   mine.ids | have.ids))


def check_disjoint(run_workdir: str, problems: Sequence[Problem], where: str) -> None:
  """DataError when any of `problems` (from `where`) is one the run at `run_workdir`
  trained on."""
  have = read(run_workdir)
  if have is None:
    logging.warning("%s records no training problems (%s, a run of an earlier pedrl): the "
                    "evaluation's problems are not checked against them", run_workdir, RECORD)
    return
  shared = [p for p in problems if p.id in have.ids]
  if shared:
    raise DataError(
        f"{len(shared)} of the {len(problems)} problems of {where} are training problems of "
        f"{run_workdir} (from {', '.join(have.sources)}; the first: id {shared[0].id}, "
        f"{shared[0].problem[:60]!r}): evaluate on problems the run never saw")
