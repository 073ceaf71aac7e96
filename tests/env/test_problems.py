"""Problem loaders, the paper's filter and split, and bad rows reported by row number."""
import json

import pytest

from pedrl.env import problems as P

SAMPLE = "testdata/problems/bigmath_sample.jsonl"
NON_NUMERIC = {"\\{-3, 3\\}", "(2, 5)", "3x"}


def test_sample_loads_and_filter_keeps_single_numbers_in_the_rate_band():
  rows = [json.loads(line) for line in open(SAMPLE)]
  loaded, report = P.load_bigmath(SAMPLE)
  assert report.loaded == report.rows == len(rows) and not report.skipped
  assert loaded[0].domain == tuple(rows[0]["domain"]) and loaded[0].source == "orca_math"
  kept = P.paper_filter(loaded)
  want = [r["problem"] for r in rows
          if 0.01 <= r["llama8b_solve_rate"] <= 0.60 and r["answer"] not in NON_NUMERIC]
  assert sorted(p.problem for p in kept) == sorted(want) and 0 < len(kept) < len(rows)


@pytest.mark.parametrize("answer,single", [
    ("5", True), ("-2.5", True), (r"\frac{3}{4}", True), (r"2\sqrt{2}", True), ("1,000", True),
    ("(1, 2)", False), (r"\{1,2\}", False), ("[0, 1)", False), ("x+1", False), ("i", False)])
def test_single_number(answer, single):
  assert P.is_single_number(answer) == single


def test_split_is_deterministic_disjoint_and_seeded():
  loaded, _ = P.load_bigmath(SAMPLE)
  train, test = P.split(loaded, n_train=15, n_test=5, seed=3)
  assert len(train) == 15 and len(test) == 5
  assert not {p.id for p in train} & {p.id for p in test}
  again = P.split(list(reversed(loaded)), n_train=15, n_test=5, seed=3)  # File order is irrelevant.
  assert again == (train, test)
  assert P.split(loaded, n_train=15, n_test=5, seed=4)[1] != test
  with pytest.raises(P.DataError, match="cannot give a test set"):
    P.split(loaded[:3], n_test=5)


def write_bad_file(path):
  good = {"problem": "What is 2 + 2?", "answer": "4", "llama8b_solve_rate": 0.2}
  lines = [json.dumps(good).encode(),
           b"\xff\xfe not utf-8",
           b'{"problem": "unterminated',
           json.dumps({"problem": "No answer here."}).encode(),
           json.dumps({"problem": "Odd answer", "answer": "\\frac{"}).encode(),
           json.dumps([1, 2]).encode(),
           json.dumps({"problem": "Rate", "answer": "1", "llama8b_solve_rate": "high"}).encode(),
           json.dumps(dict(good, problem="What is 3 + 3?", answer="6")).encode()]
  path.write_bytes(b"\n".join(lines) + b"\n")


def test_bad_rows_are_skipped_and_reported_by_row_number(tmp_path):
  path = tmp_path / "bad.jsonl"
  write_bad_file(path)
  loaded, report = P.load_bigmath(str(path))
  assert [p.answer for p in loaded] == ["4", "6"]
  assert report.rows == 8 and report.loaded == 2
  assert [n for n, _ in report.skipped] == [2, 3, 4, 5, 6, 7]
  reasons = dict(report.skipped)
  assert "UTF-8" in reasons[2] and "JSON" in reasons[3] and "'answer'" in reasons[4]
  assert "math-verify" in reasons[5] and "object" in reasons[6] and "solve_rate" in reasons[7]
  assert "6 skipped: row 2:" in report.summary()


def test_the_all_split_keeps_a_problem_once_and_counts_its_repeats(tmp_path):
  """An evaluation keys each dialogue by its problem: a repeat would be found only when the
  shards merge, after all the work. The train and test splits keep their own choice."""
  path = tmp_path / "repeats.jsonl"
  rows = [{"question": q, "answer": f"so #### {a}"} for q, a in
          [("1+1?", "2"), ("2+2?", "4"), ("1+1?", "2"), ("3+3?", "6"), ("2+2?", "5")]]
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  settings = P.ProblemSettings(path=str(path), format="gsm8k", split="all", filter=False)
  loaded, report = P.load(settings)
  assert [p.problem for p in loaded] == ["1+1?", "2+2?", "3+3?"]
  assert [p.answer for p in loaded] == ["2", "4", "6"]
  assert report.skipped == [(3, "repeats row 1's problem"), (5, "repeats row 2's problem")]
  assert "3 of 5 rows loaded, 2 skipped: row 3: repeats row 1's problem" in report.summary()
  assert len(P.load_gsm8k(str(path))[0]) == 5  # A loader alone reads every row.


def test_bad_rows_are_fatal_when_configured(tmp_path):
  path = tmp_path / "bad.jsonl"
  write_bad_file(path)
  with pytest.raises(P.DataError, match=r"bad.jsonl: row 2: not UTF-8"):
    P.load_bigmath(str(path), on_error="fatal")
  with pytest.raises(P.DataError, match="no such problem file"):
    P.load_bigmath(str(tmp_path / "missing.jsonl"))
  with pytest.raises(ValueError, match="on_error"):
    P.load_bigmath(str(path), on_error="ignore")


def test_real_gsm8k_and_math500(shared_data):
  gsm, report = P.load_gsm8k(shared_data("gsm8k", "test.jsonl"))
  assert report.loaded == report.rows == 1319
  assert gsm[0].answer == "18" and gsm[0].problem.startswith("Janet")
  math, report = P.load_math500(shared_data("math500", "test.jsonl"))
  assert report.loaded == report.rows == 500 and math[0].domain == ("Precalculus",)


# -- The published test split, read as given ---------------------------------------------------

PUBLISHED = "testdata/problems/bigmath_published_sample.jsonl"


def _published(**kw):
  return P.ProblemSettings(**{**dict(path=PUBLISHED, split="published", filter=False,
                                     on_error="fatal"), **kw})


def test_published_split_is_read_as_given(tmp_path):
  # 500 rows: a row the paper's filter would drop, a non-numeric answer; all come back in
  # file order, none dropped, none moved.
  rows = [{"problem": f"What is {i} + 1?", "answer": str(i + 1), "source": "orca_math",
           "domain": ["Mathematics -> Arithmetic"], "llama8b_solve_rate": 0.2}
          for i in range(501)]
  rows[3] = dict(rows[3], llama8b_solve_rate=0.9)  # Outside [0.01, 0.60].
  rows[7] = dict(rows[7], answer="(2, 5)")  # Not a single number.
  def write(name, some):
    (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in some))
    return str(tmp_path / name)

  got, report = P.load(_published(path=write("test.jsonl", rows[:500])))
  assert [p.problem for p in got] == [r["problem"] for r in rows[:500]]
  assert got[3].solve_rate == 0.9 and got[7].answer == "(2, 5)"
  assert report.rows == 500 and not report.skipped
  # Not the released split's shape: fewer or more rows (the first 500 of a longer file
  # would pass for the test split: rd211's train split has 10,000), a row without its
  # fields, a problem twice (found at load, not when the evaluation merges its records).
  # One line, the file.
  for name, some in (("short.jsonl", rows[:499]), ("long.jsonl", rows)):
    with pytest.raises(P.DataError, match=rf"{name}: {len(some)} rows, but the published test "
                                          r"split has 500 \(problems.n_test\)"):
      P.load(_published(path=write(name, some)))
  twice = rows[:500]
  twice[9] = twice[8]
  with pytest.raises(P.DataError, match=r"twice.jsonl: row 10 repeats row 9's problem \(id "
                                        rf"{P.problem_id(rows[8]['problem'])}\)"):
    P.load(_published(path=write("twice.jsonl", twice)))
  with pytest.raises(P.DataError, match=r"bare.jsonl: row 1: not a row of the published split "
                                        r"\(no source, domain, llama8b_solve_rate"):
    P.load(_published(path=write("bare.jsonl", [{"problem": "What is 1 + 1?", "answer": "2"}])))


def test_published_train_split_is_the_file_as_given(tmp_path):
  """The released training split (rd211's `train`): every row, in order, duplicates and rows
  the filter would drop included, nothing held out (pedrl's `train` split of the same file
  would hold out n_test of them and de-duplicate)."""
  rows = [{"problem": f"What is {i} + 2?", "answer": str(i + 2), "source": "orca_math",
           "domain": ["Mathematics -> Arithmetic"], "llama8b_solve_rate": 0.3}
          for i in range(12)]
  rows[2] = dict(rows[2], llama8b_solve_rate=0.95)  # Outside [0.01, 0.60].
  rows[5] = rows[4]  # The same problem twice.
  path = tmp_path / "train.jsonl"
  path.write_text("".join(json.dumps(r) + "\n" for r in rows))
  given = dict(path=str(path), split="published_train", filter=False, on_error="fatal")
  got, report = P.load(P.ProblemSettings(**given), seed=3)
  assert [p.problem for p in got] == [r["problem"] for r in rows]
  assert report.rows == 12 and not report.skipped
  assert [p.problem for p in P.load(P.ProblemSettings(**given, limit=3))[0]] == [
      r["problem"] for r in rows[:3]]
  own, _ = P.load(P.ProblemSettings(path=str(path), split="train", n_test=4), seed=3)
  assert len(own) == 6  # 12 rows, one twice, one filtered out, 4 held out.
  with pytest.raises(ValueError, match="split='published_train' reads a released split as "
                                       "given: it needs format='bigmath', filter=False"):
    P.ProblemSettings(path=str(path), split="published_train")
  path.write_text(json.dumps({"problem": "What is 1 + 1?", "answer": "2"}) + "\n")
  with pytest.raises(P.DataError, match="train.jsonl: row 1: not a row of the published split"):
    P.load(P.ProblemSettings(**given))


def test_published_split_settings_refuse_what_they_would_ignore():
  with pytest.raises(ValueError, match="split='published' reads a released split as given: it "
                                       "needs format='bigmath', filter=False and on_error"):
    _published(filter=True)
  with pytest.raises(ValueError, match="needs format='bigmath', filter=False and on_error"):
    _published(on_error="skip")
  with pytest.raises(ValueError, match="split 'valid' is not one of"):
    P.ProblemSettings(split="valid")


def test_testdata_sample_is_in_the_published_format():
  rows = [json.loads(line) for line in open(PUBLISHED)]
  got, _ = P.load(_published(n_test=len(rows)))
  assert all(set(r) == set(P.PUBLISHED_FIELDS) for r in rows)
  assert [p.problem for p in got] == [r["problem"] for r in rows]
  assert P.paper_filter(got) == got  # Rows of a filtered split: the filter keeps them all.
  assert [p.problem for p in P.load(_published(n_test=len(rows), limit=4))[0]] == [
      r["problem"] for r in rows[:4]]


def test_an_evaluation_splits_a_pool_as_its_training_run_did():
  pool = dict(path=SAMPLE, split="test", n_test=5, n_train=10, filter=False)
  trained = P.load(P.ProblemSettings(**pool), seed=0)[0]
  assert P.load(P.ProblemSettings(**pool, split_seed=0), seed=42)[0] == trained
  assert P.load(P.ProblemSettings(**pool), seed=42)[0] != trained
