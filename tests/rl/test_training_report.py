"""What a training run tells a researcher, without running one: sample dialogues as text,
the signal warnings, dialogue records kept across a restart, the learning rate per step.
(test_training checks the same on a real tiny run's workdir.)"""
import json
import logging
import re
import types

import jax.numpy as jnp
import numpy as np
import pytest

from pedrl.env import dialogue
from pedrl.env.dialogue import STUDENT, TUTOR, Dialogue, Message, Rewards, TurnScore, Verdict
from pedrl.jobs import metric_log, samples
from pedrl.rewards import assemble
from pedrl.rl import batch as batch_lib, loop, trainer, update


def _record(uid=0, step=1, problem_id="p7", **fields):
  """A judged, solved and scored dialogue whose tutor thinks, once says nothing visible."""
  return Dialogue(
      problem_id=problem_id, problem="Ana has 3 apples and buys 4 more. How many now?",
      answer="7", scenario="guided", rollout=1, uid=uid, step=step, end_reason="max_turns",
      messages=[
          Message(TUTOR, "What do you know about the apples?", thinking="Start from what she has.",
                  num_tokens=20),
          Message(STUDENT, "She has 3 and buys 4.", num_tokens=9),
          Message(TUTOR, "", thinking="The student is close;\nlet them add.", num_tokens=24,
                  finish_reason="length")],
      judgement=Verdict(decisions={"leakage": [True, True], "helpfulness": [False, True]},
                        scores={"thinking": [0.75]}, r_ped=0.0, r_think=0.75,
                        filled={"leakage": [False, False], "helpfulness": [True, False],
                                "thinking": [False]},
                        reasons={"leakage": ["The answer 7 is not stated.", None],
                                 "helpfulness": [None, "Asks the student to add;\nno steps."]}),
      post_answers=["7", None], post_correct=[True, False], r_sol=0.5,
      turn_rewards=[TurnScore(message=0, potential=0.1, semantic=0.2, progress=0.25, zpd_level=2,
                              level=1, scaffold=0.5, reward=0.75)],
      rewards=Rewards(components={"r_sol": 0.5, "pedagogy": -0.75, "thinking": 0.045},
                      total=-0.205), **fields)


SOFT = assemble.RewardSettings(components="r_sol:1,pedagogy:1,thinking:1")


def test_a_sample_shows_problem_thinking_verdicts_attempts_components_and_advantage():
  text = samples.describe(_record(), SOFT, advantage=-0.70710678)
  lines = text.splitlines()
  assert lines[0] == "## problem p7, rollout 1 (uid 0), guided, step 1"
  assert "Problem: Ana has 3 apples and buys 4 more. How many now?" in lines
  assert "Reference answer: 7" in lines
  assert ("Reward -0.205 = r_sol +0.500 pedagogy -0.750 thinking +0.045; advantage -0.707"
          in lines)
  judges = next(line for line in lines if line.startswith("Judges:"))
  assert "leakage OK OK; helpfulness REJECT* OK; thinking 0.75 -> r_ped 0, r_think 0.75" in judges
  assert "filled in by rewards.on_judge_failure" in judges
  at = lines.index(judges)  # Each reason under its verdict line, a long one indented.
  assert lines[at + 1:at + 4] == ["  leakage sample 1: The answer 7 is not stated.",
                                  "  helpfulness sample 2: Asks the student to add;",
                                  "                        no steps."]
  assert ("Solve attempts after the dialogue: 7 right, (no boxed answer) wrong -> r_sol 0.5"
          in lines)
  # Every message, the tutor's thinking above its visible text; an empty one marked.
  first = text.index("[1] Teacher (20 tokens)")
  assert text.index("  thinking: Start from what she has.") > first
  assert "  What do you know about the apples?" in lines
  assert "  UCO turn reward +0.750 = progress +0.250 + scaffold +0.500 (level 1, ZPD 2)" in lines
  assert "[2] Student (9 tokens)" in lines and "  She has 3 and buys 4." in lines
  third = lines.index("[3] Teacher (24 tokens, cut at max_new_tokens)")
  assert lines[third + 1:third + 4] == ["  thinking: The student is close;",
                                        "            let them add.", "  " + samples.EMPTY]
  assert "Tutor thinking: none" not in text


def test_a_sample_without_thinking_or_rewards_says_so():
  d = _record(dropped=True)
  d.rewards, d.judgement, d.post_answers, d.post_correct, d.r_sol = None, None, [], [], None
  for m in d.messages:
    m.thinking = ""
  text = samples.describe(d, SOFT, advantage=None)
  assert "Reward: none (dropped by the judge failure policy); advantage none" in text
  assert "Judges: not judged" in text and "Solve attempts after the dialogue: none" in text
  assert "Tutor thinking: none" in text and "  thinking:" not in text


@pytest.mark.parametrize("settings, line", [
    # The hard variant (paper 003): the rejected dialogue's −λ is a term of its own.
    (assemble.RewardSettings(components="r_sol:1,pedagogy:1,thinking:1", hard=True, lam=1.0),
     "Reward -1.000 = r_sol +0.000 pedagogy +0.000 thinking +0.000 hard_penalty -1.000"),
    # Weights other than 1: the weighted value, and what it weighs.
    (assemble.RewardSettings(components="r_sol:2,pedagogy:0.5"),
     "Reward +0.625 = r_sol +1.000 (2 × +0.500) pedagogy -0.375 (0.5 × -0.750)"),
])
def test_a_samples_reward_terms_add_up_to_its_total(settings, line):
  d = _record()
  d.rewards = None
  assemble.assign([d], settings)  # The trainer's rewards for the judged, solved dialogue.
  shown = next(x for x in samples.describe(d, settings).splitlines() if x.startswith("Reward"))
  assert shown.startswith(line), shown
  head, terms = shown.split("; advantage")[0].split(" = ")
  values = [float(x) for x in re.findall(r"[a-z_]+ ([+-]\d+\.\d+)", terms)]
  assert sum(values) == pytest.approx(float(head.split()[1])) == pytest.approx(d.rewards.total)


def test_samples_are_spread_over_different_problems():
  assert trainer.sample_rows(16 * 8, 8, 4) == [0, 5 * 8 + 1, 10 * 8 + 2, 15 * 8 + 3]
  assert trainer.sample_rows(4, 2, 4) == [0, 3]  # Two problems: one dialogue of each.
  assert trainer.sample_rows(6, 2, 1) == [0]
  for rows, g, n in ((128, 8, 4), (64, 4, 16), (30, 3, 7)):
    picked = trainer.sample_rows(rows, g, n)
    assert len({r // g for r in picked}) == len(picked) == min(n, rows // g)


def _batch(advantages, mask=None):
  a = np.asarray(advantages, np.float32)
  mask = np.ones(a.shape, bool) if mask is None else np.asarray(mask, bool)
  z = np.zeros(a.shape, np.float32)
  return batch_lib.TrainBatch(tokens=z.astype(np.int32), attn_mask=mask, loss_mask=mask,
                              advantages=a, old_logp=z, ref_logp=z)


def test_zero_spread_share_counts_groups_without_any_advantage():
  # Groups of 2: the first has spread, the second none, the third only on an untrained token.
  b = _batch([[1, 1], [-1, -1], [0, 0], [0, 0], [0, 0.5], [0, 0]],
             mask=[[1, 1], [1, 1], [1, 1], [1, 1], [1, 0], [1, 1]])
  assert trainer.zero_spread_share(b, 2) == pytest.approx(2 / 3)
  assert trainer.mean_advantages(b) == [1.0, -1.0, 0.0, 0.0, 0.0, 0.0]
  assert trainer.mean_advantages(_batch([[2, 4]], mask=[[0, 0]])) == [None]


def _row(**overrides):
  """A step's learning signal, given by its metrics.jsonl names."""
  row = {"signal/zero_spread_groups": 0.25, "kl": 0.003, "sampler_trainer_logp_diff": 1e-6,
         **overrides}
  return trainer.LearningSignal(row["signal/zero_spread_groups"], row["kl"],
                                row["sampler_trainer_logp_diff"])


def _metrics(signal):
  """A step's metrics around `signal` (what record() reads besides is not looked at)."""
  rewards = assemble.BatchRewards({"total": assemble.Spread(0.5, 0.1)})
  return trainer.StepMetrics(
      step=1, problem_uids=(0,), rewards=rewards, loss=0.0, skipped_updates=0,
      skipped_values={}, clip_fraction=0.0, grad_norm=1.0, first_pass_ratio=1.0,
      signal=signal, advantage_mean=0.0, advantage_std=1.0, entropy=1.0,
      mean_tutor_tokens=10.0, mean_turns=4.0, dropped=0, judges_accept_rate=None,
      tokens_per_second=1.0, seconds={}, lr=None, time=0.0)


def test_a_step_without_signal_logs_a_warning_naming_numbers_and_field(caplog):
  s = trainer.TrainSettings()
  warn = trainer.SignalWarnings(s)
  with caplog.at_level(logging.WARNING):
    assert warn(4, _row()) == {}
  assert not caplog.records
  with caplog.at_level(logging.WARNING):
    found = warn(5, _row(**{"signal/zero_spread_groups": 0.75}))
  assert list(found) == ["zero_spread"] and len(caplog.records) == 1
  message = caplog.records[0].getMessage()
  assert caplog.records[0].levelno == logging.WARNING
  assert message == ("step 5: 75% of groups have no reward spread (rl.warn_zero_spread=0.5): "
                     "only the KL term moves them (not repeated while it lasts)")
  caplog.clear()
  with caplog.at_level(logging.WARNING):  # Still low: not logged again; KL and the gap are new.
    warn(6, _row(kl=2.5, sampler_trainer_logp_diff=0.03, **{"signal/zero_spread_groups": 0.75}))
  messages = [r.getMessage() for r in caplog.records]
  assert len(messages) == 2 and all(len(m) < 130 for m in messages), messages
  assert "KL to the reference 2.5 per token" in messages[0] and "rl.warn_kl=1" in messages[0]
  assert "sampler_trainer_logp_diff 0.03" in messages[1]
  assert "rl.warn_logp_diff=0.01" in messages[1]
  caplog.clear()
  with caplog.at_level(logging.WARNING):  # Gone for a step, then back: logged again.
    warn(7, _row())
    warn(8, _row(**{"signal/zero_spread_groups": 1.0}))
  assert [r.getMessage()[:20] for r in caplog.records] == ["step 8: 100% of grou"]
  assert warn.summary(5) == ("learning-signal warnings: kl on 1 of 5 steps, logp_diff on 1 of 5 "
                             "steps, zero_spread on 3 of 5 steps")
  assert trainer.SignalWarnings(s).summary(3) is None  # Nothing lasted: nothing to add.
  # The bounds are settings: a share of 1 never warns.
  assert trainer.signal_warnings(_row(**{"signal/zero_spread_groups": 1.0}),
                                 trainer.TrainSettings(warn_zero_spread=1.0)) == {}
  with pytest.raises(ValueError, match="warn_zero_spread"):
    trainer.TrainSettings(warn_zero_spread=1.5)
  with pytest.raises(ValueError, match="warn_kl"):
    trainer.TrainSettings(warn_kl=float("nan"))


class _Writer:
  """What Trainer.record hands the writer."""

  def __init__(self):
    self.rows, self.sampled, self.kept = [], [], []

  def write(self, step, metrics):
    self.rows.append(step)

  def samples(self, step, dialogues, advantages, reward_settings):
    assert reward_settings is SOFT
    self.sampled.append((step, [d.problem_id for d in dialogues], advantages))

  def dialogues(self, dialogues):
    self.kept.append(len(dialogues))


def test_record_writes_samples_of_different_problems_records_and_warnings(caplog):
  run = object.__new__(trainer.Trainer)  # Only what record() touches.
  run.settings = trainer.TrainSettings(samples_every=2, samples_dialogues=2, dialogues_every=3)
  run.batch_problems, run.group_size = 3, 2
  run.writer = _Writer()
  run.signal_warnings = trainer.SignalWarnings(run.settings)
  run.rewards = types.SimpleNamespace(settings=SOFT)
  dialogues = [_record(uid=i, problem_id=f"p{i // 2}") for i in range(6)]
  advantages = [0.5, -0.5, 0.0, 0.0, None, None]
  with caplog.at_level(logging.WARNING):
    for step in (1, 2, 3):
      run.step = step
      run.record(trainer.StepResult(_metrics(_row(**{"signal/zero_spread_groups": 2 / 3})),
                                    dialogues, advantages))
  assert run.writer.rows == [1, 2, 3]
  assert run.writer.sampled == [(1, ["p0", "p2"], [0.5, None]), (2, ["p0", "p2"], [0.5, None])]
  assert run.writer.kept == [6, 6]  # Steps 1 and 3.
  # Low on all three steps: logged on the first.
  assert [r.getMessage()[:len("step 1: 67% of groups")] for r in caplog.records] == [
      "step 1: 67% of groups"]


def test_dialogue_records_of_steps_after_a_restore_are_dropped(tmp_path):
  writer = metric_log.MetricsWriter(str(tmp_path), dialogues=True)
  writer.resume(0)
  for step in (1, 2, 3):
    writer.write(step, {"step": step, "kl": 0.1 * step, "time": 1.7e9 + step})
    writer.dialogues([_record(uid=u, step=step) for u in range(2)])
  writer.close()
  path = tmp_path / "dialogues.jsonl"
  with open(path, "a", encoding="utf-8") as f:
    f.write(_record(step=4).to_json()[:50])  # A kill while step 4 was written.
  lines = path.read_text(encoding="utf-8").splitlines()
  assert [json.loads(x)["step"] for x in lines[:6]] == [1, 1, 2, 2, 3, 3] and len(lines) == 7
  again = metric_log.MetricsWriter(str(tmp_path), dialogues=True)
  again.resume(2)
  again.close()
  records = dialogue.load_jsonl(str(path))
  assert [(d.step, d.uid) for d in records] == [(1, 0), (1, 1), (2, 0), (2, 1)]
  assert records[0] == _record(uid=0, step=1)  # Typed records, as written.
  assert [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()] \
      == [1, 2]
  # The rollout job's writer leaves its own dialogues.jsonl to the rollout job.
  rollout_writer = metric_log.MetricsWriter(str(tmp_path))
  rollout_writer.resume(0)
  rollout_writer.close()
  assert len(dialogue.load_jsonl(str(path))) == 4


def test_the_learning_rate_of_a_step_follows_the_applied_updates():
  settings = update.OptimizerSettings(lr=1e-3, lr_schedule="linear", warmup_steps=2)
  schedule = update.lr_schedule(settings.lr, settings.lr_schedule, 10, settings.warmup_steps)
  optimizer = settings.optimizer(10)
  params = {"w": jnp.ones(3)}
  state = optimizer.init(params)
  for _ in range(3):
    _, state = optimizer.update({"w": jnp.ones(3)}, state, params)
  run = object.__new__(trainer.Trainer)
  run.lr_schedule, run.opt_state = schedule, state
  grpo = update.GRPOMetrics(*[np.float32(0)] * 6)
  ok, skipped = (update.UpdateMetrics(grpo, np.float32(1), np.bool_(s), np.bool_(True))
                 for s in (False, True))
  # Three applied updates: schedule(0), (1), (2); a skipped one is not on the clock.
  assert run.step_lr([ok, skipped, ok, ok]) == pytest.approx(
      np.mean([schedule(0), schedule(1), schedule(2)]))
  assert run.step_lr([ok]) == pytest.approx(float(schedule(2)))
  assert run.step_lr([skipped]) == 0.0
  run.lr_schedule = None
  assert run.step_lr([ok]) is None
  assert loop.applied_updates(state) == 3
