"""A decode step's attention over the KV cache as a Pallas kernel (flash-decoding).

One new token per row attends over the cache's S slots and itself. The kernel splits
the cache into blocks of `block` slots and runs one program per (row, KV head, block):
the G query heads of the group against the block's keys, a softmax within the block,
and the probabilities times its values. It returns each block's unnormalised partial
result (maximum score, sum of exponentials, weighted values), and XLA merges the
blocks and the new token's own key with one rescaling, so every block runs in
parallel even at batch 1 (where rows x KV heads alone would leave most of a GPU idle).

Only the query side is padded (G heads up to 16, the smallest side of a Triton
matmul); the cache is read in its own layout and dtype: keys [B, KV, D, S], values
[B, KV, S, D] (`models.decoder.LayerCache`). On a CPU the kernel runs in Pallas's
interpret mode: for tests, not for speed (ModelConfig.decode_attention).
"""
import functools
import typing

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from pedrl.models.layers import MASK_VALUE

if typing.TYPE_CHECKING:  # The decoder imports this module.
  from pedrl.models.decoder import LayerCache
MIN_ROWS = 16  # Triton's matmuls take at least 16 rows.


def block_size(slots: int, largest: int = 128) -> int | None:
  """The largest power of two <= `largest` and >= 16 that divides `slots`, or None."""
  size = largest
  while size >= 16:
    if slots % size == 0:
      return size
    size //= 2
  return None


def _kernel(q_ref, k_ref, v_ref, mask_ref, m_ref, l_ref, o_ref, *, scale) -> None:
  """One (row, KV head, block): q [Gp, D], k [D, n], v [n, D], mask [1, n] ->
  the block's maximum m [1, Gp], sum l [1, Gp] and weighted values o [Gp, D]."""
  q, k, v = q_ref[...], k_ref[...], v_ref[...]
  # float32 models multiply in float32, not TF32 (as the rest of a float32 model on a GPU).
  exact = jax.lax.Precision.HIGHEST if v.dtype == jnp.float32 else None
  scores = jnp.dot(q, k, precision=exact, preferred_element_type=jnp.float32) * scale  # [Gp, n]
  scores = jnp.where(mask_ref[...] != 0, scores, MASK_VALUE)
  m = jnp.max(scores, axis=1)
  p = jnp.exp(scores - m[:, None])
  m_ref[...] = m[None]
  l_ref[...] = jnp.sum(p, axis=1)[None]
  o_ref[...] = jnp.dot(p.astype(v.dtype), v, precision=exact, preferred_element_type=jnp.float32)


@functools.partial(jax.jit, static_argnames=("block", "interpret"))
def cache_blocks(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, block: int,
                 interpret: bool = False) -> tuple[jax.Array, jax.Array, jax.Array]:
  """Each cache block's partial attention.

  Args:
    q: [B, KV, G, D] the new token's queries, grouped by KV head.
    k: [B, KV, D, S] and v: [B, KV, S, D] the cache; mask [B, S] bool, the slots a
      row may attend. S a multiple of `block` (`block_size`).
  Returns:
    m [B, KV, S / block, G], l alike, o [B, KV, S / block, G, D], float32: per block,
    the largest score, the sum of exp(score - m), and the values weighted by it.
  """
  b, kv, g, d = q.shape
  s = k.shape[-1]
  nb = s // block
  rows = max(MIN_ROWS, 1 << (g - 1).bit_length())
  qp = jnp.pad(q, ((0, 0), (0, 0), (0, rows - g), (0, 0)))
  sq = pl.Squeezed() if hasattr(pl, "Squeezed") else None  # A dim the kernel does not see.
  m, l, o = pl.pallas_call(
      functools.partial(_kernel, scale=d ** -0.5),
      grid=(b, kv, nb),
      in_specs=[
          pl.BlockSpec((sq, sq, rows, d), lambda i, h, j: (i, h, 0, 0)),
          pl.BlockSpec((sq, sq, d, block), lambda i, h, j: (i, h, 0, j)),
          pl.BlockSpec((sq, sq, block, d), lambda i, h, j: (i, h, j, 0)),
          pl.BlockSpec((sq, 1, block), lambda i, h, j: (i, 0, j)),
      ],
      out_specs=[
          pl.BlockSpec((sq, sq, sq, 1, rows), lambda i, h, j: (i, h, j, 0, 0)),
          pl.BlockSpec((sq, sq, sq, 1, rows), lambda i, h, j: (i, h, j, 0, 0)),
          pl.BlockSpec((sq, sq, sq, rows, d), lambda i, h, j: (i, h, j, 0, 0)),
      ],
      out_shape=[jax.ShapeDtypeStruct((b, kv, nb, 1, rows), jnp.float32),
                 jax.ShapeDtypeStruct((b, kv, nb, 1, rows), jnp.float32),
                 jax.ShapeDtypeStruct((b, kv, nb, rows, d), jnp.float32)],
      interpret=interpret,
      name="pedrl_decode_attention",
  )(qp, k, v, mask.astype(jnp.int32)[:, None, :])
  return m[..., 0, :g], l[..., 0, :g], o[..., :g, :]


def attend(q: jax.Array, cache: "LayerCache", new: "LayerCache", block: int,
           interpret: bool = False) -> jax.Array:
  """One new token per row over the cache and itself, one softmax across both.

  Args:
    q: [B, 1, H, D] queries; cache: (k [B, KV, D, S], v [B, KV, S, D], mask [B, 1, S]);
    new: (k [B, KV, D, 1], v [B, KV, 1, D], mask [B, 1, 1]) the token's own.
  Returns:
    [B, 1, H, D] in the values' dtype.
  """
  b, _, h, d = q.shape
  kc, vc, mc = cache
  kn, vn, mn = new
  kv = kc.shape[1]
  qg = q.reshape(b, kv, h // kv, d)
  m, l, o = cache_blocks(qg, kc, vc, mc[:, 0], block, interpret)
  f32 = jnp.float32
  own = jnp.einsum("bkgd,bkd->bkg", qg, kn[..., 0], preferred_element_type=f32) * d ** -0.5
  own = jnp.where(mn[:, 0, :1, None], own, MASK_VALUE)  # [B, KV, G]
  top = jnp.maximum(m.max(axis=2), own)
  w, w_own = jnp.exp(m - top[:, :, None]), jnp.exp(own - top)
  total = jnp.sum(w * l, axis=2) + w_own
  out = jnp.sum(w[..., None] * o, axis=2) + w_own[..., None] * vn[:, :, 0, None, :].astype(f32)
  out = out / total[..., None]
  return out.reshape(b, 1, h, d).astype(vc.dtype)
