"""Sampling filters and draws against an independent numpy reference (sort-based)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pedrl.engine import distribution
from pedrl.engine.distribution import RowSampling, SamplingParams


def reference_distribution(logits, temperature=1.0, top_k=0, top_p=1.0):
  """The filtered distribution computed the textbook way: sort, cut, renormalise.

  Like transformers' warpers: temperature, then top-k keeping ties with the k-th
  value, then top-p keeping the smallest sorted prefix whose mass reaches p.
  """
  x = np.asarray(logits, np.float64) / temperature
  keep = np.ones_like(x, bool)
  if top_k:
    kth = np.sort(x)[::-1][top_k - 1]
    keep &= x >= kth
  if top_p < 1:
    p = np.where(keep, np.exp(x - x[keep].max()), 0)
    p /= p.sum()
    ranked = p[np.argsort(-p, kind="stable")]
    ahead = np.cumsum(ranked) - ranked  # Mass strictly ahead of each token in rank order.
    keep &= p >= ranked[ahead < top_p].min()  # Ties with the last kept token stay.
  w = np.where(keep, np.exp(x - x[keep].max()), 0)
  return w / w.sum()


LOGITS = np.array([2.0, 1.5, 1.5, 0.7, 0.0, -0.3, -1.0, -2.5])


@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.5, 0, 1.0), (1.3, 3, 1.0), (1.0, 2, 1.0),  # k=2 keeps the tie: 3 tokens.
    (1.0, 0, 0.8), (0.7, 0, 0.5), (1.0, 5, 0.9), (1.0, 0, 0.05)])
def test_draws_follow_the_exact_filtered_distribution(temperature, top_k, top_p):
  n = 20000
  sp = SamplingParams(1, temperature=temperature, top_k=top_k, top_p=top_p)
  logits = jnp.tile(jnp.asarray(LOGITS, jnp.float32), (n, 1))
  keys = jax.random.split(jax.random.key(123), n)
  draws = np.asarray(jax.jit(lambda l, k: distribution.sample(l, k, sp))(logits, keys))
  want = reference_distribution(LOGITS, temperature, top_k, top_p)
  counts = np.bincount(draws, minlength=len(LOGITS))
  assert counts[want == 0].sum() == 0, "a filtered-out token was drawn"
  live = want > 0
  chi2 = ((counts[live] - n * want[live]) ** 2 / (n * want[live])).sum()
  # 99.99th percentile of chi-square with <= 7 degrees of freedom is below 30.
  assert chi2 < 30, (counts / n, want)


def test_filters_match_sort_based_reference_on_random_logits():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(64, 300)).astype(np.float32) * 3
  logits[:, :5] = logits[:, :1]  # Ties at the top.
  logits[3] = -np.inf
  logits[3, 7] = 1.0  # One finite token only.
  for k, p in [(1, 1.0), (10, 1.0), (299, 1.0), (0, 0.3), (0, 0.999), (20, 0.6)]:
    sp = SamplingParams(1, top_k=k, top_p=p)
    ours = np.isfinite(np.asarray(distribution.filtered_logits(jnp.asarray(logits), sp)))
    for r in range(len(logits)):
      np.testing.assert_array_equal(ours[r], reference_distribution(logits[r], 1.0, k, p) > 0,
                                    err_msg=f"row {r} top_k={k} top_p={p}")


def test_per_row_sampling_draws_what_each_rows_own_params_draw():
  """RowSampling (a server's mixed requests in one program) against `sample` run with
  each row's SamplingParams alone: the same key gives the same token."""
  rng = np.random.default_rng(1)
  params = [(1.0, 0, 1.0), (0.0, 0, 1.0), (0.7, 3, 1.0), (1.3, 0, 0.6), (1.0, 5, 0.9),
            (0.0, 7, 0.5), (2.0, 1, 1.0), (0.5, 299, 0.95)]
  rows = RowSampling.of(*zip(*params))
  one, mixed_fn = jax.jit(distribution.sample, static_argnums=2), jax.jit(distribution.sample_rows)
  for trial in range(4):
    logits = jnp.asarray(rng.normal(size=(len(params), 300)) * 2, jnp.float32)
    keys = jax.random.split(jax.random.key(trial), len(params))
    mixed = np.asarray(mixed_fn(logits, keys, rows))
    alone = [int(one(logits[i:i + 1], keys[i:i + 1],
                     SamplingParams(1, temperature=t, top_k=k, top_p=p))[0])
             for i, (t, k, p) in enumerate(params)]
    np.testing.assert_array_equal(mixed, alone, err_msg=f"trial {trial}")


@pytest.mark.parametrize("search", ["top_k", "bisect"])
def test_a_vanishing_top_p_keeps_the_most_likely_token(search):
  """top_p 1e-40 is a float32 that XLA flushes to 0: the threshold search then passed
  every token by and the draw read an all-masked row (the same garbage token in every
  row). Any top_p keeps at least the most likely token: a tiny one samples greedily."""
  logits = jnp.asarray(np.random.default_rng(3).normal(size=(4, 1000)) * 3, jnp.float32)
  keys = jax.random.split(jax.random.key(1), 4)
  greedy = np.asarray(logits.argmax(-1))
  for p in (1e-40, 1e-38, 1e-30):
    rows = RowSampling.of(np.ones(4), np.zeros(4), np.full(4, p))
    np.testing.assert_array_equal(distribution.sample_rows(logits, keys, rows, search), greedy)
    kept = distribution.filtered_logits(logits, SamplingParams(1, top_p=p), search)
    np.testing.assert_array_equal(np.isfinite(np.asarray(kept)).sum(-1), [1] * 4)


def test_greedy_is_the_first_maximum():
  logits = jnp.asarray([[0.0, 3.0, 3.0, 1.0], [-1.0, -1.0, -2.0, -5.0]])
  np.testing.assert_array_equal(distribution.argmax(logits), [1, 0])
  sp = SamplingParams(1, temperature=0.0)
  np.testing.assert_array_equal(distribution.sample(logits, jax.random.split(jax.random.key(0), 2), sp),
                                [1, 0])


def test_inverse_cdf_never_picks_zero_weight_and_uses_every_block():
  w = np.zeros((4, 1000), np.float32)
  w[0, 999] = 1.0
  w[1, [0, 513]] = 1.0
  w[2, 256:512] = 1e-30
  w[3] = 1.0
  for u in (1e-7, 0.5, 1.0):
    got = np.asarray(distribution.inverse_cdf(jnp.asarray(w), jnp.full((4,), u, jnp.float32)))
    assert all(w[r, got[r]] > 0 for r in range(4)), (u, got)
  got = np.asarray(distribution.inverse_cdf(jnp.asarray(w[3:]), jnp.asarray([0.7501], jnp.float32)))
  assert got[0] == 750


def test_token_logprobs_by_hand():
  logits = jnp.asarray([[1.0, 2.0, 3.0]])
  want = np.log(np.exp(2 / 0.5) / np.exp(np.array([1.0, 2.0, 3.0]) / 0.5).sum())
  np.testing.assert_allclose(distribution.token_logprobs(logits, jnp.asarray([1]), 0.5), [want],
                             rtol=1e-6)


@pytest.mark.parametrize("kw,message", [
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(max_new_tokens=-3), "max_new_tokens"),
    (dict(max_new_tokens=4, top_p=0.0), "top_p"), (dict(max_new_tokens=4, top_p=1.5), "top_p"),
    (dict(max_new_tokens=4, top_k=-1), "top_k"), (dict(max_new_tokens=4, temperature=-1), "temperature")])
def test_bad_sampling_params_are_named(kw, message):
  with pytest.raises(ValueError, match=message):
    SamplingParams(**kw)


# The "top_k" search (jax.lax.top_k candidates, bisection fallback) against the
# bisection and against numpy sorts. XLA:CPU's TopK is slow at large vocabularies,
# so these stay small; a non-power-of-two vocabulary and ties in every case.


def _logits(rng, batch, vocab, scale=3.0):
  x = (rng.normal(size=(batch, vocab)) * scale).astype(np.float32)
  x[:, 1:4] = x[:, :1]  # Ties at the top ...
  x[:, -3:] = np.sort(x, axis=-1)[:, vocab // 2, None]  # ... and in the middle.
  return x


def numpy_top_k_mask(x, k):
  return x >= np.sort(x, axis=-1)[:, ::-1][:, k - 1, None]


def numpy_top_p_mask(probs, p):
  """Sort, float64 cumsum, first index reaching p: its probability is the threshold."""
  ranked = np.sort(probs.astype(np.float64), axis=-1)[:, ::-1]
  first = np.argmax(np.cumsum(ranked, axis=-1) >= p, axis=-1)
  return probs >= ranked[np.arange(len(probs)), first][:, None].astype(np.float32)


@pytest.mark.parametrize("batch,vocab", [(1, 300), (5, 300), (3, 1000), (2, 7)])
def test_top_k_search_equals_bisection_and_numpy(batch, vocab):
  x = _logits(np.random.default_rng(vocab + batch), batch, vocab)
  for k in sorted({1, 2, 3, 4, 5, 10, vocab // 2, vocab - 1} & set(range(1, vocab))):
    want = numpy_top_k_mask(x, k)
    for search, candidates in [("bisect", None), ("top_k", None), ("top_k", 8)]:  # 8: k > 8 bisects.
      got = np.asarray(distribution.top_k_mask(jnp.asarray(x), k, search, candidates))
      np.testing.assert_array_equal(got, want, err_msg=f"k={k} {search} candidates={candidates}")


@pytest.mark.parametrize("batch,vocab", [(1, 300), (5, 300), (3, 1000), (2, 7)])
def test_top_p_search_equals_bisection_and_numpy(batch, vocab):
  probs = np.asarray(jax.nn.softmax(jnp.asarray(_logits(np.random.default_rng(vocab), batch, vocab))))
  for p in (1e-6, 0.05, 0.3, 0.6, 0.9, 0.999, 0.9999, 0.99999, 0.999999):
    bisect = np.asarray(distribution.top_p_mask(jnp.asarray(probs), p, "bisect"))
    fast = np.asarray(distribution.top_p_mask(jnp.asarray(probs), p, "top_k"))
    np.testing.assert_array_equal(fast, bisect, err_msg=f"p={p}")
    if p <= 0.9999:  # Closer to 1, float32 rounding of a row's mass (~1e-7) decides the set.
      np.testing.assert_array_equal(fast, numpy_top_p_mask(probs, p), err_msg=f"p={p} numpy")


def test_top_p_search_falls_back_exactly_when_candidates_fall_short():
  """A flat row's 16 largest probabilities hold far less than p: that row takes the
  bisection (more than 16 tokens kept), the peaked row beside it keeps its own."""
  rng = np.random.default_rng(3)
  x = np.stack([rng.normal(size=500) * 0.1, rng.normal(size=500) * 4]).astype(np.float32)
  x[1, :3] += 30.0  # Three tokens hold almost all of row 1's mass.
  probs = np.asarray(jax.nn.softmax(jnp.asarray(x)))
  assert np.sort(probs[0])[::-1][:16].sum() < 0.1 and np.sort(probs[1])[::-1][:16].sum() > 0.99
  for p in (0.5, 0.9, 0.99):
    want = numpy_top_p_mask(probs, p)
    got = np.asarray(distribution.top_p_mask(jnp.asarray(probs), p, "top_k", candidates=16))
    np.testing.assert_array_equal(got, want, err_msg=f"p={p}")
    assert want[0].sum() > 16 and want[1].sum() <= 3


def test_filter_search_choice():
  small, large = (1, distribution.AUTO_TOP_K_VALUES), (2, distribution.AUTO_TOP_K_VALUES)
  accelerator = jax.default_backend() != "cpu"
  assert distribution.filter_search("auto", small) == ("top_k" if accelerator else "bisect")
  assert distribution.filter_search("auto", large) == "bisect"
  assert distribution.filter_search("top_k") == "top_k"
  with pytest.raises(ValueError, match="filter search 'sort'"):
    distribution.filter_search("sort")


def test_searches_draw_the_same_tokens():
  """Same logits and keys: the same token from either search, also where top-k and
  top-p both filter."""
  rng = np.random.default_rng(4)
  logits = jnp.asarray(_logits(rng, 64, 300, scale=2.0))
  keys = jax.random.split(jax.random.key(5), 64)
  for sp in (SamplingParams(1, top_k=1), SamplingParams(1, top_k=40), SamplingParams(1, top_p=0.9),
             SamplingParams(1, temperature=0.7, top_k=299, top_p=0.97),
             SamplingParams(1, temperature=1.5, top_k=20, top_p=0.5)):
    draws = [np.asarray(jax.jit(lambda l, k, s=search: distribution.sample(l, k, sp, s))(logits, keys))
             for search in ("bisect", "top_k")]
    np.testing.assert_array_equal(draws[0], draws[1], err_msg=str(sp))


def test_per_row_sampling_on_the_top_k_search_with_fallback_rows(monkeypatch):
  """sample_rows on the "top_k" search with 8 candidates: rows with k > 8 and a flat
  row whose 8 candidates fall short of p take the bisection, the others the
  candidates; every row draws what `sample` draws with its own params (on either
  search)."""
  monkeypatch.setattr(distribution, "CANDIDATES", 8)
  rng = np.random.default_rng(6)
  params = [(1.0, 0, 1.0), (0.0, 0, 1.0), (0.7, 3, 1.0), (1.3, 0, 0.6), (1.0, 5, 0.9),
            (1.0, 20, 1.0), (2.0, 1, 1.0), (0.5, 299, 0.95), (1.0, 0, 0.9), (1.0, 8, 0.3)]
  rows = RowSampling.of(*zip(*params))
  for trial in range(3):
    logits = rng.normal(size=(len(params), 300)).astype(np.float32) * 2
    logits[8] *= 0.01  # Flat: 8 candidates hold ~3% of the mass.
    logits, keys = jnp.asarray(logits), jax.random.split(jax.random.key(trial), len(params))
    mixed = np.asarray(jax.jit(lambda l, k, r: distribution.sample_rows(l, k, r, "top_k"))(
        logits, keys, rows))
    for search in ("top_k", "bisect"):
      alone = [int(distribution.sample(logits[i:i + 1], keys[i:i + 1],
                                       SamplingParams(1, temperature=t, top_k=k, top_p=p), search)[0])
               for i, (t, k, p) in enumerate(params)]
      np.testing.assert_array_equal(mixed, alone, err_msg=f"trial {trial} {search}")
