"""Paper 001's transcript analysis: statistics counted by hand, χ² and effect sizes against
hand formulas and scipy, table 8's φ from the paper's own numbers, the labeller's parse,
failures and cache, and the job on evaluation workdirs of hand-written dialogues."""
import dataclasses
import json
import math
import os
import subprocess

import numpy as np
import pytest
from scipy import stats as scipy_stats

from tests.helpers import jobs
from tests.helpers.chat_server import ChatServer
from pedrl import files
from pedrl.clients import openai_compat
from pedrl.env import problems, prompts
from pedrl.env.dialogue import STUDENT, TUTOR, Dialogue, Message
from pedrl.eval import records as records_lib
from pedrl.eval.analysis import (AnalysisError, codebook as codebook_lib, data_views, labelling,
                                 responses, significance, summary, text)
from pedrl.eval import settings as settings_lib
from pedrl.rewards import asking

CODEBOOK = codebook_lib.load()


# -- Response statistics, counted by hand ----------------------------------------------------

R1 = "Great job! What is 3 + 4? Let's add the two numbers."
R2 = "Good. Now try it yourself: what do you get?"
R2_THINKING = "The student added 3 and 4. Check: 3 + 4 = 7."


def test_sentences_and_words_follow_the_written_rules():
  assert text.sentences(R1) == ["Great job!", "What is 3 + 4?", "Let's add the two numbers."]
  assert text.sentences("- First, add 3.5 and 2, e.g. on paper.\n\n2) Then stop!  ...") == [
      "First, add 3.5 and 2, e.g. on paper.", "Then stop!"]  # Markers, decimals, e.g., "...".
  assert text.words(R2) == ["Good", "Now", "try", "it", "yourself", "what", "do", "you", "get"]
  assert text.words("x — 2/3 = y...") == ["x", "2/3", "=", "y"]  # A dash alone is no word.
  math_words = [w for w in text.words(R2_THINKING) if text.is_math(w)]
  assert math_words == ["added", "3", "4", "3", "+", "4", "=", "7"]
  assert not any(map(text.is_math, ["First", "one", "mean", "apples", "Check"]))
  assert all(map(text.is_math, ["numbers", "Twelve", "\\frac", "$x$", "-", "50%"]))


def test_response_statistics_equal_hand_counts():
  one, two = text.response_stats(R1, ""), text.response_stats(R2, R2_THINKING)
  # R1: 12 words, all distinct; math: 3, +, 4, add, two, numbers; 3 sentences, 1 question.
  assert (one.visible_words, one.thinking_words, one.total_words, one.unique_words) == (
      12, None, 12, 12)
  assert one.visible_math == 6 / 12 and (one.sentences, one.questions) == (3, 1)
  # R2: 9 visible words (none mathematical), 12 thinking words (8 mathematical); distinct
  # over both: the 9 visible and the, student, added, 3, and, 4, check, +, =, 7.
  assert (two.visible_words, two.thinking_words, two.total_words, two.unique_words) == (
      9, 12, 21, 19)
  assert two.visible_math == 0.0 and two.thinking_math == pytest.approx(8 / 12)
  assert (two.sentences, two.questions) == (2, 1)
  s = text.summarize([one, two])
  assert (s.visible, s.thinking, s.total, s.unique) == (10.5, 12.0, 16.5, 15.5)
  assert s.visible_math == 0.25 and s.thinking_math == pytest.approx(2 / 3)
  assert s.question_rate == 2 / 5 and (s.responses, s.thinking_responses) == (2, 1)
  # Pooled (the paper's Total): three texts of 12, 9 and 12 words, 12, 9, 10 distinct.
  pooled = text.summarize([one, two], total="pooled")
  assert pooled.total == 11.0 and pooled.unique == pytest.approx(31 / 3)


# -- The codebook ------------------------------------------------------------------------------

def test_the_codebook_is_table_5():
  assert len(CODEBOOK.codes) == 82 and [c.id for c in CODEBOOK.codes] == list(range(1, 83))
  # Table 5's parenthesised counts per major category.
  assert CODEBOOK.counts() == {
      "Mathematical Problem Solving": 15, "Mathematical Knowledge for Teaching": 14,
      "Cognition": 8, "Metacognition": 8, "Pedagogical Intent Utterance": 16,
      "Student Intent Utterance": 6, "Interaction/Discourse Patterns": 15}
  praise = CODEBOOK.code("praise")
  assert (praise.category, praise.subcategory) == ("Pedagogical Intent Utterance",
                                                    "Emotional Support")
  assert [c.subcategory for c in CODEBOOK.named("Strategy selection")] == [
      "Strategy Exploration", "Immediate Decision Making"]
  with pytest.raises(codebook_lib.CodebookError, match="more than one"):
    CODEBOOK.code("Structuring")


def test_a_bad_codebook_file_is_named_with_its_line(tmp_path):
  bad = tmp_path / "codes.tsv"
  bad.write_text("# mine\n1\tA\tB\tFirst\n2\tA\tB\n")
  with pytest.raises(codebook_lib.CodebookError, match="codes.tsv, line 3"):
    codebook_lib.load(str(bad))


# -- χ² and effect sizes -----------------------------------------------------------------------

def test_chi_square_and_cramers_v_equal_the_hand_formulas_and_scipy():
  table = np.array([[10, 20, 30], [20, 15, 5]])
  expected = np.outer(table.sum(1), table.sum(0)) / table.sum()  # 18 21 21 / 12 14 14
  chi2 = ((table - expected) ** 2 / expected).sum()
  got = significance.chi_square(table)
  assert got.chi2 == pytest.approx(chi2) == pytest.approx(18.65079, rel=1e-6)
  assert got.df == 2 and got.n == 100 and got.effect_name == "V"
  assert got.effect == pytest.approx(math.sqrt(chi2 / 100))  # min(2, 3) − 1 = 1.
  assert got.p == pytest.approx(math.exp(-chi2 / 2))  # The χ²(2) survival function.
  ref = scipy_stats.chi2_contingency(table, correction=False)
  assert (got.chi2, got.p, got.df) == pytest.approx((ref.statistic, ref.pvalue, ref.dof))
  # 2×2: φ = (ad − bc) / sqrt(row and column sums), and χ² = n φ² (no Yates correction).
  phi = significance.chi_square([[30, 10], [20, 40]])
  assert phi.effect_name == "φ"
  assert phi.effect == pytest.approx(1000 / math.sqrt(40 * 60 * 50 * 50))
  assert phi.chi2 == pytest.approx(100 * phi.effect ** 2)
  yates = scipy_stats.chi2_contingency([[30, 10], [20, 40]]).statistic  # Scipy's 2×2 default.
  assert yates < phi.chi2 - 1  # The corrected statistic would break χ² = n φ².
  # A level no side has is dropped; less than 2×2 left is an error, not a NaN.
  assert significance.chi_square([[30, 10, 0], [20, 40, 0]]) == phi
  with pytest.raises(AnalysisError, match="two levels"):
    significance.chi_square([[0, 5], [0, 7]])


def test_table_8_is_pearsons_chi_square_without_yates_correction():
  """Table 8's 2×2 comparisons by hand on a small table, where Pearson's χ² and Yates'
  corrected one differ by a third: n (ad − bc)² / (row and column sums) = 20·50² / 9900 =
  5.0505, Yates' n (|ad − bc| − n/2)² / … = 20·40² / 9900 = 3.2323; φ = 50 / √9900; the
  χ²(1) p-value erfc(√(χ²/2)) (0.0246; Yates' would be 0.0720)."""
  got = significance.chi_square([[8, 2], [3, 7]])
  assert got.chi2 == pytest.approx(50_000 / 9_900, rel=1e-9)
  assert abs(got.chi2 - 32_000 / 9_900) > 1.8  # Not the corrected statistic.
  assert got.effect == pytest.approx(50 / math.sqrt(9_900), rel=1e-9) and got.effect_name == "φ"
  assert got.p == pytest.approx(math.erfc(math.sqrt(50_000 / 9_900 / 2)), rel=1e-9)
  assert got.df == 1 and got.n == 20


def test_table_8_praise_nothink_vs_ped_is_consistent_with_the_papers_numbers():
  """A consistency check, not a proof of the statistic (the n and split below are fitted to
  the paper's χ² and φ, and Yates' correction moves χ² at this n by 3e-4 only): paper 001
  gives praise as 11.76% of NoThink's sentences and 5.78% of Ped.*'s (table 11), and table
  8 χ²(1) = 1114.37, φ = .098, without counts. The n its row implies is χ² / φ² = 116,032;
  its two numbers agree when NoThink holds 23.33% of those sentences (27,071; φ depends on
  that split alone). The table built from them gives the paper's χ² and φ."""
  n_nothink, n_ped = 27_071, 88_961
  praise = [round(0.1176 * n_nothink), round(0.0578 * n_ped)]
  table = [[praise[0], n_nothink - praise[0]], [praise[1], n_ped - praise[1]]]
  got = significance.chi_square(table)
  assert got.df == 1 and got.n == n_nothink + n_ped and got.p < 0.001
  assert got.chi2 == pytest.approx(1114.37, rel=1e-3)
  assert round(got.effect, 3) == 0.098


def test_comparisons_groups_and_contingency_tables():
  comps = significance.parse_comparisons(significance.PAPER_COMPARISONS)
  assert [c.name for c in comps] == ["Major Categories", "Math Problem Solving",
                                     "Praise (Ped vs Non-Ped)", "Praise (NoThink vs Ped.)",
                                     "Step-by-Step", "Praise (Reward effect)"]
  groups = significance.parse_groups(significance.PAPER_GROUPS)
  assert groups["Ped.*"] == ("Ped. Think NoReward", "Ped. Think Reward")
  praise, step = CODEBOOK.code("Praise").id, CODEBOOK.code("Step-by-step instruction").id
  calc = CODEBOOK.code("Performing calculations").id
  labels = {"NoThink": [praise] * 3 + [step], "Ped. Think NoReward": [praise, calc],
            "Ped. Think Reward": [step, step, calc]}
  table, levels = significance.contingency_table(comps[3], labels, groups, CODEBOOK)
  assert levels == ["Praise", "rest"] and table.tolist() == [[3, 1], [1, 4]]
  table, levels = significance.contingency_table(
      significance.Comparison("x", "NoThink", "Ped.*", "table4"), labels, groups, CODEBOOK)
  assert levels[-1] == "Other" and table.tolist() == [[0, 0, 4, 0, 0], [2, 0, 3, 0, 0]]
  with pytest.raises(AnalysisError, match="names no analysed condition"):
    significance.members("Think*", groups, list(labels))
  # In the job, such a comparison is reported as not run; columns fall back to conditions.
  result = summary.SchemeResult("codebook", labels, {c: {} for c in labels})
  (t,) = summary.run_tests(comps[2:3], {"codebook": result}, groups, CODEBOOK)
  assert t.result is None and "'Think*' names no analysed condition" in t.skipped
  (t,) = summary.run_tests(comps[3:4], {"codebook": result}, groups, CODEBOOK)
  assert t.result.chi2 == pytest.approx(significance.chi_square([[3, 1], [1, 4]]).chi2)
  assert [c.name for c in summary.columns("NoThink,Think*,Ped.*", list(labels), groups)] == [
      "NoThink", "Ped.*"]
  assert [c.name for c in summary.columns("Think*", ["A", "B"], groups)] == ["A", "B"]
  for bad in ("Praise: A vs B", "Praise: A versus B: code=Praise", "P: A vs B: codes"):
    with pytest.raises(AnalysisError, match="--config.comparisons"):
      significance.parse_comparisons(bad)


def test_table_11_lists_codes_in_the_first_columns_order_as_the_paper():
  """Table 11's rows descend in NoThink: Praise (11.76) above Hint provision (9.42),
  though Hint's mean over the three columns is higher (10.15 against 8.62). Here column A
  has praise 4/10, hint 3/10, concept 3/10; column B hint 6/10, concept 4/10: means 0.2,
  0.45, 0.35. By A, praise first; hint and concept tie there and go by their means."""
  praise, hint = CODEBOOK.code("Praise").id, CODEBOOK.code("Hint provision").id
  concept = CODEBOOK.code("Concept explanation").id
  labels = {"A": [praise] * 4 + [hint] * 3 + [concept] * 3, "B": [hint] * 6 + [concept] * 4}
  result = summary.SchemeResult("codebook", labels, {c: {} for c in labels})
  cols = summary.columns("A,B", ["A", "B"], {})
  names = lambda rank: [code.name for code, _ in summary.top_codes(result, cols, CODEBOOK, 2,
                                                                   0.95, rank)]
  assert names("first") == ["Praise", "Hint provision"]
  assert names("mean") == ["Hint provision", "Concept explanation"]
  assert settings_lib.AnalysisSettings().top_codes_rank == "first"
  with pytest.raises(ValueError, match="top_codes_rank 'median'"):
    settings_lib.AnalysisSettings(top_codes_rank="median")


def test_shares_carry_wilson_intervals_and_kappa_is_cohens():
  s, z = significance.share(5, 100, 0.95), scipy_stats.norm.ppf(0.975)
  p, n = 0.05, 100
  centre = (p + z * z / (2 * n)) / (1 + z * z / n)
  half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
  assert (s.value, s.low, s.high) == pytest.approx((0.05, centre - half, centre + half))
  # po = 3/4, pe = .5 · .25 + .5 · .75 = .5: κ = .5; texts without both labels are left out.
  first = {"a": 1, "b": 1, "c": 2, "d": 2, "e": None}
  second = {"a": 1, "b": 2, "c": 2, "d": 2, "e": 1, "f": 1}
  assert significance.kappa(first, second) == (pytest.approx(0.5), 4)
  # A column of two groups: the mean of shares, its normal interval.
  a, b = significance.share(10, 100, 0.95), significance.share(30, 100, 0.95)
  avg = summary.averaged([a, b], 0.95)
  sd = math.sqrt(0.1 * 0.9 / 100 + 0.3 * 0.7 / 100) / 2
  assert (avg.value, avg.low, avg.high) == pytest.approx((0.2, 0.2 - z * sd, 0.2 + z * sd))


# -- The labeller ------------------------------------------------------------------------------

@pytest.mark.parametrize("reply, code", [
    ('{"code": 50}', 50), ('```json\n{"code": "50"}\n```', 50), ("The code: 41.", 41),
    ('I pick "code": 13 because it checks', 13), ('{"code": "Praise"}', 50),
    ('{"code": "Strategy selection"}', None), ('{"code": 83}', None), ('{"code": true}', None),
    ("Praise", None), ("", None)])
def test_code_replies_parse_or_fail(reply, code):
  assert CODEBOOK.code("Praise").id == 50
  assert labelling.parse_code(reply, CODEBOOK) == code


@pytest.mark.parametrize("reply, phase", [
    ('{"phase": "Verify"}', "Verify"), ('{"phase": "explore"}', "Explore"), ("General", "General"),
    ("phase: verify, since it checks", "Verify"), ('{"phase": "Plan"}', None), ("ok", None)])
def test_phase_replies_parse_or_fail(reply, phase):
  assert labelling.parse_phase(reply) == phase


def test_the_labellers_prompts_render_with_every_code():
  prompt = labelling.prompt_for("codebook", "analysis/codebook", "Well done!", CODEBOOK)
  assert '"""Well done!"""' in prompt and "50. Pedagogical Intent Utterance > Emotional " \
      "Support > Praise" in prompt and "82. " in prompt
  assert "Explore" in labelling.prompt_for("schoenfeld", "analysis/schoenfeld", "Hm.", CODEBOOK)
  assert set(n for n in prompts.SOURCES if n.startswith("analysis/")) == {
      "analysis/codebook", "analysis/schoenfeld"}
  tiny = os.path.join(jobs.ROOT, "testdata", "analysis", "codebook_tiny.jinja")
  assert "1 to 82" in labelling.prompt_for("codebook", tiny, "x", CODEBOOK)
  with pytest.raises(labelling.LabelError, match="n_codes. is undefined"):
    labelling.prompt_for("schoenfeld", tiny, "x", CODEBOOK)  # Not a Schoenfeld prompt.


class Garbage:
  """Answers a valid code for texts with 'ok' in them, garbage for the rest."""

  def __init__(self):
    self.asked = []

  def complete(self, requests, round_=0):
    self.asked += [(r.text, round_) for r in requests]
    return ['{"code": 50}' if "ok" in r.text else "lorem ipsum {" for r in requests]


def test_a_labeller_returning_garbage_is_counted_not_filled():
  stats, backend = asking.AskStats(), Garbage()
  rows = labelling.label_texts(["ok 1", "bad 1", "ok 2", "bad 2"], "codebook",
                               "analysis/codebook", backend, 3, CODEBOOK, stats)
  assert [r.label for r in rows] == [50, None, 50, None]
  assert [r.cause for r in rows] == [None, "parse_failures", None, "parse_failures"]
  assert rows[1].reply == "lorem ipsum {"
  assert backend.asked.count(("bad 1", 2)) == 1 and ("ok 1", 1) not in backend.asked
  assert (stats["requests"], stats["replies"], stats["parse_failures"], stats["reasks"]) == (
      4, 8, 6, 4)
  result = summary.SchemeResult("codebook", {"A": [r.label for r in rows]},
                                {"A": {"parse_failures": 2}})
  praise = result.shares("A", [50])[50]
  assert (praise.count, praise.n) == (2, 2)  # Failures are in no share's denominator.


def test_a_label_beats_an_earlier_failure_whichever_shard_file_holds_them(tmp_path):
  """A failure under 2 shards, retried and labelled under 3: the label's file sorts first
  (shard-00000-of-00003 < shard-00001-of-00002), yet the cache gives the label."""
  store = labelling.LabelStore(str(tmp_path))
  text_ = "Let's add the two numbers."
  k = labelling.key(text_)
  store.append([labelling.LabelRow(k, text_, None, "parse_failures", "lorem")], 1, 2)
  store.append([labelling.LabelRow(k, text_, 50)], 0, 3)
  assert sorted(os.listdir(tmp_path)) == ["shard-00000-of-00003.jsonl",
                                          "shard-00001-of-00002.jsonl"]
  cache = store.read()
  assert (cache[k].label, cache[k].cause) == (50, None)
  assert labelling.pending([text_], cache, labelling.shard_of(k, 3), 3,
                           retry_failures=True) == []
  # Within one file the later row wins: a relabelled text keeps its newest label.
  store.append([labelling.LabelRow(k, text_, 12)], 0, 3)
  assert store.read()[k].label == 12


@pytest.mark.job
def test_an_openai_labeller_sends_max_completion_tokens_and_counts_failures(monkeypatch):
  monkeypatch.setenv("PEDRL_TEST_LABEL_KEY", "sk-test-not-a-secret")
  monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
  server = ChatServer([("reply", "no idea"), ("reply", '{"phase": "Verify"}'),
                       ("reply", "still no idea")])
  try:
    client = openai_compat.OpenAIBackend(openai_compat.EndpointSettings(
        model="gpt-5-mini", base_url=server.url, api_key_env="PEDRL_TEST_LABEL_KEY",
        max_concurrency=1, temperature=1.0, max_tokens=64,
        max_tokens_field="max_completion_tokens"))
    stats = asking.AskStats()
    rows = labelling.label_texts(["Let me check 3 + 4."], "schoenfeld", "analysis/schoenfeld",
                                 client, 3, CODEBOOK, stats)
    assert rows[0].label == "Verify" and stats["parse_failures"] == 1
    body, _ = server.bodies[0]
    assert body["max_completion_tokens"] == 64 and "max_tokens" not in body
    rows = labelling.label_texts(["Maybe."], "schoenfeld", "analysis/schoenfeld", client, 1,
                                 CODEBOOK, stats)
    assert rows[0].label is None and rows[0].cause == "parse_failures"
  finally:
    server.close()


def test_units_sampling_and_the_shard_split():
  rs = [responses.Response("A", "p/0", 0, "Hi there. What is 2 + 2?", "First add.\n\nThen check."),
        responses.Response("A", "p/0", 1, "Good!", "")]
  assert [u.text for u in labelling.units("A", rs, "codebook")] == [
      "Hi there.", "What is 2 + 2?", "Good!"]
  assert [u.text for u in labelling.units("A", rs, "schoenfeld", "paragraph")] == [
      "First add.", "Then check."]
  many = [labelling.Unit("A", i, f"s{i}") for i in range(50)]
  picked = labelling.sample(many, 10, 0, "codebook")
  assert len(picked) == 10 and picked == labelling.sample(many, 10, 0, "codebook")
  assert picked != labelling.sample(many, 10, 1, "codebook") and picked == sorted(
      picked, key=lambda u: u.response)
  texts = [f"sentence {i}" for i in range(40)]
  halves = [labelling.pending(texts, {}, i, 2, False) for i in range(2)]
  assert sorted(halves[0] + halves[1]) == sorted(texts) and not set(halves[0]) & set(halves[1])
  cache = {labelling.key(texts[0]): labelling.LabelRow(labelling.key(texts[0]), texts[0], None,
                                                        "parse_failures")}
  assert texts[0] not in labelling.pending(texts, cache, 0, 1, False)
  assert texts[0] in labelling.pending(texts, cache, 0, 1, True)


def test_runs_and_bad_workdirs_are_named(tmp_path):
  assert responses.parse_runs("NoThink=/a, Ped. Think Reward=/b") == {
      "NoThink": "/a", "Ped. Think Reward": "/b"}
  for bad, why in (("A", "runs: 'A' is not NAME=WORKDIR"), ("A=/x,A=/y", "named twice")):
    with pytest.raises(AnalysisError, match=why):
      responses.parse_runs(bad)
  with pytest.raises(AnalysisError, match="no eval_dialogues.jsonl"):
    responses.load("A", str(tmp_path))


def test_a_baseline_data_workdir_gives_its_dialogues_and_no_evaluation(tmp_path):
  """baseline_data shards as the evaluations do (kind `baselines`) and writes dialogues.jsonl:
  the analysis reads that file; the report refuses the workdir with one line."""
  from pedrl.env import dialogue as dialogue_lib
  from pedrl.eval import shards
  from pedrl.tools import report
  workdir = tmp_path / "baselines"
  status = {"protocol": {"kind": "baselines", "num_shards": 1}, "finished": True}
  files.write_json(shards.status_path(str(workdir), 0, 1), status)
  (workdir / "shards" / "records-00000-of-00001.jsonl").write_text("")
  d = Dialogue(problem_id="p0", problem="What is 12 + 30?", answer="42", scenario="guided",
               rollout=0, messages=[Message(TUTOR, "Great job! What is 12 + 30?"),
                                    Message(STUDENT, "42")])
  dialogue_lib.save_jsonl([d], str(workdir / "dialogues.jsonl"), mode="w")
  assert [r.visible for r in responses.load("A", str(workdir))] == ["Great job! What is 12 + 30?"]
  with pytest.raises(shards.ShardError, match=rf"{workdir}: not an evaluation workdir \(its "
                                              r"shards are a 'baselines' job's"):
    report.report([str(workdir)], str(tmp_path / "out"))


# -- Data views --------------------------------------------------------------------------------

def test_solve_rate_buckets_and_the_dataset_table():
  edges = [0.01, 0.1, 0.2, 0.6]
  counts = data_views.bucket_counts([0.0, 0.01, 0.05, 0.1, 0.6, 0.7], edges)
  assert dict(counts) == {"<1%": 1, "1-10%": 2, "10-20%": 1, "20-60%": 1, ">60%": 1}
  path = os.path.join(jobs.ROOT, "testdata", "problems", "bigmath_sample.jsonl")
  v = data_views.ViewSettings(problems_path=path, filter=False, n_train=20, n_test=5)
  train, test = data_views.split_problems(v)
  # The jobs' split (problems.split=train/test, the training configs' split seed 0), whatever
  # seed the analysis samples sentences with; views.split_seed moves it.
  pool = dict(path=path, filter=False, n_train=20, n_test=5, split_seed=0)
  assert (train, test) == tuple(problems.load(problems.ProblemSettings(split=s, **pool),
                                              seed=7)[0] for s in ("train", "test"))
  assert data_views.split_problems(dataclasses.replace(v, split_seed=1))[1] != test
  # The released splits, as given: no split here.
  published = os.path.join(jobs.ROOT, "testdata", "problems", "bigmath_published_sample.jsonl")
  given = data_views.split_problems(dataclasses.replace(v, test_path=published, n_test=11))
  assert [[p.problem for p in half] for half in given] == [
      [json.loads(x)["problem"] for x in open(f)] for f in (path, published)]
  with pytest.raises(AnalysisError, match="11 rows, but the published test split has 5"):
    data_views.split_problems(dataclasses.replace(v, test_path=published))
  rows = data_views.by_source(train)
  assert sum(r[1] for r in rows) == len(train) and rows[0][0] == "Orca_math"
  orca = [p.solve_rate for p in train if p.source == "orca_math"]
  assert rows[0][2] == pytest.approx(np.mean(orca))
  assert "| Total | 19 |" in data_views.dataset_table(train, test)


def _config(variant, **overrides):
  from absl import flags
  from ml_collections import config_flags
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=fv)
  fv(["test", f"--config={os.path.join(jobs.ROOT, 'experiments', 'analyze.py')}:{variant}"])
  for key, value in overrides.items():
    section, _, leaf = key.rpartition("__")
    (fv.config[section] if section else fv.config)[leaf] = value
  return fv.config


def test_the_configs_read_completely_and_carry_the_papers_settings():
  from absl import app
  from pedrl.experiments import analyze
  paper = analyze.read(_config("paper"))  # Every key read (else a UsageError).
  (first,) = paper.labellers  # Section 4.2: GPT-5-mini, one labeller.
  assert (first.openai.model, first.openai.max_tokens_field) == (
      "gpt-5-mini", "max_completion_tokens")
  assert first.label.names == ("codebook", "schoenfeld") and first.openai.temperature == 1.0
  assert paper.analysis.comparisons == significance.PAPER_COMPARISONS
  assert paper.analysis.columns == "NoThink,Think*,Ped.*"  # Tables 4 and 11's columns.
  tiny = analyze.read(_config("tiny"))
  assert [(x.role, x.label.backend) for x in tiny.labellers] == [("label", "rule"),
                                                                 ("label2", "local")]
  with pytest.raises(app.UsageError, match="--config.label: rounds"):
    analyze.read(_config("tiny", label__rounds=0))
  with pytest.raises(app.UsageError, match="thinking_unit"):
    analyze.read(_config("tiny", thinking_unit="word"))
  with pytest.raises(app.UsageError, match="label2.local.path"):
    analyze.read(_config("tiny", **{"label2.local__path": "/nowhere"}))


def _training_run(workdir, g, rewards, seconds, r_sol):
  """A training workdir's metrics.jsonl (as the trainer writes its rows) and dialogues."""
  os.makedirs(workdir)
  with open(workdir / "metrics.jsonl", "w") as f:
    for step, (r, (a, b)) in enumerate(zip(rewards, seconds), 1):
      f.write(json.dumps({"step": step, "reward/total": r, "seconds/rollout": a,
                          "seconds/update": b, "time": 1e9 + step, "loss": 0.1}) + "\n")
  with open(workdir / "dialogues.jsonl", "w") as f:
    for step, rates in enumerate(r_sol, 1):
      for x in rates:
        f.write(json.dumps({"step": step, "r_sol": x}) + "\n")
  return f"{g}={workdir}"


def test_the_rollout_sweep_reads_the_runs_and_draws_paper_000_fig_3(tmp_path):
  runs = [_training_run(tmp_path / "g2", 2, [-1.0, -0.5], [(3.0, 1.0), (2.0, 2.0)],
                        [[0.0, 0.5], [1.0, 1.0]]),
          _training_run(tmp_path / "g4", 4, [-0.8, -0.2], [(6.0, 2.0), (5.0, 3.0)],
                        [[0.25], [0.5, 0.75]])]
  os.makedirs(tmp_path / "e4")
  (tmp_path / "e4" / "metrics.json").write_text(json.dumps(
      {"delta_solve_rate": 0.2, "delta_solve_rate_ci": [0.1, 0.3], "leak_rate": 0.25}))
  v = data_views.ViewSettings(sweep=",".join(reversed(runs)), sweep_evals=f"4={tmp_path / 'e4'}")
  got = data_views.read_sweep(v)
  assert [r.group_size for r in got] == [2, 4]  # In G order, whatever the order given.
  assert got[0].seconds == [4.0, 4.0] and got[1].seconds == [8.0, 8.0]
  assert got[0].solve == [0.25, 1.0] and got[1].solve == [0.25, 0.625]
  assert got[1].evaluation["leak_rate"] == 0.25 and got[0].evaluation == {}
  table = data_views.sweep_table(got)
  assert "| 2 | 2 | 0.002 | -0.500 | – |" in table
  assert "| 4 | 2 | 0.004 | -0.200 | 0.200 |" in table
  plt = pytest.importorskip("matplotlib.pyplot")
  fig = data_views.sweep_figure(plt, got, "test")
  titles = [ax.get_title() for ax in fig.axes]
  assert "wall seconds per step" in titles and "Δ solve rate (evaluation)" in titles
  plt.close(fig)
  with pytest.raises(AnalysisError, match="metrics.jsonl does not exist"):
    data_views.read_sweep(data_views.ViewSettings(sweep=f"8={tmp_path / 'none'}"))
  with pytest.raises(AnalysisError, match="views.sweep: 'G8' is not a group size"):
    data_views.read_sweep(data_views.ViewSettings(sweep=f"G8={tmp_path / 'g2'}"))


# -- The job -------------------------------------------------------------------------------

NOTHINK = [  # Praise-heavy, no thinking.
    ["Great job! What is 12 + 30?", "Well done. Now divide 42 by 6.", "Excellent!"],
    ["Nice work! Can you add the two numbers?", "Exactly. Let's check: 5 * 3 = 15."],
]
THINK = [  # Fewer praise, steps and hints, with thinking.
    ["First, write down what you know. What is the total?", "Remember the formula for area."],
    ["Next, multiply 4 by 7. Try it yourself.", "Think about what the question asks. Good."],
]
THOUGHTS = ["The student needs the total. Maybe start with the sum.\n\nCheck: 12 + 30 = 42.",
            "Let me verify 4 * 7 = 28. Perhaps a hint about units."]


def write_evaluation(workdir, turns, thinking=()):
  """An evaluation workdir of real EvalRecords (eval_dialogues.jsonl) with these tutor turns."""
  records = []
  for i, tutor in enumerate(turns):
    messages = []
    for j, t in enumerate(tutor):
      th = thinking[(i + j) % len(thinking)] if thinking else ""
      messages += [Message(TUTOR, t, thinking=th, raw=f"<think>{th}</think>{t}" if th else t),
                   Message(STUDENT, "Is it 42?", raw="Is it 42?")]
    d = Dialogue(problem_id=f"p{i}", problem="What is 12 + 30?", answer="42", scenario="guided",
                 rollout=0, messages=messages)
    records.append(records_lib.EvalRecord(f"p{i}", 0, i, 0.25, 0.5, ["OK"], ["OK"], [], [], d))
  os.makedirs(workdir, exist_ok=True)
  records_lib.save(records, os.path.join(workdir, "eval_dialogues.jsonl"), mode="w")
  return str(workdir)


def _analyze(workdir, *overrides):
  cmd = jobs.cmd("analyze", workdir, *overrides)
  out = subprocess.run(cmd, capture_output=True, text=True, env=jobs.env(), cwd=jobs.ROOT,
                       timeout=600)
  assert out.returncode == 0, out.stderr[-3000:]
  return out


def _label_rows(workdir, role, scheme):
  rows = []
  for folder in os.listdir(os.path.join(workdir, "labels", role)):
    if folder.startswith(scheme):
      for name in os.listdir(os.path.join(workdir, "labels", role, folder)):
        with open(os.path.join(workdir, "labels", role, folder, name)) as f:
          rows += [json.loads(line) for line in f]
  return rows


@pytest.mark.job
def test_tiny_analysis_writes_every_table_and_figure_and_labels_nothing_twice(tmp_path):
  a = write_evaluation(tmp_path / "a", NOTHINK)
  b = write_evaluation(tmp_path / "b", THINK, THOUGHTS)
  out = tmp_path / "analysis"
  rules = ("--config.label2.backend=", "--config.figures=False", f"--config.runs=A={a},B={b}")
  first = _analyze(out, *rules, "--config.eval.num_shards=2", "--config.eval.shard=0")
  assert "waiting for" in first.stdout and not os.path.exists(out / "analysis.json")
  _analyze(out, *rules, "--config.eval.num_shards=2", "--config.eval.shard=1")
  rows = _label_rows(out, "label", "codebook")
  visible = [s for turns in NOTHINK + THINK for t in turns for s in text.sentences(t)]
  assert sorted(r["text"] for r in rows) == sorted(set(visible))  # Each text once.
  with open(out / "analysis.json") as f:
    result = json.load(f)
  # Tables 3 and 9 from the records equal the statistics of the hand-written turns.
  want = text.summarize([text.response_stats(t, "") for turns in NOTHINK for t in turns])
  assert result["responses"]["A"]["visible"] == pytest.approx(want.visible)
  assert result["responses"]["A"]["thinking"] is None and result["responses"]["B"]["thinking"]
  praise = CODEBOOK.code("Praise").id
  rule = labelling.RuleLabeller(CODEBOOK)
  a_praise = sum(rule.label("codebook", s)["code"] == praise
                 for turns in NOTHINK for t in turns for s in text.sentences(t))
  assert result["shares"]["codebook"]["codes"]["A"][str(praise)]["count"] == a_praise == 5
  tests = {t["comparison"]["name"]: t for t in result["tests"]}
  assert tests["Praise"]["table"][0][0] == a_praise and tests["Praise"]["df"] == 1
  phases = result["shares"]["schoenfeld"]["phases"]["B"]
  assert set(phases) == {"Explore", "General", "Verify"}
  # Rerun as one shard with a third condition and the whole tiny config (the tiny local model
  # as a second labeller, a seeded sample of 3 units per condition): the first labeller asks
  # for C's one new sentence only; the second's noise is counted as failures, never filled.
  c = write_evaluation(tmp_path / "c", [["Brand new sentence here. Excellent!"]])
  _analyze(out, f"--config.runs=A={a},B={b},C={c}", "--config.sample=3")
  again = _label_rows(out, "label", "codebook")
  assert len(again) == len(rows) + 1  # "Excellent!" was labelled already.
  assert len({r["key"] for r in again}) == len(again)
  for name in ("response_statistics", "major_categories", "top_codes", "schoenfeld_phases",
               "chi_square", "shares", "reliability", "dataset"):
    assert os.path.getsize(out / "tables" / f"{name}.md") > 0
  for name in ("response_lengths", "math_content", "schoenfeld_phases", "categories",
               "top_codes", "praise", "solve_rates"):
    assert os.path.getsize(out / "figures" / f"{name}.png") > 10_000
  with open(out / "analysis.json") as f:
    rel = {(r["role"], r["scheme"]): r for r in json.load(f)["reliability"]}
  second = rel["label2", "codebook"]
  assert second["units"] == 3 + 3 + 2 and second["labelled"] + second["failures"] == 8
  assert sum(second["causes"].values()) == second["failures"]
  assert rel["label", "codebook"]["failures"] == 0
