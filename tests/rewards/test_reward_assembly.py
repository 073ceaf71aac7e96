"""Weighted reward components per dialogue, the hard penalty, and the pipeline's order."""
import collections

import numpy as np
import pytest

from pedrl.env import solving
from pedrl.env.dialogue import STUDENT, TUTOR, Dialogue, Message, TurnScore, Verdict
from pedrl.rewards import assemble, backends, judging, pedagogy, pipeline, template


def _dialogue(uid, tutor="<think>plan</think>What do you get?", student="7",
              end="end_of_conversation", r_sol=0.5, r_ped=1.0, r_think=None):
  d = Dialogue(problem_id=f"p{uid}", problem="3 + 4?", answer="7", scenario="guided",
               rollout=0, uid=uid, end_reason=end, r_sol=r_sol,
               messages=[Message(role=TUTOR, text="What do you get?", raw=tutor),
                         Message(role=STUDENT, text=student, raw=student)])
  d.judgement = Verdict(decisions={}, scores={}, r_ped=r_ped, r_think=r_think)
  return d


def _turn(reward):
  return TurnScore(message=0, potential=0.0, semantic=None, progress=0.0, zpd_level=0, level=0,
                   scaffold=0.0, reward=reward)


def test_parse_components():
  assert assemble.parse_components("r_sol:1, pedagogy:1,template:0.5") == (
      ("r_sol", 1.0), ("pedagogy", 1.0), ("template", 0.5))
  assert assemble.parse_components("uco") == (("uco", 1.0),)
  with pytest.raises(ValueError, match="not one of"):
    assemble.parse_components("r_sol:1,leak:1")
  with pytest.raises(ValueError, match="weight"):
    assemble.parse_components("r_sol:high")


def test_components_add_up_to_the_papers_rewards():
  s003 = assemble.RewardSettings()  # r_sol + pedagogy + template, λ = 0.75.
  for r_ped in (1.0, 0.0):
    d = _dialogue(0, r_ped=r_ped)
    values = assemble.components(d, s003)
    want = pedagogy.pedagogical_rl_reward(0.5, r_ped, 0.75) + template.template_reward(
        [d.messages[0].raw], True, False)
    assert assemble.total(values, d, s003) == pytest.approx(want)
  s001 = assemble.RewardSettings(components=assemble.parse_components("r_sol,pedagogy,thinking"))
  d = _dialogue(0, r_ped=1.0, r_think=0.9)
  assert assemble.total(assemble.components(d, s001), d, s001) == pytest.approx(
      pedagogy.thinking_reward(0.5, 1.0, 0.9))


def test_hard_penalty_replaces_the_rest_but_not_the_length_penalty():
  hard = assemble.RewardSettings(hard=True, lam=1.5)
  d = _dialogue(0, r_ped=0.0, r_sol=None, end="max_turns")
  d.messages[0].finish_reason = "length"
  values = assemble.components(d, hard)
  assert values == {"r_sol": 0.0, "pedagogy": 0.0, "template": -0.5}
  assert assemble.total(values, d, hard) == pytest.approx(-1.5 - 0.5)
  mixed = assemble.RewardSettings(components=(("uco", 1.0), ("template", 1.0)), hard=True)
  assert assemble.components(d, mixed)["uco"] == 0.0  # No turn rewards needed: replaced by -λ.


def test_uco_component_is_the_discounted_return():
  s = assemble.RewardSettings(components=(("uco", 2.0),), gamma=0.5)
  d = _dialogue(0)
  d.turn_rewards = [_turn(1.0), _turn(0.4)]
  values = assemble.components(d, s)
  assert values["uco"] == pytest.approx(1.0 + 0.5 * 0.4)
  assert assemble.total(values, d, s) == pytest.approx(2.4)
  d.turn_rewards = []
  with pytest.raises(ValueError, match="no UCO turn rewards"):
    assemble.components(d, s)


def test_missing_inputs_are_errors_not_zeros():
  d = _dialogue(0, r_sol=None)
  with pytest.raises(ValueError, match="no r_sol"):
    assemble.components(d, assemble.RewardSettings())


def test_pipeline_skips_solving_for_hard_rejections_and_drops(monkeypatch):
  solved = []
  def fake_solve(dialogues, student, settings, seed):
    solved.extend(d.uid for d in dialogues)
    for d in dialogues:
      d.r_sol = 1.0
  monkeypatch.setattr(solving, "post_dialogue", fake_solve)
  leak = _dialogue(0, tutor="The answer is 7.", r_sol=None)
  leak.messages[0].text = "The answer is 7."
  ok = _dialogue(1, r_sol=None)
  p = pipeline.RewardPipeline(assemble.RewardSettings(hard=True), None, solving.SolveSettings(),
                              judging.PEDAGOGICAL_RL[:1], backends.RuleBackend(), seed=0)
  stats = p([leak, ok]).stats
  assert solved == [1] and p.stats["hard_rejected"] == 1
  assert leak.rewards.total == pytest.approx(-0.75) and leak.r_sol is None
  assert ok.rewards.total == pytest.approx(1.0 + 0.0 + ok.rewards.components["template"])
  assert stats["total"][0] == pytest.approx(np.mean([leak.rewards.total, ok.rewards.total]))

  class Garbage:
    def complete(self, requests, round_=0):
      return ["??"] * len(requests)
  solved.clear()
  a, b = _dialogue(2, r_sol=None), _dialogue(3, r_sol=None)
  p = pipeline.RewardPipeline(assemble.RewardSettings(), None, solving.SolveSettings(),
                              judging.PEDAGOGICAL_RL, Garbage(), judge_rounds=1,
                              on_judge_failure="drop", seed=0)
  stats = p([a, b]).stats
  assert solved == [] and a.dropped and not a.rewards
  assert p.stats["dropped"] == 2 and p.stats["judge/policy/drop"] == 8  # 2 x 2 judges x 2.
  assert np.isnan(stats["total"][0])


class _CountingRules:
  """The rule judges, with a running total like an API backend's retries."""

  def __init__(self):
    self.rules, self.stats = backends.RuleBackend(), collections.Counter()

  def complete(self, requests, round_=0):
    self.stats["retries"] += len(requests)
    return self.rules.complete(requests, round_)


def test_batch_counts_hold_the_latest_call_and_stats_the_totals(monkeypatch):
  monkeypatch.setattr(solving, "post_dialogue", lambda ds, student, settings, seed: None)
  leak = _dialogue(0, tutor="The answer is 7.", r_sol=1.0)
  leak.messages[0].text = "The answer is 7."
  p = pipeline.RewardPipeline(assemble.RewardSettings(hard=True), None, solving.SolveSettings(),
                              judging.PEDAGOGICAL_RL[:1], _CountingRules(), seed=0)
  batch = p([leak, _dialogue(1, r_sol=1.0)])
  assert batch.counts == {"judge/requests": 4, "judge/replies": 4, "dropped": 0,
                           "hard_rejected": 1, "judge_backend/retries": 4}
  batch = p([_dialogue(2, r_sol=1.0)])
  assert batch.counts == {"judge/requests": 2, "judge/replies": 2, "dropped": 0,
                           "hard_rejected": 0, "judge_backend/retries": 2}
  assert p.stats == {"judge/requests": 6, "judge/replies": 6, "dropped": 0,
                     "hard_rejected": 1, "judge_backend/retries": 6}


def test_pipeline_flags_policy_values_and_bounds_their_share(monkeypatch):
  monkeypatch.setattr(solving, "post_dialogue", lambda ds, student, settings, seed: None)

  class Garbage:
    def complete(self, requests, round_=0):
      return ["??"] * len(requests)
  a = _dialogue(0)
  p = pipeline.RewardPipeline(assemble.RewardSettings(), None, solving.SolveSettings(),
                              judging.PEDAGOGICAL_RL[:1], Garbage(), judge_rounds=1, seed=0)
  p([a])
  # The default policy is the reference's: unparsed after every round counts as OK, flagged.
  assert a.judgement.filled == {"leakage": [True, True]} and a.judgement.r_ped == 1.0
  strict = pipeline.RewardPipeline(assemble.RewardSettings(), None, solving.SolveSettings(),
                                   judging.PEDAGOGICAL_RL[:1], Garbage(), judge_rounds=1,
                                   max_failed_share=0.5, seed=0)
  b = _dialogue(1)
  with pytest.raises(judging.JudgeError, match="2 of 2 leakage judge answers.*parse_failures 2"):
    strict([b])
  assert b.judgement.r_ped == 1.0  # Untouched: no verdict was written.
  assert strict.stats == {"judge/requests": 2, "judge/replies": 2,
                                "judge/parse_failures": 2}


def test_pipeline_refuses_an_incomplete_configuration():
  with pytest.raises(ValueError, match="judge backend"):
    pipeline.RewardPipeline(assemble.RewardSettings(), None, solving.SolveSettings(), seed=0)
  with pytest.raises(ValueError, match="thinking-quality judge"):
    pipeline.RewardPipeline(
        assemble.RewardSettings(components=(("thinking", 1.0),)), None, solving.SolveSettings(),
        judging.PEDAGOGICAL_RL, backends.RuleBackend(), seed=0)
  with pytest.raises(ValueError, match="uco component needs"):
    pipeline.RewardPipeline(assemble.RewardSettings(components=(("uco", 1.0),)), None,
                            solving.SolveSettings(), seed=0)
