"""Blocked attention of a chunk on a KV cache (layers.blocked_attention) against a
numpy softmax, and the decoder's blocked and whole-matrix paths against each other."""
import jax.numpy as jnp
import numpy as np
import pytest

from pedrl import models
from pedrl.engine import Sampler, SamplingParams, sequence_keys
from pedrl.models import layers


def numpy_attention(q, cache, filled, new):
  """Each query's softmax over the cache slots it sees (below `filled`) and the new keys."""
  (kc, vc, mc), (kn, vn, mn) = cache, new
  b, t, h, d = q.shape
  g = h // kn.shape[1]
  out = np.zeros(q.shape)
  for i in range(b):
    for j in range(t):
      for head in range(h):
        kvh = head // g
        seen_cache = np.flatnonzero(mc[i, 0] & (np.arange(mc.shape[-1]) < filled))
        seen_new = np.flatnonzero(mn[i, j])
        keys = np.concatenate([kc[i, kvh][:, seen_cache], kn[i, kvh][:, seen_new]], 1)
        values = np.concatenate([vc[i, kvh][seen_cache], vn[i, kvh][seen_new]], 0)
        if not keys.shape[1]:  # A padding query: nothing to compare.
          continue
        scores = q[i, j, head] @ keys / np.sqrt(d)
        p = np.exp(scores - scores.max())
        out[i, j, head] = p @ values / p.sum()
  return out


def _inputs(rng, b=2, t=12, h=4, kv=2, d=8, slots=20, filled=13, pad=(0, 3)):
  normal = lambda *shape: rng.standard_normal(shape).astype(np.float32)
  q = normal(b, t, h, d)
  cache_mask = rng.random((b, 1, slots)) < 0.7  # Holes: padding of earlier turns.
  cache_mask[..., filled:] = False
  cache = (normal(b, kv, d, slots), normal(b, kv, slots, d), cache_mask)
  real = np.arange(t)[None] >= np.asarray(pad)[:, None]  # Left padding of the new tokens.
  new_mask = real[:, None, :] & np.tril(np.ones((t, t), bool))[None]
  new = (normal(b, kv, d, t), normal(b, kv, t, d), new_mask)
  return q, cache, filled, new, real


@pytest.mark.parametrize("block, filled", [(8, 13), (8, 20), (4, 0), (128, 13), (5, 11)])
def test_blocked_attention_equals_a_numpy_softmax(block, filled):
  # block 8 over 20 slots: the last cache block is shifted back to fit (slots 12-19,
  # 12-15 already seen); T = 12 with block 8 or 5 uses query blocks of 6 or 4.
  rng = np.random.default_rng(block + filled)
  q, cache, filled, new, real = _inputs(rng, filled=filled)
  got = layers.blocked_attention(jnp.asarray(q), tuple(map(jnp.asarray, cache)),
                                 jnp.int32(filled), tuple(map(jnp.asarray, new)), block)
  want = numpy_attention(q, cache, filled, new)
  np.testing.assert_allclose(np.asarray(got)[real], want[real], atol=1e-5, rtol=1e-5)
  assert np.isfinite(np.asarray(got)).all()  # Padding queries see nothing: harmless, not NaN.


def test_blocked_attention_without_cache_slots_and_in_bfloat16():
  rng = np.random.default_rng(0)
  q, cache, _, new, real = _inputs(rng, slots=0, filled=0)
  got = layers.blocked_attention(jnp.asarray(q), tuple(map(jnp.asarray, cache)), jnp.int32(0),
                                 tuple(map(jnp.asarray, new)), 4)
  np.testing.assert_allclose(np.asarray(got)[real], numpy_attention(q, cache, 0, new)[real],
                             atol=1e-5)
  q, cache, filled, new, real = _inputs(rng)
  bf16 = lambda xs: tuple(jnp.asarray(x, jnp.bfloat16) if x.dtype == np.float32 else jnp.asarray(x)
                          for x in xs)
  got = layers.blocked_attention(bf16([q])[0], bf16(cache), jnp.int32(filled), bf16(new), 8)
  assert got.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(got, np.float32)[real],
                             numpy_attention(q, cache, filled, new)[real], atol=0.05)


def test_decoder_blocked_and_whole_matrix_paths_agree(testdata):
  """A prompt and then a dialogue turn on its cache: the same greedy tokens and
  log-probs with the blocked path (the CPU default, here 16-token blocks) as with the
  whole score matrix (attention_block=0)."""
  path = testdata("qwen2")
  rng = np.random.default_rng(3)
  vocab = models.from_hf(path).vocab_size
  prompts = [rng.integers(1, vocab, n).tolist() for n in (37, 21)]
  turn = [rng.integers(1, vocab, n).tolist() for n in (9, 30)]
  outs = []
  for block in (16, 0):
    _, model, params = models.load(path, scan_layers=False, attention_block=block)
    sampler = Sampler(model)
    cache = sampler.extend(params, sampler.new_cache(2, 128), prompts)
    gen, _ = sampler.generate(params, turn, sequence_keys(0, range(2)),
                              SamplingParams(8, temperature=0.0), cache)
    outs.append(gen)
  np.testing.assert_array_equal(outs[0].tokens, outs[1].tokens)
  np.testing.assert_allclose(outs[0].logprobs, outs[1].logprobs, atol=1e-5)


@pytest.mark.parametrize("as_reduce", [True, False])
def test_decode_step_attention_over_cache_and_token_equals_a_numpy_softmax(as_reduce,
                                                                           monkeypatch):
  # One new token over a cache (two segments, one softmax across both without
  # concatenating them), as the CPU's multiply-reduces and as the accelerators' dots.
  monkeypatch.setattr(layers, "decode_as_reduce", lambda: as_reduce)
  rng = np.random.default_rng(3)
  q, cache, filled, new, real = _inputs(rng, t=1, slots=9, filled=9, pad=(0, 0))
  kc, vc, mc = cache
  mc[1, 0, :] = False  # A row with an empty cache: only its own token.
  got = layers.dot_attention(jnp.asarray(q), [tuple(map(jnp.asarray, cache)),
                                              tuple(map(jnp.asarray, new))])
  np.testing.assert_allclose(np.asarray(got), numpy_attention(q, cache, filled, new),
                             atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("g, block", [(2, 16), (7, 32)])
def test_pallas_decode_kernel_equals_a_numpy_softmax(g, block):
  # The kernel in Pallas's interpret mode: one program per row, KV head and cache block;
  # 7 query heads a group as Qwen2.5-7B's (padded to 16 rows), a row with an empty cache.
  from pedrl.models import decode_attention
  rng = np.random.default_rng(g)
  q, cache, filled, new, real = _inputs(rng, t=1, h=2 * g, kv=2, d=16, slots=64, filled=50,
                                        pad=(0, 0))
  cache[2][1] = False
  got = decode_attention.attend(jnp.asarray(q), tuple(map(jnp.asarray, cache)),
                                tuple(map(jnp.asarray, new)), block, interpret=True)
  np.testing.assert_allclose(np.asarray(got), numpy_attention(q, cache, filled, new),
                             atol=1e-5, rtol=1e-5)
  assert decode_attention.block_size(64) == 64 and decode_attention.block_size(48) == 16
  assert decode_attention.block_size(40) is None
