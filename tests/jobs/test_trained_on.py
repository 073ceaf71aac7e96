"""The training problems a run records, and the evaluation's check against them."""
import json
import os

import pytest

from pedrl.env import problems as P
from pedrl.jobs import trained_on

POOL = "testdata/problems/bigmath_sample.jsonl"
PUBLISHED = "testdata/problems/bigmath_published_sample.jsonl"


def _pool():
  return P.load(P.ProblemSettings(path=POOL, split="all", filter=False))[0]


def test_a_record_keeps_every_problem_a_run_drew_from(tmp_path):
  pool = _pool()
  trained_on.record(str(tmp_path), pool[:4], "a.jsonl")
  trained_on.record(str(tmp_path), pool[2:6], "b.jsonl")  # Resumed on other problems: both.
  got = trained_on.read(str(tmp_path))
  assert got.sources == (os.path.abspath("a.jsonl"), os.path.abspath("b.jsonl"))
  assert got.ids == {p.id for p in pool[:6]}
  saved = json.loads((tmp_path / trained_on.RECORD).read_text())
  assert saved["problems"] == 6 and saved["ids"] == sorted(got.ids)
  assert trained_on.read(str(tmp_path / "elsewhere")) is None
  # An offline run inherits its data workdir's record.
  trained_on.inherit(str(tmp_path), str(tmp_path / "sft"))
  assert trained_on.read(str(tmp_path / "sft")) == got


def test_an_evaluation_of_a_run_refuses_its_training_problems(tmp_path):
  pool = _pool()
  run = str(tmp_path / "run")
  trained_on.record(run, pool[:4], POOL)  # The tiny training jobs' first rows.
  # The published-split sample leaves them out: nothing shared.
  published = P.load(P.ProblemSettings(path=PUBLISHED, split="published", filter=False,
                                       on_error="fatal", n_test=11))[0]
  trained_on.check_disjoint(run, published, PUBLISHED)
  # The pool itself holds them: one line, how many, from where, the first one.
  with pytest.raises(P.DataError, match=rf"4 of the 24 problems of pool.jsonl are training "
                                        rf"problems of {run} \(from {os.path.abspath(POOL)}; "
                                        rf"the first: id "
                                        rf"{pool[0].id}, 'Ana buys"):
    trained_on.check_disjoint(run, pool, "pool.jsonl")
  # A run recorded before the record existed: not checked, said so.
  trained_on.check_disjoint(str(tmp_path / "old"), pool, "pool.jsonl")
  (tmp_path / "bad").mkdir()
  (tmp_path / "bad" / trained_on.RECORD).write_text('{"ids": []}')
  with pytest.raises(P.DataError, match="not a record of training problems"):
    trained_on.read(str(tmp_path / "bad"))
