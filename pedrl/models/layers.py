"""Building blocks shared by the decoder and the BERT encoder."""
import functools
from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

# A large finite negative instead of -inf: a query row with no visible key
# (a padding position) then gets a harmless uniform softmax, not NaN.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


class RMSNorm(nn.Module):
  """RMS norm, statistics in float32, scale applied in the input dtype (as HF does)."""
  eps: float
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.dtype)
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return scale * normed.astype(x.dtype)


def dot_attention(q: jax.Array,
                  segments: Sequence[tuple[jax.Array, jax.Array, jax.Array]]) -> jax.Array:
  """Grouped-query attention over one or more key/value segments, one softmax
  across all of them.

  The decoder passes a KV cache and the new tokens as two segments, so a call
  reads the cache without first writing into it (an in-place write followed by
  a read of the same buffer made XLA copy the cache, see models.decoder).

  Args:
    q: [B, T, H, D] queries.
    segments: (k, v, mask) triples: keys k [B, KV, D, S] (transposed: the
      KV-cache layout), values v [B, KV, S, D], with H a multiple of KV, and
      mask [B, T or 1, S] bool, True where query t may attend key s.
  Returns:
    [B, T, H, D] in the dtype of the values. Scores and softmax are float32.
  """
  b, t, h, d = q.shape
  kv = segments[0][0].shape[1]
  q = q.reshape(b, t, kv, h // kv, d)
  if t > 1 and len(segments) > 1:
    # Many queries: one concatenation of keys and values costs less than
    # concatenating [T, S] scores and slicing the probabilities back apart
    # (about half the attention time of a 192-token chunk on XLA:CPU).
    k, v, mask = zip(*segments)
    segments = [(jnp.concatenate(k, -1), jnp.concatenate(v, 2),
                 jnp.concatenate([jnp.broadcast_to(m, (b, t, m.shape[-1])) for m in mask], -1))]
  scores = [jnp.where(mask[:, None, None], _scores(q, k) * (d ** -0.5), MASK_VALUE)
            for k, _, mask in segments]
  if len(segments) == 1:
    out = _weighted_values(jax.nn.softmax(scores[0], axis=-1), segments[0][1])
  else:
    # One softmax over all segments without concatenating their scores: each segment's
    # exponentials against the common maximum, values weighted per segment, one
    # division at the end. A decode step's scores over the cache and over the new token
    # were concatenated before: on an H100 that fusion ran on 42 thread blocks, 10 us a
    # layer of a 7B model's 229 us step (docs/performance.md).
    top = functools.reduce(jnp.maximum, [s.max(-1, keepdims=True) for s in scores])
    exps = [jnp.exp(s - top) for s in scores]
    total = functools.reduce(jnp.add, [e.sum(-1, keepdims=True) for e in exps])
    out = functools.reduce(jnp.add, [_weighted_values(e, v) for e, (_, v, _) in zip(exps, segments)])
    out = out / total.transpose(0, 3, 1, 2, 4)  # [B, KV, G, T, 1] -> [B, T, KV, G, 1].
  return out.reshape(b, t, h, d).astype(segments[0][1].dtype)


def causal_attention(q: jax.Array, k: jax.Array, v: jax.Array, lengths: jax.Array,
                     implementation: str) -> jax.Array:
  """Causal grouped-query attention of right-padded rows through
  `jax.nn.dot_product_attention` ("cudnn": cuDNN's flash attention, whose forward and
  backward passes keep no [T, T] scores or probabilities in memory; "xla": the same
  computation in XLA's ops).

  Args:
    q: [B, T, H, D] queries; k, v: [B, T, KV, D] keys and values, H a multiple of KV.
    lengths: int32 [B], each row's real tokens, which come first.
  Returns:
    [B, T, H, D] in the dtype of the values, zero at padding queries.
  """
  t = q.shape[1]
  if t % 2:
    # cuDNN's kernels for a gradient take even lengths only (jax's check_is_flash_attention
    # refuses "Unsupported sequence length Q 9, KV 9"): one more position, past every
    # row's length, so masked out. The "xla" implementation pads alike.
    q, k, v = (jnp.pad(a, ((0, 0), (0, 1), (0, 0), (0, 0))) for a in (q, k, v))
  out = jax.nn.dot_product_attention(q, k, v, is_causal=True, query_seq_lengths=lengths,
                                     key_value_seq_lengths=lengths,
                                     implementation=implementation)[:, :t]
  real = jnp.arange(t)[None, :] < lengths[:, None]
  return jnp.where(real[:, :, None, None], out, 0).astype(v.dtype)


def blocked_attention(q: jax.Array, cache: Any, filled: jax.Array, new: Any,
                      block: int) -> jax.Array:
  """Attention of T new tokens over a KV cache and themselves, in blocks.

  The [T, S] score matrix is never materialised: queries go through `block`-row
  blocks (one `lax.map` step each), keys through `block`-slot blocks with an
  online softmax, so every intermediate stays cache-sized, and the loops visit
  only what a query can see: the cache's first `filled` slots (a traced count:
  the cost follows the filled length, not the window) and the new tokens up to
  its own block (causal). On XLA:CPU, in a microbenchmark on the 2-core machine,
  a 192-token dialogue turn's attention over a 704-slot cache took 26 ms per
  layer against 72 ms for the whole matrix (docs/performance.md).

  Args:
    q: [B, T, H, D] queries of the new tokens.
    cache: (k [B, KV, D, S'], v [B, KV, S', D], mask [B, 1, S]) of the cache's slots;
      only the first S (mask's) are read, S' >= S.
    filled: [] int32, slots 0..filled-1 of the cache may hold tokens (later are skipped).
    new: (k [B, KV, D, T], v [B, KV, T, D], mask [B, T, T]) of the new tokens,
      mask causal and True where query t may attend key t'.
    block: rows per query block and slots per key block (the largest divisor of T
      at most `block` is used for the new tokens).
  Returns:
    [B, T, H, D] in the dtype of the values; scores and softmax are float32.
  """
  b, t, h, d = q.shape
  kc, vc, mc = cache
  kn, vn, mn = new
  kv, s = kn.shape[1], mc.shape[-1]
  g, f32 = h // kv, jnp.float32
  bq = max(x for x in range(1, min(block, t) + 1) if t % x == 0)
  nq = t // bq
  # Query blocks [nq, B, KV, G * bq, D], rows ordered (g, t) within a block.
  qb = q.reshape(b, nq, bq, kv, g, d)
  qb = qb.transpose(1, 0, 3, 4, 2, 5).reshape(nq, b, kv, g * bq, d)
  mn = mn.reshape(b, nq, bq, t).swapaxes(0, 1)  # [nq, B, bq, T]

  def update(state, q_i, k, v, mask):
    """The online softmax state after one key block (k [B, KV, D, n], v [B, KV, n, D],
    mask [B, bq, n])."""
    m, l, o = state
    sc = jnp.einsum("bkqd,bkds->bkqs", q_i, k, preferred_element_type=f32) * d ** -0.5
    sc = jnp.where(mask[:, None, None], sc.reshape(b, kv, g, bq, -1), MASK_VALUE)
    sc = sc.reshape(b, kv, g * bq, -1)
    m_new = jnp.maximum(m, sc.max(-1))
    p, scale = jnp.exp(sc - m_new[..., None]), jnp.exp(m - m_new)
    o = o * scale[..., None] + jnp.einsum("bkqs,bksd->bkqd", p.astype(v.dtype), v,
                                          preferred_element_type=f32)
    return m_new, l * scale + p.sum(-1), o

  def one_block(args):
    i, q_i, mask_i = args
    state = (jnp.full((b, kv, g * bq), -jnp.inf, f32), jnp.zeros((b, kv, g * bq), f32),
             jnp.zeros((b, kv, g * bq, d), f32))
    if s:
      bk = min(block, s)

      def cache_block(j, state):
        # The last block may be shifted back to fit the cache; its slots already
        # visited are masked out.
        start = jnp.minimum(j * bk, s - bk)
        slot = start + jnp.arange(bk)
        mask = jax.lax.dynamic_slice_in_dim(mc, start, bk, 2) & (slot >= j * bk)
        return update(state, q_i, jax.lax.dynamic_slice_in_dim(kc, start, bk, 3),
                      jax.lax.dynamic_slice_in_dim(vc, start, bk, 2),
                      jnp.broadcast_to(mask, (b, bq, bk)))
      state = jax.lax.fori_loop(0, (jnp.minimum(filled, s) + bk - 1) // bk, cache_block, state)

    def new_block(j, state):
      start = j * bq
      return update(state, q_i, jax.lax.dynamic_slice_in_dim(kn, start, bq, 3),
                    jax.lax.dynamic_slice_in_dim(vn, start, bq, 2),
                    jax.lax.dynamic_slice_in_dim(mask_i, start, bq, 2))
    m, l, o = jax.lax.fori_loop(0, i + 1, new_block, state)  # Causal: blocks up to its own.
    return o / l[..., None]

  out = jax.lax.map(one_block, (jnp.arange(nq), qb, mn))  # [nq, B, KV, G * bq, D]
  out = out.reshape(nq, b, kv, g, bq, d).transpose(1, 0, 4, 2, 3, 5).reshape(b, t, h, d)
  return out.astype(vn.dtype)


def decode_as_reduce() -> bool:
  """Whether a one-token decode step's attention runs as multiply-reduces (XLA:CPU)
  rather than dots (elsewhere)."""
  return jax.default_backend() == "cpu"


def _scores(q, k):
  """q [B, T, KV, G, D] against keys k [B, KV, D, S]: float32 scores [B, KV, G, T, S]."""
  if q.shape[1] == 1 and decode_as_reduce():
    # One-token decode as a multiply-reduce that streams the cache once, measured
    # fastest on XLA:CPU (`pedrl.bench.sampling`): it sums over D, a major axis of
    # the transposed keys, so the S axis stays contiguous (a batched dot_general over
    # (B, KV) with 2 query rows per group ran ~8x slower at 256 slots). Elsewhere the
    # dot reads the cache's keys in their own dtype: the multiply-reduce cast them to
    # float32 first, a copy of the cache's keys every step on a GPU.
    f32 = jnp.float32
    return jnp.sum(q[:, 0, :, :, :, None].astype(f32) * k[:, :, None].astype(f32),
                   axis=-2)[:, :, :, None]
  return jnp.einsum("btkgd,bkds->bkgts", q, k, preferred_element_type=jnp.float32)


def _weighted_values(probs, v):
  """probs [B, KV, G, T, S] times values v [B, KV, S, D]: float32 [B, T, KV, G, D]."""
  if probs.shape[3] == 1 and decode_as_reduce():  # Decode: a multiply-reduce over S.
    return jnp.sum(probs[:, :, :, 0, :, None] * v[:, :, None].astype(jnp.float32), axis=-2)[:, None]
  out = jnp.einsum("bkgts,bksd->bkgtd", probs.astype(v.dtype), v,
                   preferred_element_type=jnp.float32)
  return out.transpose(0, 3, 1, 2, 4)  # The small output moves, not the probabilities.


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _f32_out_dot(lhs, rhs, dimension_numbers, precision):
  return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision,
                             preferred_element_type=jnp.float32)


def _f32_out_dot_fwd(lhs, rhs, dimension_numbers, precision):
  return _f32_out_dot(lhs, rhs, dimension_numbers, precision), (lhs, rhs)


def _f32_out_dot_bwd(dimension_numbers, precision, residuals, g):
  # The float32 cotangent in the operands' dtype: otherwise jax promotes the operands
  # and both backward matmuls run in float32 (TF32 on a GPU, at half bfloat16's rate).
  # (vjp's own forward matmul is unused, and XLA drops it.)
  lhs, rhs = residuals
  _, vjp = jax.vjp(lambda a, b: jax.lax.dot_general(a, b, dimension_numbers, precision),
                   lhs, rhs)
  return vjp(g.astype(jnp.result_type(lhs, rhs)))


_f32_out_dot.defvjp(_f32_out_dot_fwd, _f32_out_dot_bwd)


def f32_out_dot(lhs: jax.Array, rhs: jax.Array, dimension_numbers: Any, precision: Any = None,
                preferred_element_type: Any = None) -> jax.Array:
  """lax.dot_general with a float32 result from operands of the model dtype (a head's
  logits), whose backward matmuls take their operands in that dtype too."""
  if preferred_element_type not in (None, jnp.float32):
    raise ValueError(f"f32_out_dot returns float32, asked for {preferred_element_type}")
  return _f32_out_dot(lhs, rhs, dimension_numbers, precision)


class DenseParams(nn.Module):
  """The params of a `dense` layer (nn.Dense's names, shapes and initializers), not
  applied: `side_by_side` multiplies several of them at once."""
  features: int
  use_bias: bool
  dtype: jnp.dtype

  @nn.compact
  def __call__(self, in_features: int) -> tuple[jax.Array, jax.Array]:
    kernel = self.param("kernel", nn.initializers.lecun_normal(), (in_features, self.features),
                        self.dtype)
    bias = (self.param("bias", nn.initializers.zeros_init(), (self.features,), self.dtype)
            if self.use_bias else jnp.zeros((self.features,), self.dtype))
    return kernel, bias


def side_by_side(x: jax.Array, params: Sequence[tuple[jax.Array, jax.Array]],
                 dtype: Any) -> list[jax.Array]:
  """x times several Dense layers' (kernel, bias) in one matmul over their kernels
  concatenated; one output per layer, as `dense` would give each."""
  kernel = jnp.concatenate([k.astype(dtype) for k, _ in params], axis=1)
  bias = jnp.concatenate([b.astype(dtype) for _, b in params])
  y = jax.lax.dot_general(x.astype(dtype), kernel, (((x.ndim - 1,), (0,)), ((), ()))) + bias
  ends = np.cumsum([k.shape[1] for k, _ in params])[:-1]
  return jnp.split(y, ends, axis=-1)


def dense(features: int, use_bias: bool, dtype: Any, name: str, f32_out: bool = False) -> nn.Dense:
  """A Dense layer whose params and inputs share the model dtype.

  With f32_out the product is returned in float32 (for logits) instead of being
  rounded to the model dtype (`f32_out_dot`).
  """
  return nn.Dense(features, use_bias=use_bias, dtype=dtype, param_dtype=dtype,
                  dot_general=f32_out_dot if f32_out else None, name=name)
