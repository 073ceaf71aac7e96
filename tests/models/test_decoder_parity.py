"""The decoder port equals transformers: logits, greedy KV-cache generation, variants.

ATOL holds for float32 matmuls at full precision: on a GPU the suite's conftest sets
JAX_DEFAULT_MATMUL_PRECISION=highest (jax's default there is TF32, 0.023 off)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers

from tests.helpers import reference
from pedrl import models
from pedrl.engine.sampling import generate_greedy
from pedrl.models.decoder import Decoder, KVCache, pool_last, unstack_layers, with_fused_qkv

CAUSAL = ["qwen2", "qwen2_tied", "qwen3", "llama3"]
ATOL = 1e-4


def run(model, params, tokens, mask, cache=None, positions=None):
  logits, cache = model.apply({"params": params}, jnp.asarray(tokens), jnp.asarray(mask),
                              cache, None if positions is None else jnp.asarray(positions),
                              method=Decoder.forward)
  return np.asarray(logits), cache


@pytest.fixture(scope="module", params=CAUSAL)
def family(request, testdata):
  path = testdata(request.param)
  cfg, model, params = models.load(path)
  return request.param, cfg, model, params, reference.load(path)


def test_logits_match_transformers_with_left_padding(family):
  name, cfg, model, params, hf = family
  tokens, mask = reference.left_padded(np.random.default_rng(0), cfg.vocab_size, [0, 3, 11], 24)
  ref = reference.forward(hf, tokens, mask, reference.mask_positions(mask))
  unrolled = Decoder(cfg.replace(scan_layers=False))
  for m, p in ((model, params), (unrolled, unstack_layers(params))):
    ours, _ = run(m, p, tokens, mask)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours[mask], ref[mask], atol=ATOL, rtol=0)


def test_greedy_kv_cache_generation_matches_transformers(family):
  name, cfg, model, params, hf = family
  tokens, mask = reference.left_padded(np.random.default_rng(1), cfg.vocab_size, [0, 5], 12)
  ours = np.asarray(generate_greedy(model, params, tokens, mask, 32))
  np.testing.assert_array_equal(ours, reference.greedy(hf, tokens, mask, 32))


def test_fused_qkv_matmul_matches_transformers(family):
  # ModelConfig.qkv_matmul="fused": one matmul over the q, k and v kernels, same params;
  # greedy decoding of one row, the case it is for (a vector times the kernels).
  name, cfg, model, params, hf = family
  fused = Decoder(cfg.replace(qkv_matmul="fused"))
  tokens, mask = reference.left_padded(np.random.default_rng(0), cfg.vocab_size, [0, 3, 11], 24)
  ours, _ = run(fused, params, tokens, mask)
  ref = reference.forward(hf, tokens, mask, reference.mask_positions(mask))
  np.testing.assert_allclose(ours[mask], ref[mask], atol=ATOL, rtol=0)
  tokens, mask = reference.left_padded(np.random.default_rng(1), cfg.vocab_size, [2], 12)
  np.testing.assert_array_equal(np.asarray(generate_greedy(fused, params, tokens, mask, 16)),
                                reference.greedy(hf, tokens, mask, 16))
  # One matmul makes q, k and v: a dot whose outputs are all three heads' widths.
  width = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
  text = jax.jit(lambda p: fused.apply({"params": p}, tokens, mask, method=Decoder.forward)
                 ).lower(params).as_text()
  dots = [line for line in text.splitlines() if "dot_general" in line]
  assert any(f"x{width}x" in line.split("->")[-1] for line in dots), dots
  # The sampler's programs (generate_greedy above) pass the kernels already side by side
  # (with_fused_qkv, once per call): the model then concatenates no kernels itself.
  def kernel_concats(p):
    text = jax.jit(lambda p: fused.apply({"params": p}, tokens, mask, method=Decoder.forward)
                   ).lower(p).as_text()
    return sum("concatenate" in line and f"{cfg.hidden_size}x{width}x" in line.split("->")[-1]
               for line in text.splitlines())
  assert kernel_concats(params) > 0
  assert kernel_concats(with_fused_qkv(params)) == 0
  np.testing.assert_allclose(run(fused, with_fused_qkv(params), tokens, mask)[0][mask],
                             reference.forward(hf, tokens, mask,
                                               reference.mask_positions(mask))[mask],
                             atol=ATOL, rtol=0)


# Two families: 4 query heads on one KV head (tied), and head_dim 32 with q/k norms; the
# kernel's own cases (group sizes, blocks, an empty cache) are in test_attention_blocks.py.
@pytest.mark.parametrize("family", ["qwen2_tied", "qwen3"], indirect=True)
def test_pallas_decode_attention_matches_transformers(family):
  # ModelConfig.decode_attention="pallas": the decode steps' attention over the cache as
  # the flash-decoding kernel (Pallas's interpret mode on a CPU); greedy text as
  # transformers', and the kernel is in the decode program.
  name, cfg, model, params, hf = family
  kernel = Decoder(cfg.replace(decode_attention="pallas"))
  tokens, mask = reference.left_padded(np.random.default_rng(3), cfg.vocab_size, [0, 4], 12)
  np.testing.assert_array_equal(np.asarray(generate_greedy(kernel, params, tokens, mask, 20)),
                                reference.greedy(hf, tokens, mask, 20))
  cache = KVCache.zeros(cfg, 2, 32)
  step = lambda m, c: m.apply({"params": params}, tokens[:, :1], mask[:, :1], c)
  assert "pedrl_decode_attention" in str(jax.make_jaxpr(lambda c: step(kernel, c))(cache))
  assert "pedrl_decode_attention" not in str(jax.make_jaxpr(lambda c: step(model, c))(cache))


def test_left_padded_rows_equal_each_sequence_alone(family):
  name, cfg, model, params, _ = family
  tokens, mask = reference.left_padded(np.random.default_rng(2), cfg.vocab_size, [0, 4, 9], 16)
  batched, _ = run(model, params, tokens, mask)
  for r in range(3):
    alone, _ = run(model, params, tokens[r:r + 1, mask[r]], np.ones((1, mask[r].sum()), bool))
    np.testing.assert_allclose(batched[r, mask[r]], alone[0], atol=1e-5, rtol=0)


def test_cache_prefill_extend_decode_equals_full_forward(family):
  """Prefill, a padded multi-token extend, then single-token decodes, vs one pass."""
  name, cfg, model, params, _ = family
  rng = np.random.default_rng(3)
  p_tok, p_mask = reference.left_padded(rng, cfg.vocab_size, [0, 4], 10)
  e_tok, e_mask = reference.left_padded(rng, cfg.vocab_size, [2, 0], 6)  # A padded new turn.
  d_tok = rng.integers(0, cfg.vocab_size, (2, 3)).astype(np.int32)
  full, _ = run(model, params, np.concatenate([p_tok, e_tok, d_tok], 1),
                np.concatenate([p_mask, e_mask, np.ones((2, 3), bool)], 1))

  steps, cache = run(model, params, p_tok, p_mask, KVCache.zeros(cfg, 2, 24))
  pieces = [steps]
  steps, cache = run(model, params, e_tok, e_mask, cache)
  pieces.append(steps)
  for i in range(3):
    steps, cache = run(model, params, d_tok[:, i:i + 1], np.ones((2, 1), bool), cache)
    pieces.append(steps)
  cached = np.concatenate(pieces, 1)
  real = np.concatenate([p_mask, e_mask, np.ones((2, 3), bool)], 1)
  np.testing.assert_allclose(cached[real], full[real], atol=1e-5, rtol=0)
  assert int(cache.end) == 19
  np.testing.assert_array_equal(np.asarray(cache.pos), real.sum(1))


def _variant(tmp_path, model_type, **kw):
  base = dict(vocab_size=300, hidden_size=56, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2,
              max_position_embeddings=8192)
  base.update(kw)
  cls = {"qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
         "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
         "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM)}[model_type]
  path = str(tmp_path / model_type)
  hf = reference.build(cls[0](**base), cls[1], path, seed=7)
  return hf, models.load(path)


@pytest.mark.parametrize("model_type,kw", [
    ("qwen2", dict(num_attention_heads=7, num_key_value_heads=1, hidden_size=56)),  # GQA 7, head_dim 8
    ("qwen2", dict(num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True)),  # GQA 1
    ("qwen3", dict(num_attention_heads=6, num_key_value_heads=3, head_dim=20)),  # GQA 2, odd head_dim
    ("qwen3", dict(num_attention_heads=2, num_key_value_heads=2, head_dim=12, attention_bias=True)),
    ("llama", dict(num_attention_heads=4, num_key_value_heads=2, mlp_bias=True, attention_bias=True)),
])
def test_architecture_variants_match_transformers(tmp_path, model_type, kw):
  hf, (cfg, model, params) = _variant(tmp_path, model_type, **kw)
  tokens, mask = reference.left_padded(np.random.default_rng(4), cfg.vocab_size, [0, 6], 20)
  ours, _ = run(model, params, tokens, mask)
  ref = reference.forward(hf, tokens, mask, reference.mask_positions(mask))
  np.testing.assert_allclose(ours[mask], ref[mask], atol=ATOL, rtol=0)


@pytest.mark.parametrize("start", [0, 60, 4000])
def test_llama3_rope_scaling_past_original_context(tmp_path, start):
  """Positions beyond original_max_position_embeddings (64 here) use the scaled band."""
  scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
             "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
  hf, (cfg, model, params) = _variant(tmp_path, "llama", rope_theta=5e5, rope_scaling=scaling,
                                      hidden_size=128, num_attention_heads=4)
  assert dict(cfg.rope_scaling)["rope_type"] == "llama3"
  tokens, mask = reference.left_padded(np.random.default_rng(5), cfg.vocab_size, [0, 0], 16)
  positions = start + np.tile(np.arange(16), (2, 1))
  ours, _ = run(model, params, tokens, mask, positions=positions)
  ref = reference.forward(hf, tokens, mask, positions)
  np.testing.assert_allclose(ours, ref, atol=ATOL, rtol=0)


def test_sequence_classifier_matches_transformers(testdata):
  path = testdata("qwen2_seqcls")
  cfg, model, params = models.load(path)
  assert cfg.task == "seq_cls" and cfg.num_labels == 1
  tokens, mask = reference.left_padded(np.random.default_rng(6), cfg.vocab_size, [0, 2, 7], 14,
                                       avoid=cfg.pad_token_id)
  scores, _ = run(model, params, tokens, mask)
  ours = np.asarray(pool_last(jnp.asarray(scores), jnp.asarray(mask)))
  ref = reference.forward(reference.load(path, "seq_cls"), tokens, mask,
                          reference.mask_positions(mask))
  assert ours.shape == ref.shape == (3, 1)
  np.testing.assert_allclose(ours, ref, atol=ATOL, rtol=0)


def test_bfloat16_params_give_float32_logits_close_to_float32(testdata):
  path = testdata("qwen3")
  cfg32, model32, p32 = models.load(path)
  cfg16, model16, p16 = models.load(path, dtype="bfloat16")
  assert all(x.dtype == jnp.bfloat16 for x in jax.tree_util.tree_leaves(p16))
  tokens, mask = reference.left_padded(np.random.default_rng(8), cfg32.vocab_size, [0, 3], 12)
  l32, _ = run(model32, p32, tokens, mask)
  l16, _ = run(model16, p16, tokens, mask)
  assert l16.dtype == np.float32
  # bf16 keeps ~3 significant digits; the logits agree to a few percent of their range.
  assert np.abs(l16 - l32)[mask].max() < 0.05 * np.abs(l32).max()


def test_remat_changes_neither_values_nor_gradients(testdata):
  cfg, model, params = models.load(testdata("qwen2"))
  remat_model = Decoder(cfg.replace(remat=True))
  tokens, mask = reference.left_padded(np.random.default_rng(9), cfg.vocab_size, [0, 2], 10)

  def loss(p, m):
    logits, _ = m.apply({"params": p}, tokens, mask, method=Decoder.forward)
    return jnp.mean(jax.nn.logsumexp(logits, -1))
  v1, g1 = jax.value_and_grad(loss)(params, model)
  v2, g2 = jax.value_and_grad(loss)(params, remat_model)
  np.testing.assert_allclose(v1, v2, rtol=1e-6)
  jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5), g1, g2)


def test_layers_are_scanned_so_program_size_does_not_grow_with_depth(testdata):
  cfg, _, _ = models.load(testdata("qwen2"))
  tokens = jnp.zeros((1, 8), jnp.int32)

  def dots(num_layers):
    c = cfg.replace(num_layers=num_layers)
    params = jax.eval_shape(lambda: Decoder(c).init(jax.random.PRNGKey(0), tokens, tokens,
                                                    method=Decoder.forward))["params"]
    hlo = jax.jit(lambda p: Decoder(c).apply({"params": p}, tokens, tokens,
                                             method=Decoder.forward)[0]).lower(params).as_text()
    return hlo.count("dot_general")
  assert dots(2) == dots(28)


@pytest.mark.parametrize("scaling", [
    # DeepSeek-R1-0528-Qwen3-8B's layout (factor 4, attn_factor key), at a tiny original context.
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
     "attn_factor": 0.8782488562869419},
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 128,
     "beta_fast": 16, "beta_slow": 2, "attention_factor": 1.25},
])
def test_yarn_rope_matches_transformers(tmp_path, scaling):
  hf, (cfg, model, params) = _variant(tmp_path, "qwen3", rope_theta=1e6, rope_scaling=scaling,
                                      head_dim=32, num_attention_heads=4)
  items = dict(cfg.rope_scaling)
  # 0.1 ln(4) + 1 = 1.1386294..., by hand; an explicit attention_factor wins.
  expected = 1.25 if "attention_factor" in scaling else 1.1386294361119891
  assert items["attention_factor"] == pytest.approx(expected, abs=1e-12)
  tokens, mask = reference.left_padded(np.random.default_rng(10), cfg.vocab_size, [0, 5], 16)
  for start in (0, 3000):
    positions = reference.mask_positions(mask) + start
    ours, _ = run(model, params, tokens, mask, positions=positions)
    ref = reference.forward(hf, tokens, mask, positions)
    np.testing.assert_allclose(ours[mask], ref[mask], atol=ATOL, rtol=0)


def test_cache_overflow_is_loud(testdata):
  cfg, model, params = models.load(testdata("qwen2"))
  tokens, mask = reference.left_padded(np.random.default_rng(11), cfg.vocab_size, [0], 8)
  with pytest.raises(ValueError, match="do not fit a KV cache window of 6 slots"):
    run(model, params, tokens, mask, KVCache.zeros(cfg, 1, 6))
  logits, cache = run(model, params, tokens, mask, KVCache.zeros(cfg, 1, 10))
  assert np.isfinite(logits).all()
  more, _ = run(model, params, tokens[:, :4], mask[:, :4], cache)  # 8 + 4 > 10 slots.
  assert np.isnan(more).all()


def test_attention_window_reads_only_its_slots_and_is_loud_past_them(testdata):
  cfg, model, params = models.load(testdata("llama3"))
  tokens, mask = reference.left_padded(np.random.default_rng(12), cfg.vocab_size, [2], 12)
  full, _ = run(model, params, tokens, mask)
  apply = lambda t, m, c, w: model.apply({"params": params}, jnp.asarray(t), jnp.asarray(m), c,
                                         window=w, method=Decoder.forward)
  first, cache = apply(tokens[:, :8], mask[:, :8], KVCache.zeros(cfg, 1, 64), 8)
  rest, _ = apply(tokens[:, 8:], mask[:, 8:], cache, 16)  # A 16-slot window of a 64-slot cache.
  windowed = np.concatenate([np.asarray(first), np.asarray(rest)], 1)
  np.testing.assert_allclose(windowed[mask], full[mask], atol=1e-5, rtol=0)
  past, _ = apply(tokens[:, 8:], mask[:, 8:], cache, 10)  # Slots 8..11 exceed a 10-slot window.
  assert np.isnan(np.asarray(past)).all()


def test_sequence_classifier_row_ending_in_pad_id_follows_transformers(testdata):
  """transformers scores the rightmost non-pad token; pool_last reproduces it given pad_id."""
  path = testdata("qwen2_seqcls")
  cfg, model, params = models.load(path)
  tokens, mask = reference.left_padded(np.random.default_rng(12), cfg.vocab_size, [0, 3], 10,
                                       avoid=cfg.pad_token_id)
  tokens[:, -1] = cfg.pad_token_id  # e.g. a template ending in eos where pad == eos.
  scores, _ = run(model, params, tokens, mask)
  ours = np.asarray(pool_last(jnp.asarray(scores), jnp.asarray(mask), jnp.asarray(tokens),
                              cfg.pad_token_id))
  ref = reference.forward(reference.load(path, "seq_cls"), tokens, mask,
                          reference.mask_positions(mask))
  np.testing.assert_allclose(ours, ref, atol=ATOL, rtol=0)


def test_greedy_rejects_bad_prompts(testdata):
  cfg, model, params = models.load(testdata("qwen2"))
  tokens = np.ones((2, 4), np.int32)
  right_padded = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], bool)
  with pytest.raises(ValueError, match="left-padded"):
    generate_greedy(model, params, tokens, right_padded, 4)
  with pytest.raises(ValueError, match="max_new_tokens must be positive"):
    generate_greedy(model, params, tokens, np.ones((2, 4), bool), 0)
  with pytest.raises(ValueError, match="non-empty"):
    generate_greedy(model, params, tokens[:, :0], np.ones((2, 0), bool), 4)
  with pytest.raises(ValueError, match="exceeds the model's context"):
    generate_greedy(model, params, tokens, np.ones((2, 4), bool), cfg.max_position_embeddings)
