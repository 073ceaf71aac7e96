"""The offline baselines' pieces against independent references: the DPO loss and gradient
by hand, SFT's loss against transformers, the pairs and the deduplication of hand-made
groups, the thinking mask against the tokenizer, and a DPO and an SFT step on 8 devices
against one."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pedrl import models
from pedrl.env.dialogue import Dialogue, Message, Rewards, Verdict
from pedrl.rl import batch as batch_lib, dpo, offline_data, sft, update
from pedrl.rl.offline_data import AcceptedDialogue, PreferencePair

sigmoid = lambda x: 1.0 / (1.0 + math.exp(-x))


# -- DPO by hand ---------------------------------------------------------------------------------

def test_dpo_loss_and_gradient_by_hand_with_the_tutor_mask(monkeypatch):
  """Two pairs of 3-token sequences and a filler pair; the model's per-token log-probs are
  the variables (policy_logprobs returns them), so the gradient is d loss / d log π."""
  beta = 0.5
  logp = np.asarray([[[-1.0, -2.0, -9.0], [-9.0, -0.5, -1.5]],   # pair 0: chosen, rejected
                     [[-0.2, -9.0, -0.3], [-1.0, -1.0, -0.5]],   # pair 1
                     [[-5.0, -5.0, -5.0], [-1.0, -1.0, -1.0]]],  # filler: counts for nothing
                    np.float32)
  mask = np.asarray([[[1, 1, 0], [0, 1, 1]],  # 0: a student token in each sequence
                     [[1, 0, 1], [1, 1, 1]],
                     [[1, 1, 1], [1, 1, 1]]], bool)
  ref = np.asarray([[-3.5, -1.0], [-1.0, -2.0], [-3.0, -3.0]], np.float32)
  part = dpo.PairBatch(tokens=np.zeros((3, 2, 3), np.int32), attn_mask=np.ones((3, 2, 3), bool),
                       loss_mask=mask, ref_logp=ref, valid=np.asarray([True, True, False]))
  monkeypatch.setattr(update, "policy_logprobs", lambda model, params, tokens, attn, t: params)
  objective = dpo.DPOObjective(beta=beta)
  (num_pairs,) = objective.totals(part)
  assert num_pairs == 2

  def loss(flat):
    return objective.loss(None, flat, part, (np.float32(num_pairs),))

  (value, sums), grad = jax.value_and_grad(loss, has_aux=True)(jnp.asarray(logp.reshape(6, 3)))
  # Δ = Σ_masked log π − log π_ref. Pair 0: chosen −3 − (−3.5) = 0.5, rejected −2 − (−1) = −1,
  # z = β(0.5 + 1) = 0.75. Pair 1: chosen −0.5 + 1 = 0.5, rejected −2.5 + 2 = −0.5, z = 0.5.
  z = [0.75, 0.5]
  want = (math.log1p(math.exp(-z[0])) + math.log1p(math.exp(-z[1]))) / 2
  assert float(value) == pytest.approx(want, rel=1e-6)
  # d loss / d log π of a counted token: ∓β σ(−z) / 2 (chosen −, rejected +); 0 off the mask
  # and on the filler pair.
  g = [beta * sigmoid(-x) / 2 for x in z]
  want_grad = np.asarray([[[-g[0], -g[0], 0], [0, g[0], g[0]]],
                          [[-g[1], 0, -g[1]], [g[1], g[1], g[1]]],
                          [[0, 0, 0], [0, 0, 0]]])
  np.testing.assert_allclose(np.asarray(grad).reshape(3, 2, 3), want_grad, rtol=1e-6, atol=1e-8)
  # The implicit rewards β·Δ: chosen 0.25, 0.25; rejected −0.5, −0.25: both pairs ordered.
  m = objective.metrics({**sums, "loss": value}).to_row()
  assert float(m["rewards/chosen"]) == pytest.approx(0.25)
  assert float(m["rewards/rejected"]) == pytest.approx(-0.375)
  assert float(m["rewards/margins"]) == pytest.approx(0.625)
  assert float(m["rewards/accuracies"]) == 1.0 and float(m["pairs"]) == 2.0


def test_dpo_loss_is_log2_for_equal_log_ratios():
  assert float(dpo.dpo_loss(jnp.float32(0.3), jnp.float32(0.3), 0.1)) == pytest.approx(
      math.log(2.0))


# -- SFT against transformers -------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(testdata):
  cfg, model, params = models.load(testdata("qwen2"))
  return model, params


def _sequences(rows=3, width=20, seed=0):
  """Token rows of different lengths, each with a tutor mask that skips a 'student' span."""
  rng = np.random.default_rng(seed)
  out = []
  for i, n in enumerate((width, width - 6, width - 3)[:rows]):
    mask = np.zeros(n, bool)
    mask[5:] = True
    mask[8 + i:11 + i] = False
    out.append(offline_data.TutorSequence(i, rng.integers(3, 900, size=n).astype(np.int32), mask))
  return out


def test_sft_loss_equals_transformers_cross_entropy_on_the_masked_batch(tiny, testdata):
  import torch
  import transformers
  model, params = tiny
  batch = batch_lib.from_sequences(_sequences())
  objective = sft.SFTObjective(micro_batch=2)
  totals = tuple(np.float32(x) for x in objective.totals(batch))
  got, sums = objective.loss(model, params, batch, totals)
  hf = transformers.AutoModelForCausalLM.from_pretrained(testdata("qwen2"),
                                                         dtype=torch.float32).eval()
  tokens = torch.tensor(batch.tokens, dtype=torch.long)
  labels = torch.where(torch.tensor(batch.loss_mask), tokens, torch.tensor(-100))
  with torch.no_grad():
    out = hf(input_ids=tokens, attention_mask=torch.tensor(batch.attn_mask, dtype=torch.long),
             labels=labels)  # Shifted cross-entropy, mean over the labels that are not -100.
  assert float(got) == pytest.approx(float(out.loss), rel=1e-5)
  assert float(sums["tokens"]) == batch.loss_mask.sum() == (15 + 9 + 12) - 3 * 3


# -- Pairs and accepted dialogues of hand-made groups ---------------------------------------------

def _dialogue(uid, total=None, r_ped=1.0, tutor=("Hi", "Why?"), problem="p", dropped=False):
  d = Dialogue(problem_id=problem, problem="q", answer="1", scenario="guided", rollout=uid % 5,
               uid=uid, messages=[Message("tutor", t.strip(), raw=t) for t in tutor])
  d.dropped = dropped
  if not dropped:  # A rejected dialogue: one judge sample said REJECT.
    d.judgement = Verdict(decisions={"leakage": [True, r_ped == 1.0]}, scores={}, r_ped=r_ped)
    d.rewards = Rewards({}, total)
  return d


def test_pairs_of_a_hand_made_group_drop_ties_and_dropped_dialogues():
  group = [_dialogue(10, 1.0), _dialogue(11, 0.5), _dialogue(12, 1.0), _dialogue(13, dropped=True),
           _dialogue(14, -1.0)]
  pairs, ties = offline_data.group_pairs(group, 2, rule="reward_order")
  assert ties == 1  # 10 and 12: equal rewards.
  pair = lambda a, ra, b, rb: PreferencePair("p", 2, a, b, ra, rb)
  assert pairs == [pair(10, 1.0, 11, 0.5), pair(10, 1.0, 14, -1.0), pair(12, 1.0, 11, 0.5),
                   pair(11, 0.5, 14, -1.0), pair(12, 1.0, 14, -1.0)]
  pairs, ties = offline_data.group_pairs(group, 2, min_margin=0.5,  # 0.5 apart is a tie now.
                                         rule="reward_order")
  assert [(p.chosen, p.rejected) for p in pairs] == [(10, 14), (11, 14), (12, 14)] and ties == 3


def test_accepted_dialogues_are_deduplicated_by_tutor_text_within_a_problem():
  group = [_dialogue(5, 0.5, tutor=("Hi ", "Why?")),  # Same tutor text as 3 (ends stripped).
           _dialogue(3, 0.5, tutor=("Hi", "Why?\n")),
           _dialogue(4, 0.5, tutor=("Hi", "How?")),
           _dialogue(6, 0.5, r_ped=0.0),  # Rejected by a judge.
           _dialogue(7, dropped=True)]
  accepted, duplicates = offline_data.accepted_dialogues(group, 0)
  assert accepted == [AcceptedDialogue("p", 0, 3, 0.5, duplicates=1),
                      AcceptedDialogue("p", 0, 4, 0.5)] and duplicates == 1
  other = [_dialogue(8, 0.5, tutor=("Hi", "Why?"), problem="q")]  # Another problem's context.
  assert [a.uid for a in offline_data.accepted_dialogues(other, 1)[0]] == [8]
  # `build` groups by uid // G and counts.
  group = [_dialogue(u, r, problem=f"p{u // 2}") for u, r in ((0, 1.0), (1, 0.0), (2, 0.5),
                                                                (3, 0.5))]
  pairs, accepted, counts = offline_data.build(group, group_size=2, pairs_rule="reward_order")
  assert [(p.group, p.chosen, p.rejected) for p in pairs] == [(0, 0, 1)]
  assert counts == offline_data.Counts(problems=2, dialogues=4, dropped=0, pairs=1, ties=1,
                                       accepted=2, duplicates=2, filled=0)  # Same tutor text.


def test_pairs_by_default_are_judge_accepted_against_judge_rejected_dialogues():
  """Paper 003 A.3's (D_acc, D_rej) with r(D_acc) > r(D_rej), "chosen and rejected
  conversations scored by judges" (5.4): only an accepted dialogue against a rejected one
  rewarded less; two accepted or two rejected dialogues make no pair whatever their
  rewards, and a rejection a failure policy filled in is no judge's."""
  group = [_dialogue(0, 1.0), _dialogue(1, 0.2, r_ped=0.0), _dialogue(2, 0.5),
           _dialogue(3, 0.8, r_ped=0.0), _dialogue(4, 0.1, r_ped=0.0), _dialogue(5, 0.9)]
  filled = group[4].judgement
  filled.filled = {"leakage": [False, True]}  # Its only REJECT is the policy's.
  pairs, unordered = offline_data.group_pairs(group, 0)
  assert [(p.chosen, p.rejected) for p in pairs] == [(0, 1), (0, 3), (2, 1), (5, 1), (5, 3)]
  assert unordered == 1  # 2 (0.5) is not above 3 (0.8).
  by_reward = offline_data.group_pairs(group, 0, rule="reward_order")[0]
  assert len(by_reward) == 15 and (0, 2) in {(p.chosen, p.rejected) for p in by_reward}
  *_, counts = offline_data.build(group, group_size=6)
  assert (counts.pairs, counts.unordered, counts.ties) == (5, 1, 0)
  with pytest.raises(ValueError, match="pairs='all' is not one of"):
    offline_data.group_pairs(group, 0, rule="all")


def test_a_decision_a_failure_policy_filled_in_accepts_no_dialogue():
  """on_judge_failure=accept fills an unparsed judge's decision with OK (Verdict.filled):
  r_ped = 1, yet no judge accepted it; it stays out of the SFT set, counted."""
  judged = _dialogue(0, 0.5)
  judged.judgement = Verdict(decisions={"leakage": [True, True], "helpfulness": [True, True]},
                             scores={}, r_ped=1.0,
                             filled={"leakage": [False, False], "helpfulness": [False, False]})
  filled = _dialogue(1, 0.5, tutor=("Hi", "How?"))
  filled.judgement = Verdict(decisions={"leakage": [True, True], "helpfulness": [True, True]},
                             scores={}, r_ped=1.0,
                             filled={"leakage": [False, True], "helpfulness": [False, False]})
  assert offline_data.is_accepted(judged) and not offline_data.is_accepted(filled)
  _, accepted, counts = offline_data.build([judged, filled], group_size=2)
  assert [a.uid for a in accepted] == [0] and (counts.accepted, counts.filled) == (1, 1)


def test_the_sft_set_from_pairs_keeps_accepted_dialogues_in_a_pair_once():
  """sft_source=pairs: group 0's accepted dialogues 0, 2 and 3 are each in pairs (1 is a
  judge's reject); group 1's rewards all tie, so it has no pair and gives none."""
  texts = lambda u: ("Hi", f"Step {u}?")  # Distinct tutor texts: no duplicates by text.
  d = lambda u, r, ped=1.0: _dialogue(u, r, r_ped=ped, tutor=texts(u), problem=f"p{u // 4}")
  dialogues = [d(0, 1.0), d(1, 0.5, ped=0.0), d(2, 0.2), d(3, 1.0),  # 0 and 3 tie.
               d(4, 0.7), d(5, 0.7), d(6, 0.7), d(7, 0.7, ped=0.0)]  # All tie: no pair.
  pairs, every, _ = offline_data.build(dialogues, group_size=4, pairs_rule="reward_order")
  assert {(p.chosen, p.rejected) for p in pairs} == {(0, 1), (0, 2), (1, 2), (3, 1), (3, 2)}
  assert [a.uid for a in every] == [0, 2, 3, 4, 5, 6]  # Every accepted dialogue.
  _, from_pairs, counts = offline_data.build(dialogues, group_size=4, sft_source="pairs",
                                             pairs_rule="reward_order")
  # Accepted (not 1) and in a pair, each once though 0, 2 and 3 are in several; none of
  # group 1, whose rewards all tie.
  assert [a.uid for a in from_pairs] == [0, 2, 3] and counts.accepted == 3
  with pytest.raises(ValueError, match="sft_source='chosen' is not one of"):
    offline_data.build(dialogues, group_size=4, sft_source="chosen")


def test_thinking_mask_covers_a_turn_up_to_its_last_think_close(testdata):
  from pedrl.tokenizer import load_tokenizer
  tok = load_tokenizer(testdata("qwen2"))
  think = tok.encode("<think>plan the hint</think>", add_special_tokens=False)
  visible = tok.encode("What is 2+2?", add_special_tokens=False)
  ids = [7, 8] + think + visible + [9]
  d = Dialogue(problem_id="p", problem="q", answer="4", scenario="guided", rollout=0,
               tutor_ids=ids, tutor_mask=[0, 0] + [1] * (len(think) + len(visible)) + [0],
               messages=[Message("tutor", "What is 2+2?", thinking="plan the hint",
                                 span=(2, 2 + len(think) + len(visible)))])
  mask = offline_data.thinking_mask(d, tok.decode)
  assert mask.tolist() == [False] * 2 + [True] * len(think) + [False] * (len(visible) + 1)
  seq = offline_data.sequence(d, thinking=False, decode=tok.decode)
  assert seq.loss_mask.tolist() == [False] * (2 + len(think)) + [True] * len(visible) + [False]
  assert offline_data.sequence(d, tokens="all").loss_mask.tolist() == [False] + [True] * (
      len(ids) - 1)


# -- 8 devices against 1 -------------------------------------------------------------------------

def _pairs(model, params):
  seqs = _sequences()
  logp = lambda tokens, attn: np.asarray(update.policy_logprobs(model, params, tokens, attn, 1.0))
  # Reference log-probs a little off the policy's: the first step has a gradient.
  shift = lambda rows: np.float32(0.1) * (np.arange(rows) % 2 - 0.5)[:, None]
  return dpo.build([(seqs[0], seqs[1]), (seqs[2], seqs[0]), (seqs[1], seqs[2])],
                   lambda t, a: logp(t, a) - shift(t.shape[0]))


def _mesh_step_equals_one_device_step(model, params, batch, objective,
                                     mesh=dict(data=1, fsdp=2, tensor=4)) -> tuple:
  """One update of `batch` on one device and on a mesh of 8 (by default 2 FSDP × 4 tensor
  shards): the same weights; (metrics on one device, on the mesh)."""
  from pedrl import sharding
  # A large eps keeps Adam's first step linear in the gradient (see test_grpo).
  opt = update.make_optimizer(update.lr_schedule(1e-3, "cosine", 10), eps=1.0)
  start = jax.tree.map(jnp.copy, params)
  want, _, want_m = update.train_step(model, start, update.init_optimizer(opt, start), opt,
                                      batch, objective)
  mesh = sharding.make_mesh(**mesh)
  start = jax.device_put(jax.tree.map(jnp.copy, params), sharding.param_shardings(params, mesh))
  got, _, got_m = update.train_step(model, start, update.init_optimizer(opt, start), opt, batch,
                                    objective, mesh)
  skipped, want_m, got_m = want_m.skipped, want_m.to_row(), got_m.to_row()
  for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-7)
  assert not bool(skipped) and want_m["grad_norm"] > 0
  for k in want_m:
    assert got_m[k] == pytest.approx(want_m[k], rel=1e-4, abs=1e-6), k
  return want_m, got_m


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_a_dpo_step_on_the_mesh_equals_the_single_device_step(tiny):
  """DPO's pair rows ([N, 2, T], filler pairs marked invalid) through the shared update."""
  model, params = tiny  # On 2 FSDP shards: 2 micro-batches of 2 pairs, one pair filled.
  want_m, got_m = _mesh_step_equals_one_device_step(
      model, params, _pairs(model, params), dpo.DPOObjective(beta=0.1, micro_batch=1))
  assert want_m["pairs"] == got_m["pairs"] == 3  # Each pair once, whatever the filler rows.


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_an_sft_step_on_the_mesh_equals_the_single_device_step(tiny):
  """SFT's sequence rows (3 of different lengths, filler rows with no counted token) and
  its per-token mean, whose divisor is the whole batch's count on every shard; on 8 batch
  shards (2 data × 4 FSDP), which compiles faster than a tensor-parallel mesh."""
  model, params = tiny
  batch = batch_lib.from_sequences(_sequences())
  want_m, got_m = _mesh_step_equals_one_device_step(model, params, batch,
                                                    sft.SFTObjective(micro_batch=2),
                                                    dict(data=2, fsdp=4, tensor=1))
  assert want_m["tutor_tokens"] == got_m["tutor_tokens"] == batch.loss_mask.sum()


def test_each_offline_job_gives_every_member_of_the_method_protocol():
  """offline.Method is a typing.Protocol: nothing is inherited, so a job that leaves a
  member out (MDPO's options_type, SFT's reference) would fail only when the trainer reads it."""
  import typing
  from pedrl.jobs import offline
  from pedrl.experiments import mdpo as mdpo_job, sft as sft_job
  members = [*typing.get_type_hints(offline.Method), "items", "batch"]
  assert len(members) == 8
  for method in (sft_job.SFT(), mdpo_job.MDPO()):
    assert [m for m in members if not hasattr(method, m)] == [], method


# -- Bad input, before any model loads ---------------------------------------------------------

def test_offline_jobs_refuse_bad_input_in_one_line_before_loading(tmp_path, testdata, monkeypatch):
  import json
  from absl import app
  from pedrl import paths
  from pedrl.env import party
  from pedrl.jobs import offline
  from pedrl.experiments import sft as sft_job
  monkeypatch.setattr(party, "load", lambda *a, **k: pytest.fail("a model was loaded"))
  data = tmp_path / "data"
  data.mkdir()
  (data / "config.json").write_text(json.dumps({"tutor": {"path": testdata("qwen2")}}))
  (data / "accepted.jsonl").write_text("")
  cases = [({"data.workdir": str(tmp_path / "none")}, "has no accepted.jsonl"),
           ({"tutor.path": testdata("llama3")}, "its token ids are another tokenizer's"),
           ({"train.lr": float("nan")}, "--config.train.lr=nan: must be a finite number > 0"),
           ({"train.tokens": "some"}, "tokens 'some' is not one of ('tutor', 'all')"),
           ({}, "holds no items: nothing to train on")]
  for overrides, message in cases:
    c = paths.load_config("sft.py", "tiny")
    c.data.workdir = str(data)
    for key, value in overrides.items():
      section, name = key.split(".")
      c[section][name] = value
    with pytest.raises(app.UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
      offline.build(c, sft_job.SFT(), str(tmp_path / "run"))
