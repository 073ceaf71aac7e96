"""Each reward equation against values worked out by hand (papers 000, 001, 003)."""
import math

import numpy as np
import pytest

from pedrl.rewards import assemble, pedagogy, template, uco


# -- Paper 003 eq. 3-4 and paper 001 eq. 1 -------------------------------------------------

def test_pedagogical_rl_reward_soft_and_hard():
  # Soft: 0.625 + (1 - 1) * 0.75 = 0.625; 0.625 + (0 - 1) * 0.75 = -0.125.
  np.testing.assert_allclose(pedagogy.pedagogical_rl_reward([0.625, 0.625], [1, 0], 0.75),
                             [0.625, -0.125])
  # Hard: accepted keeps r_sol, rejected is -lambda whatever r_sol was.
  np.testing.assert_allclose(
      pedagogy.pedagogical_rl_reward([0.625, 1.0], [1, 0], 0.75, hard=True), [0.625, -0.75])
  with pytest.raises(ValueError, match="r_ped"):
    pedagogy.pedagogical_rl_reward(0.5, 2.0, 0.75)


def test_thinking_reward_paper_001_defaults():
  # 0.5 + (1 - 1) * 0.75 + (0.9 - 0.6) * 0.3 = 0.59
  assert pedagogy.thinking_reward(0.5, 1.0, 0.9) == pytest.approx(0.59)
  # 0.5 + (0 - 1) * 0.75 + (0.2 - 0.6) * 0.3 = -0.37
  assert pedagogy.thinking_reward(0.5, 0.0, 0.2) == pytest.approx(-0.37)


def test_judges_accept_is_a_product_over_all_samples():
  assert pedagogy.judges_accept([True, True, True, True]) == 1.0
  assert pedagogy.judges_accept([True, True, False, True]) == 0.0  # One REJECT fails r_ped.
  with pytest.raises(ValueError):
    pedagogy.judges_accept([])


# -- Paper 003 appendix B -------------------------------------------------------------------

def test_tag_checks():
  assert template.tags_correct("<think>plan</think>Hi")
  assert template.tags_correct("<think>a</think>x<think>b</think>y")
  assert not template.tags_correct("<think> </think>Hi")  # Empty block.
  assert not template.tags_correct("no tags")
  assert not template.tags_misused("no tags")
  assert template.tags_misused("<think>opened and never closed")
  assert template.tags_misused("closed</think> first")
  assert template.tags_misused("<think>a<think>b</think>")


def test_tag_checks_by_the_reference_codes_counts():
  """eth-lre/PedagogicalRL src/classroom.py get_thinking_reward: correct when a teacher
  message has as many <think> as </think> and some; −0.5 when the counts differ; order
  and emptiness are not read. Hand-computed on the reviewer's cases."""
  ref = lambda turns: template.template_reward(turns, False, False, tags="reference")
  paper = lambda turns: template.template_reward(turns, False, False)
  empty = ["<think></think>Hi", "<think>\n</think>Next"]
  assert ref(empty) == 0.5 and paper(empty) == 0.0  # 0.5 · 2/2, against no block counted.
  reversed_ = ["</think>x<think>Hi", "<think>a</think>b"]
  assert ref(reversed_) == 0.5 and paper(reversed_) == pytest.approx(0.5 * 1 / 2 - 0.5)
  assert ref(["<think>plan</think>Q", "<think>never closed", "no tags"]) == pytest.approx(
      0.5 * 1 / 3 - 0.5)
  with pytest.raises(ValueError, match="template tags 'loose'"):
    template.template_reward([], False, False, tags="loose")
  with pytest.raises(ValueError, match="template_tags 'loose'"):
    assemble.RewardSettings(template_tags="loose")


def test_template_reward_by_hand():
  turns = ["<think>plan</think>Q1", "<think>never closed", "no tags", "<think>p</think>Q2"]
  # think: 0.5 * 2/4 = 0.25; misuse: 0.5 * 1; end: 0.1; length: 0.5.
  assert template.think_format_reward(turns) == 0.25
  assert template.tag_misuse_penalty(turns) == 0.5
  assert template.template_reward(turns, True, True) == pytest.approx(0.25 - 0.5 + 0.1 - 0.5)
  assert template.template_reward(turns, False, False) == pytest.approx(-0.25)
  # Never scored (hard rejection): only the length penalty is left.
  assert template.template_reward(turns, True, True, scored=False) == -0.5
  assert template.template_reward([], False, False) == 0.0


# -- Paper 000 eqs. 3-9 -----------------------------------------------------------------------

def test_potential_score_sum_and_mean():
  cands = [[-0.1, -0.2, -0.3], [-0.05, -0.05]]
  # sum: max(-0.6, -0.1) = -0.1 -> tanh(-0.2); mean: max(-0.2, -0.05) -> tanh(-0.1).
  assert uco.potential_score(cands, reduce="sum") == pytest.approx(math.tanh(-0.2))
  assert uco.potential_score(cands, reduce="mean") == pytest.approx(math.tanh(-0.1))
  # A long candidate saturates the literal sum: 40 tokens at -0.5 -> tanh(-40) = -1.
  assert uco.potential_score([[-0.5] * 40], reduce="sum") == pytest.approx(-1.0)
  assert uco.potential_score([[-np.inf], [-np.inf, -1.0]]) == -1.0  # All at -inf.
  with pytest.raises(ValueError, match="no tokens"):
    uco.potential_score([[]])
  with pytest.raises(ValueError, match="at least one"):
    uco.potential_score([])
  with pytest.raises(ValueError, match="NaN"):
    uco.potential_score([[np.nan, -1.0], [-0.5]])


def test_semantic_score_is_max_cosine_minus_delta():
  out = [1.0, 0.0]
  cands = [[0.0, 2.0], [3.0, 3.0]]  # cos = 0 and 1/sqrt(2).
  assert uco.semantic_score(out, cands) == pytest.approx(1 / math.sqrt(2) - 0.7)
  assert uco.semantic_score(out, [[5.0, 0.0]], delta=0.0) == pytest.approx(1.0)
  with pytest.raises(ValueError, match="zero embedding"):
    uco.semantic_score([0.0, 0.0], cands)
  with pytest.raises(ValueError, match="do not match"):
    uco.semantic_score(out, [[1.0, 0.0, 0.0]])


def test_progress_reward():
  assert uco.progress_reward(-0.4, 0.2) == pytest.approx(-0.1)  # 0.5*-0.4 + 0.5*0.2
  assert uco.progress_reward(-0.4, 0.2, lam=0.9) == pytest.approx(-0.34)
  with pytest.raises(ValueError):
    uco.progress_reward(0, 0, lam=1.5)


def test_zpd_level_clamps_and_breaks_ties_low():
  assert uco.zpd_level([-5, -4, -1, -3, -2]) == 1  # argmax 2 -> one level down.
  assert uco.zpd_level([-1, -4, -3, -3, -2]) == 0  # argmax 0 -> clamped at 0.
  assert uco.zpd_level([-3, -1, -2, -1, -5]) == 0  # Tie of l1 and l3: l1 wins -> 0.
  assert uco.zpd_level([-9, -9, -9, -9, -0.5]) == 3
  with pytest.raises(ValueError, match="scaffold level"):
    uco.zpd_level([-1, -2])


def test_scaffold_reward_on_and_off_target():
  p = [-5.0, -4.0, -1.0, -3.0, -2.0]  # ZPD level 1, P(l1) = -4.
  assert uco.scaffold_reward(p, 1) == pytest.approx(1 / (1 + math.exp(4.0)) + 0.5)
  assert uco.scaffold_reward(p, 4) == pytest.approx(-0.6)  # -0.2 * |4 - 1|
  assert uco.scaffold_reward(p, 0, c=0.3) == pytest.approx(-0.3)
  with pytest.raises(ValueError, match="chosen_level"):
    uco.scaffold_reward(p, 5)


def test_turn_reward_and_discounted_returns():
  assert uco.turn_reward(0.25, -0.4) == pytest.approx(-0.15)
  # G2 = 2; G1 = 0 + 0.5*2 = 1; G0 = 1 + 0.5*1 = 1.5.
  np.testing.assert_allclose(uco.discounted_returns([1.0, 0.0, 2.0], gamma=0.5), [1.5, 1.0, 2.0])
  np.testing.assert_allclose(uco.discounted_returns([1.0, 1.0]), [1.95, 1.0])
  assert uco.discounted_returns([]).size == 0


def test_the_terms_of_eq_4_and_eq_1():
  assert pedagogy.pedagogy_penalty(0.0, 0.75) == pytest.approx(-0.75)  # (0 - 1) * 0.75
  assert pedagogy.pedagogy_penalty(1.0, 0.75) == 0.0
  assert pedagogy.thinking_term(0.9) == pytest.approx(0.09)  # (0.9 - 0.6) * 0.3
  with pytest.raises(ValueError, match="r_think"):
    pedagogy.thinking_term(1.2)
