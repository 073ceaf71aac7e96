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


def dot_attention(q, k, v, mask):
  """Grouped-query attention.

  Args:
    q: [B, T, H, D] queries; k: [B, KV, D, S] keys (transposed: the KV-cache
      layout), v: [B, KV, S, D] values, with H a multiple of KV.
    mask: [B, T, S] bool, True where query t may attend key s.
  Returns:
    [B, T, H, D] in the dtype of v. Scores and softmax are float32.
  """
  b, t, h, d = q.shape
  kv = k.shape[1]
  q = q.reshape(b, t, kv, h // kv, d)
  f32 = jnp.float32
  if t == 1:
    # One-token decode as two multiply-reduces that stream the cache once, measured
    # fastest on XLA:CPU (`pedrl.bench.sampling`): scores sum over D, a major axis of
    # the transposed keys, so the S axis stays contiguous (a batched dot_general over
    # (B, KV) with 2 query rows per group ran ~8x slower at 256 slots); values sum over S.
    scores = jnp.sum(q[:, 0, :, :, :, None].astype(f32) * k[:, :, None].astype(f32),
                     axis=-2)[:, :, :, None]  # [B, KV, G, 1, S]
  else:
    scores = jnp.einsum("btkgd,bkds->bkgts", q, k, preferred_element_type=f32)
  scores = scores * (d ** -0.5)
  scores = jnp.where(mask[:, None, None], scores, MASK_VALUE)
  probs = jax.nn.softmax(scores, axis=-1)
  if t == 1:
    out = jnp.sum(probs[:, :, :, 0, :, None] * v[:, :, None].astype(f32), axis=-2)  # [B, KV, G, D]
    return out.reshape(b, 1, h, d).astype(v.dtype)
  out = jnp.einsum("bkgts,bksd->btkgd", probs.astype(v.dtype), v)
  return out.reshape(b, t, h, d)


def dense(features: int, use_bias: bool, dtype, name: str, f32_out: bool = False) -> nn.Dense:
  """A Dense layer whose params and inputs share the model dtype.

  With f32_out the product is returned in float32 (for logits) instead of being
  rounded to the model dtype.
  """
  dot = functools.partial(jax.lax.dot_general, preferred_element_type=jnp.float32) if f32_out else None
  return nn.Dense(features, use_bias=use_bias, dtype=dtype, param_dtype=dtype,
                  dot_general=dot, name=name)
