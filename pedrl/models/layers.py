"""Building blocks shared by the decoder and the BERT encoder."""
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

# A large finite negative instead of -inf: a query row with no visible key
# (a padding position) then gets a harmless uniform softmax, not NaN.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


class RMSNorm(nn.Module):
  """RMS norm, statistics in float32, scale applied in the input dtype (as HF does)."""
  eps: float
  dtype: jnp.dtype = jnp.float32

  @nn.compact
  def __call__(self, x):
    scale = self.param("scale", nn.initializers.ones, (x.shape[-1],), self.dtype)
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
    return scale * normed.astype(x.dtype)


def dot_attention(q, segments):
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
  probs = jax.nn.softmax(jnp.concatenate(scores, axis=-1), axis=-1)
  out, start = 0, 0
  for _, v, _ in segments:
    out = out + _weighted_values(probs[..., start:start + v.shape[2]], v)
    start += v.shape[2]
  return out.reshape(b, t, h, d).astype(segments[0][1].dtype)


def _scores(q, k):
  """q [B, T, KV, G, D] against keys k [B, KV, D, S]: float32 scores [B, KV, G, T, S]."""
  if q.shape[1] == 1:
    # One-token decode as a multiply-reduce that streams the cache once, measured
    # fastest on XLA:CPU (`pedrl.bench.sampling`): it sums over D, a major axis of
    # the transposed keys, so the S axis stays contiguous (a batched dot_general over
    # (B, KV) with 2 query rows per group ran ~8x slower at 256 slots).
    f32 = jnp.float32
    return jnp.sum(q[:, 0, :, :, :, None].astype(f32) * k[:, :, None].astype(f32),
                   axis=-2)[:, :, :, None]
  return jnp.einsum("btkgd,bkds->bkgts", q, k, preferred_element_type=jnp.float32)


def _weighted_values(probs, v):
  """probs [B, KV, G, T, S] times values v [B, KV, S, D]: float32 [B, T, KV, G, D]."""
  if probs.shape[3] == 1:  # Decode: a multiply-reduce over S.
    return jnp.sum(probs[:, :, :, 0, :, None] * v[:, :, None].astype(jnp.float32), axis=-2)[:, None]
  out = jnp.einsum("bkgts,bksd->bkgtd", probs.astype(v.dtype), v,
                   preferred_element_type=jnp.float32)
  return out.transpose(0, 3, 1, 2, 4)  # The small output moves, not the probabilities.


def dense(features: int, use_bias: bool, dtype, name: str, f32_out: bool = False) -> nn.Dense:
  """A Dense layer whose params and inputs share the model dtype.

  With f32_out the product is returned in float32 (for logits) instead of being
  rounded to the model dtype.
  """
  dot = functools.partial(jax.lax.dot_general, preferred_element_type=jnp.float32) if f32_out else None
  return nn.Dense(features, use_bias=use_bias, dtype=dtype, param_dtype=dtype,
                  dot_general=dot, name=name)
