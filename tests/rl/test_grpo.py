"""GRPO pieces against hand computation: advantages, the loss and its gradient, exact
micro-batch accumulation, and one update moving log-probs the right way."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from pedrl import models
from pedrl.env import dialogue as dialogue_lib
from pedrl.rl import batch as batch_lib
from pedrl.rl.batch import TrainBatch
from pedrl.rl import advantages, loss, update


# -- Advantages ----------------------------------------------------------------------------------

def test_group_advantages_by_hand():
  # Group 1: [1, 0] -> mean 0.5, std 0.5; group 2: [0.5, 0.5] -> 0 / (0 + eps).
  got = advantages.group_advantages([1.0, 0.0, 0.5, 0.5], group_size=2, eps=1e-4, ddof=0)
  np.testing.assert_allclose(got, [0.5 / 0.5001, -0.5 / 0.5001, 0.0, 0.0])
  # Unbiased std (TRL): [3, 1, 2] -> mean 2, std 1.
  np.testing.assert_allclose(advantages.group_advantages([3.0, 1.0, 2.0], 3, eps=0.0, ddof=1),
                             [1.0, -1.0, 0.0])
  with pytest.raises(ValueError, match="at least 2"):
    advantages.group_advantages([1.0], 1)
  with pytest.raises(ValueError, match="groups of 2"):
    advantages.group_advantages([1.0, 2.0, 3.0], 2)


def test_turn_advantages_by_hand():
  # gamma 0.5. A's turns [1, 2] -> returns [2, 2]; B's [0] -> [0]; C's [3, 1] -> [3.5, 1].
  got = advantages.turn_advantages([[1.0, 2.0], [0.0], [3.0, 1.0]], group_size=3, gamma=0.5,
                                   eps=0.0, ddof=0)
  # Turn 0: [2, 0, 3.5], mean 11/6; turn 1: [2, 1] (B has none), mean 1.5, std 0.5.
  t0 = np.asarray([2.0, 0.0, 3.5])
  t0 = (t0 - t0.mean()) / t0.std()
  np.testing.assert_allclose(got[0], [t0[0], 1.0])
  np.testing.assert_allclose(got[1], [t0[1]])
  np.testing.assert_allclose(got[2], [t0[2], -1.0])
  # Identical rollouts: no turn is better than another, whatever its depth.
  same = advantages.turn_advantages([[0.5, 0.5, 0.5]] * 4, group_size=4)
  np.testing.assert_allclose(np.concatenate(same), 0.0)
  lone = advantages.turn_advantages([[1.0, 1.0], [1.0]], group_size=2)
  assert lone[0][1] == 0.0  # Only one rollout reached turn 1.


def test_token_advantages():
  mask = [0, 0, 1, 1, 0, 1, 1, 1]
  np.testing.assert_allclose(advantages.token_advantages(mask, [(2, 4), (5, 8)], [0.5, -1.0]),
                             [0, 0, 0.5, 0.5, 0, -1, -1, -1])
  np.testing.assert_allclose(advantages.token_advantages(mask, [], 2.0),
                             [0, 0, 2, 2, 0, 2, 2, 2])
  with pytest.raises(ValueError, match="turn advantages"):
    advantages.token_advantages(mask, [(2, 4)], [0.5, 1.0])


# -- Loss ------------------------------------------------------------------------------------------

def test_k3_kl():
  lp = jnp.asarray([-1.0, -2.0, -0.3])
  np.testing.assert_array_equal(loss.k3_kl(lp, lp), 0.0)
  # d = ref - logp = 0.5: e^0.5 - 0.5 - 1.
  assert float(loss.k3_kl(jnp.float32(-1.5), jnp.float32(-1.0))) == pytest.approx(
      np.exp(0.5) - 1.5, rel=1e-6)


def _numpy_loss(theta, actions, old, ref, adv, mask, beta, eps, aggregation):
  """The objective written directly: categorical policy softmax(theta[b, t])."""
  logits = theta - theta.max(-1, keepdims=True)
  logp_all = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  logp = np.take_along_axis(logp_all, actions[..., None], -1)[..., 0]
  ratio = np.exp(logp - old)
  obj = np.minimum(ratio * adv, np.clip(ratio, 1 - eps, 1 + eps) * adv)
  d = ref - logp
  per = (-obj + beta * (np.exp(d) - d - 1)) * mask
  if aggregation == "token_mean":
    return per.sum() / mask.sum()
  return (per.sum(1) / np.maximum(mask.sum(1), 1)).mean()


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
def test_loss_and_gradient_on_a_toy_policy(aggregation):
  rng = np.random.default_rng(0)
  b, t, v = 3, 5, 4
  theta = rng.normal(size=(b, t, v))
  actions = rng.integers(v, size=(b, t))
  old = np.log(rng.uniform(0.1, 0.6, size=(b, t)))  # Ratios both inside and outside the clip.
  ref = np.log(rng.uniform(0.1, 0.6, size=(b, t)))
  adv = rng.normal(size=(b, t))
  mask = (rng.uniform(size=(b, t)) < 0.7).astype(np.float64)
  mask[0] = 0
  mask[0, 1] = 1

  def jax_loss(th):
    logp = jnp.take_along_axis(jax.nn.log_softmax(th), jnp.asarray(actions)[..., None], -1)[..., 0]
    total, norm, _ = loss.grpo_loss_terms(logp, old, ref, adv, mask, beta=0.04, eps_low=0.2,
                                          aggregation=aggregation)
    return total / norm

  with jax.default_matmul_precision("float32"):
    jax.config.update("jax_enable_x64", True)
    try:
      got = float(jax_loss(jnp.asarray(theta)))
      grad = np.asarray(jax.grad(jax_loss)(jnp.asarray(theta)))
    finally:
      jax.config.update("jax_enable_x64", False)
  want = _numpy_loss(theta, actions, old, ref, adv, mask, 0.04, 0.2, aggregation)
  assert got == pytest.approx(want, rel=1e-9)
  # Central differences of the direct computation.
  h, fd = 1e-6, np.zeros_like(theta)
  for idx in np.ndindex(theta.shape):
    up, down = theta.copy(), theta.copy()
    up[idx] += h
    down[idx] -= h
    fd[idx] = (_numpy_loss(up, actions, old, ref, adv, mask, 0.04, 0.2, aggregation)
               - _numpy_loss(down, actions, old, ref, adv, mask, 0.04, 0.2, aggregation)) / (2 * h)
  np.testing.assert_allclose(grad, fd, atol=1e-6)


def test_first_pass_ratio_is_one_and_clipping_counts():
  lp = jnp.log(jnp.asarray([[0.5, 0.2, 0.1]]))
  mask = jnp.ones_like(lp)
  total, norm, m = loss.grpo_loss_terms(lp, lp, lp, jnp.ones_like(lp), mask, beta=0.1)
  assert float(total / norm) == pytest.approx(-1.0) and float(m["kl_sum"]) == 0.0
  assert float(m["clipped_sum"]) == 0.0
  _, _, m = loss.grpo_loss_terms(lp, lp - 0.5, lp, jnp.ones_like(lp), mask, beta=0.0)
  assert float(m["clipped_sum"]) == 3.0  # Ratio e^0.5 > 1.2 everywhere.
  # Only where the clip holds: ratios 0.7, 1.3, 1.3, 0.7 with advantages +1, −1, 0, −1 clip
  # the last alone (0.7 < 0.8 with A < 0); the first and second keep ρA (min picks it).
  ratios, adv = jnp.asarray([[0.7, 1.3, 1.3, 0.7]]), jnp.asarray([[1.0, -1.0, 0.0, -1.0]])
  zeros = jnp.zeros_like(ratios)
  _, _, m = loss.grpo_loss_terms(jnp.log(ratios), zeros, zeros, adv, jnp.ones_like(ratios),
                                 beta=0.0)
  assert float(m["clipped_sum"]) == 1.0


# -- Updates on the tiny model ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny(testdata):
  cfg, model, params = models.load(testdata("qwen2"))
  return model, params


def _batch(model, params, rows=4, width=24, seed=0):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(3, 900, size=(rows, width)).astype(np.int32)
  attn = np.ones((rows, width), bool)
  attn[1, :5] = False  # A left-padded row.
  tokens[~attn] = 0
  loss_mask = np.zeros((rows, width), bool)
  loss_mask[:, 10:] = True
  loss_mask[2, 15:18] = False  # A student message inside the tutor's sequence.
  adv = np.where(loss_mask, np.asarray([1.0, -1.0, 0.5, -0.5])[:rows, None], 0.0)
  logp = np.asarray(update.policy_logprobs(model, params, tokens, attn, 1.0))
  return TrainBatch(tokens=tokens, attn_mask=attn, loss_mask=loss_mask,
                    advantages=adv.astype(np.float32), old_logp=logp, ref_logp=logp - 0.05)


def _grpo(**settings):
  """GRPO's objective at the tutor's sampling temperature 1 (logits as they are)."""
  return update.GRPOObjective(update.GRPOSettings(**settings), temperature=1.0)


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
def test_micro_batches_accumulate_to_the_full_batch_gradient(tiny, aggregation):
  model, params = tiny
  batch = _batch(model, params)
  full = _grpo(micro_batch=4, aggregation=aggregation)
  micro = _grpo(micro_batch=1, aggregation=aggregation)
  g_full, m_full = update.gradients(model, params, batch, full)
  g_micro, m_micro = update.gradients(model, params, batch, micro)
  for a, b in zip(jax.tree.leaves(g_full), jax.tree.leaves(g_micro)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-4)
  assert float(m_full["tokens"]) == float(m_micro["tokens"]) == batch.loss_mask.sum()


def test_one_update_moves_log_probs_with_the_advantage_sign(tiny):
  model, params = tiny
  batch = _batch(model, params)
  settings = _grpo(micro_batch=2, beta=0.0)
  opt = update.make_optimizer(1e-3)
  start = jax.tree.map(jnp.copy, params)  # train_step donates its params.
  new_params, _, metrics = update.train_step(model, start, opt.init(start), opt, batch, settings)
  assert metrics.objective.ratio == pytest.approx(1.0) and metrics.objective.sampler_logp_diff < 1e-5
  before = batch.old_logp
  after = np.asarray(update.policy_logprobs(model, new_params, batch.tokens,
                                            batch.attn_mask, 1.0))
  change = ((after - before) * batch.loss_mask).sum(1)
  assert change[0] > 0 and change[2] > 0  # Positive advantage: more likely.
  assert change[1] < 0 and change[3] < 0  # Negative advantage: less likely.
  assert np.isfinite(metrics.grad_norm) and isinstance(opt, optax.GradientTransformation)


def _dialogues(batch, sampler_logp):
  """Dialogues whose tutor sides are the batch's rows, with `sampler_logp` as the log-probs
  the sampler reported (0 off the loss mask, as the rollout records them)."""
  out = []
  for i in range(batch.rows):
    keep = np.asarray(batch.attn_mask[i])
    out.append(dialogue_lib.Dialogue(
        problem_id=str(i), problem="p", answer="1", scenario=dialogue_lib.GUIDED, rollout=i,
        tutor_ids=batch.tokens[i][keep].tolist(), tutor_mask=batch.loss_mask[i][keep].tolist(),
        tutor_logprobs=np.where(batch.loss_mask[i], sampler_logp[i], 0.0)[keep].tolist()))
  return out


@pytest.mark.parametrize("old", ["trainer", "sampler"])
def test_old_log_probs_from_the_training_forward_give_a_first_ratio_of_one(tiny, old):
  """A sampler whose log-probs are off by 0.3 on some tokens (as a bfloat16 decode over a
  cache can be from the full-sequence forward): with the training forward's old log-probs
  (paper 003's reference, TRL recomputing them), the first update's ratio is 1 and nothing
  clips; with the sampler's, ε = 0.2 clips that gap as if the policy had moved. The gap is
  reported either way."""
  model, params = tiny
  exact = _batch(model, params)
  shifted = exact.old_logp + np.where(np.arange(exact.tokens.shape[1]) % 3 == 0, 0.3, 0.0)
  dialogues = _dialogues(exact, shifted)
  # The builder pads each dialogue's tutor side on the right (row 1 was left-padded).
  forward = lambda p: lambda tokens, attn: np.asarray(
      update.policy_logprobs(model, p, tokens, attn, 1.0))
  advantages = [a[np.asarray(m)] for a, m in zip(exact.advantages, exact.attn_mask)]
  batch = batch_lib.build(dialogues, advantages, forward(params),
                          forward(params) if old == "trainer" else None)
  gap = batch_lib.sampler_gap(dialogues, batch)
  settings = _grpo(micro_batch=2, beta=0.0, old_logprobs=old)
  opt = update.make_optimizer(1e-3)
  start = jax.tree.map(jnp.copy, params)
  _, _, metrics = update.train_step(model, start, opt.init(start), opt, batch, settings)
  # The share of the loss's tokens that were shifted, counted on the original rows; the
  # clip holds those with a negative advantage (ratio e^−0.3 ≈ 0.74 < 1 − ε).
  mask = np.asarray(exact.loss_mask)
  shifted = mask & (np.arange(mask.shape[1]) % 3 == 0)
  shifted_share = shifted.sum() / mask.sum()
  clipped_share = (shifted & (np.asarray(exact.advantages) < 0)).sum() / mask.sum()
  if old == "trainer":
    assert float(metrics.objective.clip_fraction) == 0.0
    assert float(metrics.objective.ratio) == pytest.approx(1.0, abs=1e-5)
    assert gap == pytest.approx(0.3 * shifted_share, rel=1e-4)  # Measured, not hidden.
  else:
    assert 0 < clipped_share < shifted_share
    assert float(metrics.objective.clip_fraction) == pytest.approx(clipped_share, rel=1e-4)
    assert gap == 0.0


@pytest.mark.parametrize("poison", ["advantage", "ref_logp"])
def test_a_non_finite_update_is_skipped_and_leaves_the_state_unchanged(tiny, poison):
  model, params = tiny
  batch = _batch(model, params)
  if poison == "advantage":  # A NaN reward reaching the loss.
    batch.advantages[0, 12] = np.nan
  else:  # log-probs so far apart that the k3 KL overflows.
    batch.ref_logp[1, 12] = 1e4
  settings = _grpo(micro_batch=2)
  opt = update.make_optimizer(1e-3)
  start = jax.tree.map(jnp.copy, params)
  state = update.init_optimizer(opt, start)
  want_params = [np.asarray(x) for x in jax.tree.leaves(start)]
  want_state = [np.asarray(x) for x in jax.tree.leaves(state)]
  new_params, new_state, metrics = update.train_step(model, start, state, opt, batch, settings)
  assert bool(metrics.skipped) and bool(metrics.params_finite)
  assert not (np.isfinite(metrics.objective.loss) and np.isfinite(metrics.objective.kl) and
              np.isfinite(metrics.grad_norm))
  for got, want in zip(jax.tree.leaves(new_params), want_params):
    np.testing.assert_array_equal(np.asarray(got), want)
  for got, want in zip(jax.tree.leaves(new_state), want_state):  # Adam's count too.
    np.testing.assert_array_equal(np.asarray(got), want)
  # The same step on clean data updates as usual.
  _, _, metrics = update.train_step(model, new_params, new_state, opt, _batch(model, params),
                                    settings)
  assert not bool(metrics.skipped) and np.isfinite(metrics.objective.loss)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_a_step_sharded_over_the_mesh_equals_the_single_device_step(tiny, tmp_path):
  from pedrl import sharding
  from pedrl.rl import checkpoint
  model, params = tiny
  batch = _batch(model, params).take(slice(0, 3))
  settings = _grpo(micro_batch=1)  # 1 device: 3 micro-batches of 1 row.
  # Adam's first step is lr·g/(|g| + eps): with a small eps, lr·sign(g), which rounding
  # noise flips where g ≈ 0. A large eps keeps the step linear in g.
  opt = update.make_optimizer(update.lr_schedule(1e-3, "cosine", 10), eps=1.0)
  start = jax.tree.map(jnp.copy, params)
  want, _, want_m = update.train_step(model, start, update.init_optimizer(opt, start), opt,
                                      batch, settings)
  mesh = sharding.make_mesh(data=1, fsdp=2, tensor=4)  # 2 micro-batches of 2, one row filled.
  on_mesh = lambda p: jax.device_put(jax.tree.map(jnp.copy, p), sharding.param_shardings(p, mesh))
  start = on_mesh(params)  # A copy: donating a device_put result can delete its source.
  state = update.init_optimizer(opt, start)
  layout = jax.tree.map(lambda x: x.sharding, (start, state))
  got, state, got_m = update.train_step(model, start, state, opt, batch, settings, mesh)
  want_m, got_m = want_m.to_row(), got_m.to_row()
  for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-7)
  for k in want_m:
    assert got_m[k] == pytest.approx(want_m[k], rel=1e-4, abs=1e-6), k
  # Params and optimizer state keep their layout (donated buffers reused, no recompiles
  # downstream), also after a checkpoint round trip: a resumed run steps on.
  assert jax.tree.map(lambda x: x.sharding, (got, state)) == layout
  assert state[1][0].mu["layers"]["attn"]["q"]["kernel"].sharding.spec == P(None, "fsdp", "tensor")
  ckpt = checkpoint.Checkpoints(str(tmp_path))
  ckpt.save(1, {"params": got, "opt_state": state}, {"model": {}})
  fresh = on_mesh(params)
  _, restored, _ = ckpt.restore({"params": fresh, "opt_state": update.init_optimizer(opt, fresh)},
                                {})
  ckpt.close()
  again, state, _ = update.train_step(model, restored["params"], restored["opt_state"], opt, batch,
                                      settings, mesh)
  assert jax.tree.map(lambda x: x.sharding, (again, state)) == layout
  micro = update.micro_batches(batch, 1, mesh)
  assert micro.tokens.shape[:2] == (2, 2) and not micro.loss_mask[1, 1].any()
  assert micro.tokens.sharding.spec == P(None, sharding.BATCH, None)


def test_lr_schedules():
  const = update.lr_schedule(1e-3)
  assert float(const(0)) == float(const(500)) == pytest.approx(1e-3)
  warm = update.lr_schedule(1e-3, "linear", total_updates=12, warmup=2)
  assert [float(warm(i)) for i in (0, 1, 2, 7, 12)] == pytest.approx([0, 5e-4, 1e-3, 5e-4, 0])
  cos = update.lr_schedule(1e-3, "cosine", total_updates=10)
  assert float(cos(5)) == pytest.approx(5e-4) and float(cos(10)) == pytest.approx(0, abs=1e-12)
  with pytest.raises(ValueError, match="schedule"):
    update.lr_schedule(1e-3, "step")


def test_dialogue_advantages_mix_components_and_skip_dropped():
  from pedrl.env.dialogue import Dialogue, Message, Rewards, TurnScore
  from pedrl.rewards import assemble
  from pedrl.rl import trainer

  def dialogue(total, uco_value=None, turns=(), dropped=False):
    d = Dialogue(problem_id="p", problem="q", answer="1", scenario="guided", rollout=0,
                 messages=[Message(role="tutor", text="a", span=(1, 3)),
                           Message(role="student", text="b"),
                           Message(role="tutor", text="c", span=(4, 6))],
                 tutor_ids=list(range(6)), tutor_mask=[0, 1, 1, 0, 1, 1])
    if not dropped:
      d.rewards = Rewards({"uco": uco_value} if uco_value is not None else {}, total)
      d.turn_rewards = [TurnScore(message=0, potential=0, semantic=None, progress=0,
                                  zpd_level=0, level=0, scaffold=0, reward=r) for r in turns]
    d.dropped = dropped
    return d
  s = trainer.TrainSettings(advantage="turn", advantage_eps=0.0, advantage_ddof=0)
  rewards = assemble.RewardSettings(components=(("uco", 1.0), ("template", 1.0)), gamma=1.0)
  # Totals = uco + template; template differs (0, -0.5); one rollout dropped.
  group = [dialogue(1.0, 1.0, (0.5, 0.5)), dialogue(0.5, 1.0, (0.5, 0.5)),
           dialogue(0, dropped=True)]
  a, b, c = trainer.dialogue_advantages(group, 3, s, rewards)
  # Same turn rewards: the turn part is 0; the rest (0 vs -0.5) gives +1 / -1.
  np.testing.assert_allclose(a, [0, 1, 1, 0, 1, 1])
  np.testing.assert_allclose(b, [0, -1, -1, 0, -1, -1])
  np.testing.assert_allclose(c, 0.0)
  # A hard-rejected rollout (no turn rewards, total -1) still gets its dialogue part.
  group = [dialogue(0.0, 0.0, (0.0, 1.0)), dialogue(-1.0, 0.0, ()), dialogue(0.0, 0.0, (1.0, 0.0))]
  a, b, c = trainer.dialogue_advantages(group, 3, s, rewards)
  assert b[1] < 0 and a[1] > 0 and c[1] > 0
  # Returns (gamma 1): a [1, 1], c [1, 0]: turn 0 equal, turn 1 a above c.
  assert a[4] > c[4]


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_an_update_on_a_mesh_keeps_each_devices_rows():
  """16 rows over fsdp=8: each device holds its 2 rows' activations and gathers the
  weights (FSDP). XLA's partitioner would otherwise keep all 16 rows on every device with
  the hidden axis split, all-reducing each layer's [16, T, F] outputs and the logits."""
  import re
  from pedrl import sharding
  from pedrl.bench import train_step as bench
  from pedrl.models import architectures, build_model
  from pedrl.models.hf_checkpoint import random_params
  cfg = architectures.get("tiny").config()
  mesh = sharding.make_mesh(data=1, fsdp=8, tensor=1)
  params = random_params(cfg)
  params = jax.device_put(params, sharding.param_shardings(params, mesh))
  batch = bench.synthetic_batch(cfg, 16, 64)
  logp = np.zeros((16, 64), np.float32)
  batch = batch.replace(old_logp=logp, ref_logp=logp)
  opt = update.OptimizerSettings().optimizer(total_updates=2)
  model = build_model(cfg)
  program = update.train_step_program(model, params, update.init_optimizer(opt, params), opt,
                                      batch, _grpo(micro_batch=16), mesh)
  whole_rows = re.findall(r"= \w+\[16,64,\d+\]\S* all-reduce\(", program.as_text())
  assert not whole_rows, whole_rows
  scoring = update.logprobs_program(model, params, batch.tokens, batch.attn_mask, 1.0, 16, mesh)
  assert not re.findall(r"= \w+\[16,64,\d+\]\S* all-reduce\(", scoring.as_text())
