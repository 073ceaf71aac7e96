"""The sampling distribution: temperature, top-k, top-p, drawing a token, log-probs.

A top-k or top-p filter keeps every token at or above a per-row threshold: top-k's
is the k-th largest logit, top-p's the largest t with mass(probs >= t) >= p. Tokens
tied with the threshold are all kept. For top-k that is what transformers' TopK
warper does; its TopP warper instead splits a tie at the boundary by sort order
(probabilities .5/.25/.25 with p=0.6: transformers keeps 2 tokens, pedrl 3). Exact
ties of float probabilities are rare in real models.

Two searches find the same thresholds (`FILTER_SEARCH`):
- "bisect": a bisection on the float bits, 32 steps of a compare-and-sum over the
  vocabulary. Exact for any k and p.
- "top_k": `jax.lax.top_k` of the row's `CANDIDATES` largest values: the k-th of
  them for top-k, and for top-p the first whose running sum (largest first)
  reaches p. A row whose k exceeds the candidates, or whose candidates' mass falls
  short of p (a flat distribution), takes the bisection instead (a `lax.cond`, so
  it costs nothing when no row needs it). The two sum a row's mass in different
  orders, so a top-p set can differ only where a prefix's mass is within float32
  rounding of p.
- "auto" (the default): "bisect" on CPU; on an accelerator "top_k" for up to
  `AUTO_TOP_K_VALUES` values per filter (rows x vocabulary), "bisect" past it.
  On a GPU the bisection's ~190 small kernels took about 0.3 ms of a 6.4 ms 7B
  decode step (H100, batch 1); the top_k search finds the same top-p threshold in
  half the time at batch 1, but XLA:GPU sorts every row for it, which past a few
  rows of a 152k vocabulary costs more than the bisection. On XLA:CPU the
  bisection is the safe choice: a draw with top-k 50 took 1.4 ms by bisection and
  27 ms by top_k at [1, 152064] (2.7 against 81 ms at [16, 32000]); top-p 0.95 took
  1.06 against 0.59 ms on a peaked row but 1.04 against 1.43 ms on a flat one,
  which falls back (a shared 2-core x86 VM, jax 0.10.2, 2026-11-28, load average
  1.3-3.4: repeats differed up to 3x, far less than the top-k gap, more than the
  top-p ones).

`token_logprobs` is the single code path for model log-probs: the sampler
reports it for the tokens it draws and the scorer for given tokens, so an RL
ratio between the two starts at exactly 1.
"""
import math

import jax
import jax.numpy as jnp
from numpy.typing import ArrayLike
from flax import struct

from pedrl.engine.params import SamplingParams  # Re-exported: its home before params.py.


def token_logprobs(logits: jax.Array, tokens: jax.Array, temperature: float = 1.0) -> jax.Array:
  """log softmax(logits / temperature) at `tokens`: logits [..., V], tokens [...] -> [...]."""
  logits = logits.astype(jnp.float32) / temperature
  picked = jnp.take_along_axis(logits, tokens[..., None].astype(jnp.int32), axis=-1)[..., 0]
  return picked - jax.nn.logsumexp(logits, axis=-1)


def _from_order_keys(keys):
  """The float32 values of uint32 keys that order as the floats do (a non-negative
  float's bits with the top bit set, a negative float's bits inverted); NaN patterns map
  to the infinity beside them, so comparing floats against the result keeps the key order."""
  negative = (keys >> 31) == 0
  bits = jnp.where(negative, ~keys, keys & jnp.uint32(0x7FFFFFFF))
  x = jax.lax.bitcast_convert_type(bits, jnp.float32)
  return jnp.where(jnp.isnan(x), jnp.where(negative, -jnp.inf, jnp.inf), x)


def _largest_threshold(values, weights, target):
  """Per row, the largest float t with sum(weights[values >= t]) >= target.

  Exact: a bisection over the 2^32 float bit patterns in their value order,
  each step one compare-and-sum pass over the row.
  """
  lo = jnp.zeros(values.shape[:-1], jnp.uint32)
  hi = jnp.full(values.shape[:-1], 0xFFFFFFFF, jnp.uint32)

  def step(_, bounds):
    lo, hi = bounds
    mid = lo + ((hi - lo) >> 1) + 1  # Upper middle, no overflow; only used where lo < hi.
    t = _from_order_keys(mid)[..., None]
    ok = jnp.sum(jnp.where(values >= t, weights, 0), axis=-1) >= target
    busy = lo < hi
    return jnp.where(busy & ok, mid, lo), jnp.where(busy & ~ok, mid - 1, hi)

  lo, _ = jax.lax.fori_loop(0, 32, step, (lo, hi))
  return _from_order_keys(lo)


# How top-k / top-p thresholds are found (see the module docstring): read when a
# sampling function is traced, so set it before the sampler's programs compile.
FILTER_SEARCH = "auto"
SEARCHES = ("auto", "top_k", "bisect")
# Candidates `jax.lax.top_k` takes per row on the "top_k" search. Above 16, XLA:GPU's
# TopK is a sort, whose cost hardly depends on k (H200, [1, 152064]: 94 us for 256,
# 101 for 64; 315 for 16, a kernel of one thread block a row); 256 leaves fewer rows
# to the bisection fallback. (Thresholds alone, 50 repeats in one program.)
CANDIDATES = 256
# "auto" takes the "top_k" search on an accelerator up to this many values per
# filter (rows x vocabulary): past it XLA:GPU's sort of every row costs more than the
# bisection (H200, top-p 0.95: 124 against 242 us at [1, 152064], 129 against
# 198 us at [8, 32000]; 291 against 193 us at [4, 152064]).
AUTO_TOP_K_VALUES = 2 ** 18


def filter_search(search: str | None = None, shape: tuple = ()) -> str:
  """"top_k" or "bisect": `search` (None: FILTER_SEARCH), "auto" resolved for the
  default backend and the filtered values' shape."""
  search = FILTER_SEARCH if search is None else search
  if search not in SEARCHES:
    raise ValueError(f"filter search {search!r} is not one of {SEARCHES}")
  if search == "auto":
    small = math.prod(shape) <= AUTO_TOP_K_VALUES
    return "top_k" if jax.default_backend() != "cpu" and small else "bisect"
  return search


def _candidates(values, candidates: int | None):
  """The row's largest min(candidates, V) values, largest first: [B, K]."""
  count = CANDIDATES if candidates is None else candidates
  return jax.lax.top_k(values, min(count, values.shape[-1]))[0]


def _top_k_threshold(values, k, candidates: int | None):
  """Per row, the k-th largest of values [..., V] (k [...] in 1..V): the largest t
  with count(values >= t) >= k. Rows with k above the candidates take the bisection."""
  top = _candidates(values, candidates)
  count = top.shape[-1]
  kth = jnp.take_along_axis(top, jnp.clip(k - 1, 0, count - 1)[..., None], axis=-1)[..., 0]
  beyond = k > count
  return jax.lax.cond(
      jnp.any(beyond),
      lambda: jnp.where(beyond, _largest_threshold(values, jnp.ones_like(values, jnp.int32), k), kth),
      lambda: kth)


# The least mass a top-p filter asks for: a smaller top_p (1e-40, a subnormal float32 that
# XLA flushes to 0) would let the threshold search pass every token by, and the draw
# would read an all-masked row. At 1e-8 the most likely token (at least 1/V of the mass,
# for any V up to 1e8) always stays: a tiny top_p is greedy, as vLLM's.
MIN_TOP_P = 1e-8


def _top_p_threshold(probs, p, on, candidates: int | None):
  """Per row, the largest t with sum(probs[probs >= t]) >= p (probs [..., V], p [...]):
  the first candidate, largest first, whose running sum reaches p. Rows where `on`
  and the candidates' mass falls short of p take the bisection."""
  top = _candidates(probs, candidates)
  count = top.shape[-1]
  reached = jnp.cumsum(top, axis=-1) >= p[..., None]
  index = jax.lax.broadcasted_iota(jnp.int32, top.shape, top.ndim - 1)
  first = jnp.min(jnp.where(reached, index, count - 1), axis=-1)  # First index reaching p.
  pth = jnp.take_along_axis(top, first[..., None], axis=-1)[..., 0]
  short = on & ~reached[..., -1]
  return jax.lax.cond(
      jnp.any(short),
      lambda: jnp.where(short, _largest_threshold(probs, probs, p), pth),
      lambda: pth)


def top_k_mask(logits: jax.Array, k: int, search: str | None = None,
               candidates: int | None = None) -> jax.Array:
  """True for the k largest logits of each row [..., V] (and any tied with the k-th)."""
  count = CANDIDATES if candidates is None else candidates
  if filter_search(search, logits.shape) == "top_k" and k <= min(count, logits.shape[-1]):
    t = jax.lax.top_k(logits, k)[0][..., -1]  # k is static: take only k.
  else:
    t = _largest_threshold(logits, jnp.ones_like(logits, jnp.int32), k)
  return logits >= t[..., None]


def top_p_mask(probs: jax.Array, p: float, search: str | None = None,
               candidates: int | None = None) -> jax.Array:
  """True for the smallest set of most likely tokens whose mass reaches p (probs [..., V])."""
  probs, p = probs.astype(jnp.float32), max(p, MIN_TOP_P)
  if filter_search(search, probs.shape) == "top_k":
    t = _top_p_threshold(probs, jnp.full(probs.shape[:-1], p, jnp.float32),
                         jnp.ones(probs.shape[:-1], bool), candidates)
  else:
    t = _largest_threshold(probs, probs, jnp.float32(p))
  return probs >= t[..., None]


def filtered_logits(logits: jax.Array, params: SamplingParams,
                    search: str | None = None) -> jax.Array:
  """logits / temperature with the tokens that top-k / top-p remove set to -inf."""
  scaled = logits.astype(jnp.float32) / params.temperature
  if params.top_k and params.top_k < logits.shape[-1]:
    scaled = jnp.where(top_k_mask(scaled, params.top_k, search), scaled, -jnp.inf)
  if params.top_p < 1.0:
    probs = jax.nn.softmax(scaled, axis=-1)
    scaled = jnp.where(top_p_mask(probs, params.top_p, search), scaled, -jnp.inf)
  return scaled


def argmax(logits: jax.Array) -> jax.Array:
  """First index of each row's maximum (a max and a min-reduce: 3x faster than
  jnp.argmax's variadic reduce on XLA:CPU)."""
  top = jnp.max(logits, axis=-1, keepdims=True)
  index = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
  return jnp.min(jnp.where(logits == top, index, logits.shape[-1]), axis=-1)


def _last_positive(x):
  """Index of the last entry > 0 in each row of x [B, N]."""
  index = jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)
  return jnp.max(jnp.where(x > 0, index, 0), axis=-1)


def inverse_cdf(weights: jax.Array, u: jax.Array, block: int = 256) -> jax.Array:
  """Index i with cumsum(weights)[i-1] < u * sum(weights) <= cumsum(weights)[i], per row.

  weights [B, V] >= 0 (unnormalised), u [B] in (0, 1]. Two levels: pick a block of
  `block` entries by the blocks' cumulative mass, then an entry inside it, so only
  [B, V / block] and [B, block] cumsums are taken (a full-vocabulary cumsum costs
  more than the rest of sampling on CPU). Never returns an entry of weight 0.
  """
  b, v = weights.shape
  nb = -(-v // block)
  w = jnp.pad(weights.astype(jnp.float32), ((0, 0), (0, nb * block - v))).reshape(b, nb, block)
  mass = jnp.sum(w, axis=-1)  # [B, nb]
  cdf = jnp.cumsum(mass, axis=-1)
  target = u * cdf[:, -1]
  j = jnp.minimum(jnp.sum(cdf < target[:, None], axis=-1), _last_positive(mass))
  before = jnp.where(j > 0, jnp.take_along_axis(cdf, jnp.maximum(j - 1, 0)[:, None], 1)[:, 0], 0.0)
  inside = jnp.take_along_axis(w, j[:, None, None], axis=1)[:, 0]  # [B, block]
  i = jnp.sum(jnp.cumsum(inside, axis=-1) < (target - before)[:, None], axis=-1)
  # Rounding (or a parallel GPU cumsum dipping by an ulp) can leave i on a zero
  # entry or past the last one: take the nearest positive entry at or before i,
  # else the first after it (the block has mass, so one exists).
  index = jax.lax.broadcasted_iota(jnp.int32, inside.shape, 1)
  positive, i = inside > 0, i[:, None]
  before_i = jnp.max(jnp.where(positive & (index <= i), index, -1), axis=-1)
  after_i = jnp.min(jnp.where(positive & (index >= i), index, block), axis=-1)
  return (j * block + jnp.where(before_i >= 0, before_i, after_i)).astype(jnp.int32)


def sample(logits: jax.Array, keys: jax.Array, params: SamplingParams,
           search: str | None = None) -> jax.Array:
  """One token per row of logits [B, V]; keys [B] is one PRNG key per row.

  Draws by inverting the cumulative distribution with one uniform per row,
  so a row's token depends only on its own logits and key. `search`: how the
  filters' thresholds are found (None: FILTER_SEARCH).
  """
  if params.greedy:
    return argmax(logits)
  scaled = filtered_logits(logits, params, search)
  weights = jnp.exp(scaled - jnp.max(scaled, axis=-1, keepdims=True))
  u = 1.0 - jax.vmap(lambda k: jax.random.uniform(k, ()))(keys)  # In (0, 1].
  return inverse_cdf(weights, u)


@struct.dataclass
class RowSampling:
  """Per-row temperature, top-k and top-p ([B] arrays, traced: one compiled program
  serves any mix of values). Temperature 0 is greedy; top_k 0 and top_p 1 are off."""
  temperature: jax.Array
  top_k: jax.Array
  top_p: jax.Array

  @classmethod
  def of(cls, temperature: ArrayLike, top_k: ArrayLike, top_p: ArrayLike) -> "RowSampling":
    return cls(jnp.asarray(temperature, jnp.float32), jnp.asarray(top_k, jnp.int32),
               jnp.asarray(top_p, jnp.float32))


def sample_rows(logits: jax.Array, keys: jax.Array, rows: RowSampling,
                search: str | None = None) -> jax.Array:
  """`sample` with each row's own temperature, top-k and top-p: the same draws as
  `sample` with that row's SamplingParams (a filter runs for every row, off where a
  row does not ask for it, and is skipped when no row does: its threshold search
  costs more than the draw)."""
  top_k_search = filter_search(search, logits.shape) == "top_k"
  greedy = rows.temperature == 0
  scaled = logits.astype(jnp.float32) / jnp.where(greedy, 1.0, rows.temperature)[:, None]
  vocab = logits.shape[-1]
  use_k = (rows.top_k > 0) & (rows.top_k < vocab)

  def top_k(scaled):
    k = jnp.where(use_k, rows.top_k, 1)
    kth = (_top_k_threshold(scaled, k, None) if top_k_search else
           _largest_threshold(scaled, jnp.ones_like(scaled, jnp.int32), k))
    return jnp.where(~use_k[:, None] | (scaled >= kth[:, None]), scaled, -jnp.inf)

  use_p = rows.top_p < 1.0

  def top_p(scaled):
    probs = jax.nn.softmax(scaled, axis=-1)
    p = jnp.where(use_p, jnp.maximum(rows.top_p, MIN_TOP_P), 1.0)
    pth = (_top_p_threshold(probs, p, use_p, None) if top_k_search else
           _largest_threshold(probs, probs, p))
    return jnp.where(~use_p[:, None] | (probs >= pth[:, None]), scaled, -jnp.inf)

  scaled = jax.lax.cond(jnp.any(use_k), top_k, lambda x: x, scaled)
  scaled = jax.lax.cond(jnp.any(use_p), top_p, lambda x: x, scaled)
  weights = jnp.exp(scaled - jnp.max(scaled, axis=-1, keepdims=True))
  u = 1.0 - jax.vmap(lambda k: jax.random.uniform(k, ()))(keys)
  return jnp.where(greedy, argmax(logits), inverse_cdf(weights, u))
