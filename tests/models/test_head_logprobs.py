"""The loss head run a chunk of positions at a time (ModelConfig.logits_chunk) gives the
log-probs and gradients of the whole head, on one device and over a mesh."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pedrl import models
from pedrl.models import architectures
from pedrl.models.hf_checkpoint import random_params
from pedrl.engine.scoring import sequence_logprobs
from pedrl.models.decoder import Decoder
from pedrl.rl import memory, update
from pedrl.rl.batch import TrainBatch
from pedrl.rl.trainer import TrainSettings


@pytest.fixture(scope="module")
def qwen2(testdata):
  cfg, _, params = models.load(testdata("qwen2"))
  return cfg, params


def _rows(width=24, seed=0):
  """Token rows with a left-padded and a right-padded row."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(3, 900, size=(3, width)).astype(np.int32)
  mask = np.ones((3, width), bool)
  mask[1, :5] = False
  mask[2, -4:] = False
  tokens[~mask] = 0
  return tokens, mask


def _model(cfg, chunk):
  return models.build_model(cfg.replace(logits_chunk=chunk))


@pytest.mark.parametrize("chunk", [5, 8, 22])
def test_chunked_logprobs_and_gradients_are_the_whole_heads(qwen2, chunk):
  """23 predicted positions in chunks of 5 (the last padded), 8 or 22; temperature 0.7.
  The whole head's path is the one checked against transformers (test_decoder_parity)."""
  cfg, params = qwen2
  tokens, mask = _rows()
  whole = lambda p: sequence_logprobs(_model(cfg, 0), p, tokens, mask, 0.7)
  chunked = lambda p: sequence_logprobs(_model(cfg, chunk), p, tokens, mask, 0.7)
  want, got = whole(params), chunked(params)
  assert got.shape == want.shape == tokens.shape
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6)
  pairs = np.pad(mask[:, 1:] & mask[:, :-1], ((0, 0), (1, 0)))
  assert (np.asarray(got)[~pairs] == 0).all() and (np.asarray(got)[pairs] < 0).all()
  weights = jnp.asarray(np.random.default_rng(1).normal(size=tokens.shape), jnp.float32)
  g_want = jax.grad(lambda p: jnp.sum(whole(p) * weights))(params)
  g_got = jax.grad(lambda p: jnp.sum(chunked(p) * weights))(params)
  for a, b in zip(jax.tree.leaves(g_want), jax.tree.leaves(g_got)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=2e-5)


def test_a_sequence_no_longer_than_a_chunk_runs_the_whole_head(qwen2):
  """logits_chunk >= the predicted positions: one pass, no loop of its own."""
  cfg, params = qwen2
  tokens, mask = _rows(width=9)
  text = jax.jit(lambda p: sequence_logprobs(_model(cfg, 8), p, tokens, mask)).lower(
      params).as_text()
  chunked = jax.jit(lambda p: sequence_logprobs(_model(cfg, 4), p, tokens, mask)).lower(
      params).as_text()
  assert chunked.count("stablehlo.while") == text.count("stablehlo.while") + 1


def test_the_update_with_a_chunked_head_is_the_whole_heads(qwen2):
  """GRPO's gradients (micro-batched, the trainer's path) with the head in chunks of 7."""
  cfg, params = qwen2
  tokens, mask = _rows()
  loss_mask = mask.copy()
  loss_mask[:, :10] = False
  adv = np.where(loss_mask, np.asarray([1.0, -1.0, 0.5])[:, None], 0.0).astype(np.float32)
  logp = np.asarray(update.policy_logprobs(_model(cfg, 0), params, tokens, mask, 1.0))
  batch = TrainBatch(tokens=tokens, attn_mask=mask, loss_mask=loss_mask, advantages=adv,
                     old_logp=logp, ref_logp=logp - 0.05)
  objective = update.GRPOObjective(update.GRPOSettings(micro_batch=2), temperature=1.0)
  g_want, m_want = update.gradients(_model(cfg, 0), params, batch, objective)
  g_got, m_got = update.gradients(_model(cfg, 7), params, batch, objective)
  for a, b in zip(jax.tree.leaves(g_want), jax.tree.leaves(g_got)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=2e-5)
  assert float(m_got["loss"]) == pytest.approx(float(m_want["loss"]), abs=1e-6)


@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="the bounds are XLA:CPU's buffer accounting (it failed on an H100); "
                           "a GPU's is pedrl.bench.train_step's xla_MiB")
def test_the_backward_pass_keeps_no_chunks_logits():
  """Gradient temporaries by XLA's accounting, 2 rows x 513 tokens, vocabulary 8192, one
  [B, T, V] float32 buffer 32 MiB: the whole head holds several (158 MiB on CPU, jax
  0.10); in 64-position chunks under jax.checkpoint 40 MiB; without the checkpoint the
  backward pass keeps every chunk's logits (72 MiB)."""
  cfg = architectures.decoder("qwen2", 8192, 64, 1, 4, 2, 128, 4096).config()
  params = random_params(cfg)
  rng = np.random.default_rng(0)
  tokens, mask = rng.integers(0, 8192, (2, 513)).astype(np.int32), np.ones((2, 513), bool)

  def temp_bytes(chunk):
    model = _model(cfg, chunk)
    grad = jax.jit(jax.grad(lambda p: sequence_logprobs(model, p, tokens, mask).sum()))
    return grad.lower(params).compile().memory_analysis().temp_size_in_bytes
  one = 2 * 512 * 8192 * 4
  assert temp_bytes(0) > 3 * one
  assert temp_bytes(64) < 1.5 * one


def test_the_trainers_settings_reach_the_tutors_config(testdata):
  """What train.py and offline.py load the trained tutor with."""
  runtime = TrainSettings(logits_chunk=256, remat=True).tutor_runtime()
  assert runtime == {"remat": True, "dtype": "float32", "logits_chunk": 256}
  cfg = models.from_hf(testdata("qwen2"), **TrainSettings().tutor_runtime())
  assert (cfg.logits_chunk, cfg.remat, cfg.dtype) == (1024, False, "float32")


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_chunked_scoring_over_a_mesh_equals_the_whole_head_on_one_device(qwen2):
  from pedrl import sharding
  cfg, params = qwen2
  tokens, mask = _rows()
  want = update.logprobs_in_chunks(_model(cfg, 0), params, tokens, mask, 1.0, chunk=4)
  mesh = sharding.make_mesh(data=1, fsdp=2, tensor=4)
  placed = jax.device_put(params, sharding.param_shardings(params, mesh))
  got = update.logprobs_in_chunks(_model(cfg, 6), placed, tokens, mask, 1.0, chunk=4, mesh=mesh)
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_the_head_memory_by_hand():
  """The tiny shape (E 64, V 1024), 2 rows of 2048 tokens: 3 float32 [T, V] buffers per row
  whole; in 512-position chunks 3 [512, V] and the head weight's summed gradient [E, V]."""
  tiny = architectures.get("tiny").config()
  assert TrainSettings.logits_chunk == memory.RunShape.logits_chunk == 1024
  assert memory.head_positions(2048, 512) == 512
  assert memory.head_positions(2048, 0) == 2048
  assert memory.head_positions(513, 512) == 513  # 512 predicted positions: one pass.
  layers = memory.activation_bytes(tiny, 2, 2048, "bfloat16", remat=True, logits_chunk=0) - (
      3 * 2 * 2048 * 1024 * 4)
  assert memory.activation_bytes(tiny, 2, 2048, "bfloat16", remat=True, logits_chunk=512) == (
      layers + 3 * 2 * 512 * 1024 * 4 + 64 * 1024 * 4)
  attention = 2 * 2048 * 4 * 4 * 2048  # One layer's float32 [T, T] probabilities, 4 heads.
  assert memory.scoring_bytes(tiny, 2, 2048) == 2 * 2 * 2048 * 1024 * 4 + attention
  assert memory.scoring_bytes(tiny, 2, 2048, logits_chunk=512) == (
      2 * 2 * 512 * 1024 * 4 + attention)


@pytest.mark.parametrize("tied", [True, False])
def test_head_matmuls_run_in_the_compute_dtype_under_float32_weights(tied):
  # The trainer's float32 master weights with bfloat16 compute: the head's matmuls, the
  # forward one and the two of its gradient, must take bfloat16 operands (float32 ones
  # run as TF32 on a GPU, at half the speed).
  cfg = architectures.get("tiny").config(dtype="bfloat16", tie_embeddings=tied)
  params = random_params(cfg.replace(dtype="float32"))
  assert jax.tree.leaves(params)[0].dtype == jnp.float32
  model = models.build_model(cfg)
  tokens = jnp.ones((2, 9), jnp.int32)
  loss = lambda p: sequence_logprobs(model, p, tokens, tokens > 0).sum()
  text = jax.jit(jax.grad(loss)).lower(params).as_text()
  vocab = f"{cfg.vocab_size}x{cfg.hidden_size}"  # The table [V, E] (tied) ...
  if not tied:
    vocab = f"{cfg.hidden_size}x{cfg.vocab_size}"  # ... or the kernel [E, V].
  heads = [line for line in text.splitlines()
           if "dot_general" in line and (f"x{cfg.vocab_size}x" in line or vocab in line)]
  assert len(heads) >= 3, heads  # Forward, d(hidden), d(weights).
  for line in heads:
    operands = line.split(":")[-1].split("->")[0]
    assert "bf16" in operands and "xf32>" not in operands, line
  # The logits themselves stay float32.
  assert any(line.split("->")[-1].strip().endswith(f"x{cfg.vocab_size}xf32>") for line in heads)
