"""Decoder-only transformer: Qwen2/Qwen2.5, Qwen3 and Llama 3.x in one module.

Layers are scanned (one compiled layer body over stacked parameters), so compile
time does not grow with depth. Positions come from the attention mask
(cumsum - 1), which makes a left-padded batch equal to each sequence alone.

Layers are unrolled instead when cfg.scan_layers is False (params layers_0,
layers_1, ...; see ModelConfig.scan_layers); `stack_layers` / `unstack_layers`
convert between the two layouts.

KV cache. A cache is a dict of arrays:
  k: [L, B, KV, D, S]     keys per layer at buffer slots 0..S-1, transposed
                          (decode attention sums over D with S contiguous)
  v: [L, B, KV, S, D]     values (with unrolled layers, k and v are tuples of
                          L arrays without the leading L)
  mask: [B, S] bool       which slots hold a real token
  pos:  [B] int32         the position the next real token of each row gets
  end:  [] int32          the first free slot (the same for every row)
A call on T new tokens writes slots end..end+T-1 and lets each query see the
filled slots at or before its own. Prefill, one-token decode and appending a
whole new dialogue turn (with its own padding) are therefore one code path.
Callers keep end + T <= S (the engine's Sampler checks it on the host before
every call). A call with T > S raises; a call that overflows at run time (end is
traced) returns NaN hidden states, so the error cannot pass unnoticed, but its
cache is corrupt (the write was shifted onto the last slots) and must be dropped.
"""
import re

import flax.linen as nn
import jax
import jax.numpy as jnp

from pedrl.models import layers
from pedrl.models import rope
from pedrl.models.config import ModelConfig

REMAT_POLICIES = {
    "nothing": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class Attention(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, x, cos, sin, mask, write_at, kv):
    cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
    b, t, _ = x.shape
    h, g, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    q = layers.dense(h * d, cfg.qkv_bias, dtype, "q")(x).reshape(b, t, h, d)
    k = layers.dense(g * d, cfg.qkv_bias, dtype, "k")(x).reshape(b, t, g, d)
    v = layers.dense(g * d, cfg.qkv_bias, dtype, "v")(x).reshape(b, t, g, d)
    if cfg.qk_norm:  # Qwen3: RMSNorm over each head before rotation.
      q = layers.RMSNorm(cfg.norm_eps, dtype, name="q_norm")(q)
      k = layers.RMSNorm(cfg.norm_eps, dtype, name="k_norm")(k)
    q, k = rope.apply(q, cos, sin), rope.apply(k, cos, sin)
    k, v = k.transpose(0, 2, 3, 1), v.swapaxes(1, 2)  # [B, KV, D, T] and [B, KV, T, D].
    if kv is not None:  # The cache layout (init_cache).
      k = jax.lax.dynamic_update_slice(kv["k"], k.astype(kv["k"].dtype), (0, 0, 0, write_at))
      v = jax.lax.dynamic_update_slice(kv["v"], v.astype(kv["v"].dtype), (0, 0, write_at, 0))
      kv = {"k": k, "v": v}
    s = mask.shape[-1]  # Attend to the first s slots only (the window, see Decoder).
    out = layers.dot_attention(q, k[..., :s].astype(dtype), v[:, :, :s].astype(dtype), mask)
    return layers.dense(cfg.hidden_size, cfg.o_bias, dtype, "o")(out.reshape(b, t, h * d)), kv


class GatedMLP(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, x):
    cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
    gate = layers.dense(cfg.intermediate_size, cfg.mlp_bias, dtype, "gate")(x)
    up = layers.dense(cfg.intermediate_size, cfg.mlp_bias, dtype, "up")(x)
    return layers.dense(cfg.hidden_size, cfg.mlp_bias, dtype, "down")(nn.silu(gate) * up)


class DecoderLayer(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, x, cos, sin, mask, write_at, kv):
    cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
    h, kv = Attention(cfg, name="attn")(
        layers.RMSNorm(cfg.norm_eps, dtype, name="input_norm")(x), cos, sin, mask, write_at, kv)
    x = x + h
    x = x + GatedMLP(cfg, name="mlp")(layers.RMSNorm(cfg.norm_eps, dtype, name="post_attn_norm")(x))
    return x, kv


def scanned(layer_cls, cfg: ModelConfig, n_broadcast: int, remat_policy: str = "nothing"):
  """Wraps a layer in remat (if configured) and scans it over cfg.num_layers.

  The layer is called as layer(x, *broadcast_args, per_layer) and returns
  (x, per_layer_out); per_layer may be None.
  """
  if cfg.remat:
    layer_cls = nn.remat(layer_cls, prevent_cse=False, policy=REMAT_POLICIES[remat_policy])
  return nn.scan(
      layer_cls, variable_axes={"params": 0}, split_rngs={"params": True},
      in_axes=(nn.broadcast,) * n_broadcast + (0,), length=cfg.num_layers)


def unrolled(layer_cls, cfg: ModelConfig, remat_policy: str = "nothing"):
  """The layer class for unrolled stacks, wrapped in remat if configured."""
  if cfg.remat:
    return nn.remat(layer_cls, policy=REMAT_POLICIES[remat_policy])
  return layer_cls


def unstack_layers(params):
  """Scanned params (`layers` with a leading layer axis) -> layers_0, layers_1, ..."""
  out = {k: v for k, v in params.items() if k != "layers"}
  num_layers = jax.tree.leaves(params["layers"])[0].shape[0]
  for i in range(num_layers):
    out[f"layers_{i}"] = jax.tree.map(lambda x, i=i: x[i], params["layers"])
  return out


def stack_layers(params):
  """Unrolled params (layers_0, layers_1, ...) -> one `layers` tree with a leading layer axis."""
  names = sorted((k for k in params if re.fullmatch(r"layers_\d+", k)), key=lambda k: int(k[7:]))
  out = {k: v for k, v in params.items() if k not in names}
  out["layers"] = jax.tree.map(lambda *xs: jnp.stack(xs), *(params[k] for k in names))
  return out


def positions_from_mask(mask, start=None):
  """Position of each real token: start + number of real tokens before it."""
  pos = jnp.cumsum(mask.astype(jnp.int32), axis=1) - 1
  if start is not None:
    pos = pos + start[:, None]
  return jnp.maximum(pos, 0)


def init_cache(cfg: ModelConfig, batch: int, size: int, dtype=None) -> dict:
  """An empty KV cache with `size` slots per row: keys [B, KV, D, S] (transposed, for
  decode attention, see layers.dot_attention), values [B, KV, S, D]."""
  dtype = jnp.dtype(dtype or cfg.dtype)
  def zeros(shape):  # A fresh buffer per call: k and v are donated separately.
    if cfg.scan_layers:
      return jnp.zeros((cfg.num_layers,) + shape, dtype)
    return tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_layers))
  return {"k": zeros((batch, cfg.num_kv_heads, cfg.head_dim, size)),
          "v": zeros((batch, cfg.num_kv_heads, size, cfg.head_dim)),
          "mask": jnp.zeros((batch, size), bool), "pos": jnp.zeros((batch,), jnp.int32),
          "end": jnp.zeros((), jnp.int32)}


class Decoder(nn.Module):
  """Returns final hidden states; `logits` applies the head (LM or score) in float32."""
  cfg: ModelConfig

  def setup(self):
    cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
    self.embed = nn.Embed(cfg.vocab_size, cfg.hidden_size, dtype=dtype, param_dtype=dtype)
    if cfg.scan_layers:
      self.layers = scanned(DecoderLayer, cfg, n_broadcast=4)(cfg)
    else:
      layer_cls = unrolled(DecoderLayer, cfg)
      self.layers = [layer_cls(cfg) for _ in range(cfg.num_layers)]
    self.final_norm = layers.RMSNorm(cfg.norm_eps, dtype)
    if cfg.task == "causal_lm" and not cfg.tie_embeddings:
      self.lm_head = layers.dense(cfg.vocab_size, False, dtype, "lm_head", f32_out=True)
    if cfg.task == "seq_cls":
      self.score = layers.dense(cfg.num_labels, False, dtype, "score", f32_out=True)
    self.inv_freq, self.rope_scale = rope.frequencies(
        cfg.head_dim, cfg.rope_theta, cfg.rope_scaling_dict)

  def __call__(self, tokens, mask, cache=None, positions=None, window=None):
    """Runs the stack on tokens [B, T] with mask [B, T] (True = real token).

    With a cache, `window` (static) limits attention to its first `window`
    slots: a dialogue's cache is sized for the whole dialogue, and early turns
    then read only the part they can have filled. Tokens written past the
    window make the hidden states NaN, like an overflow.

    Returns (hidden [B, T, E], new cache or None).
    """
    t = tokens.shape[1]
    mask = mask.astype(bool)
    if cache is None:
      if positions is None:
        positions = positions_from_mask(mask)
      causal = jnp.tril(jnp.ones((t, t), bool))
      attn_mask = mask[:, None, :] & causal[None]
      write_at, kv = 0, None
    else:
      size = cache["mask"].shape[1]
      window = size if window is None else min(window, size)
      if t > window:
        raise ValueError(f"{t} new tokens do not fit a KV cache window of {window} slots")
      if positions is None:
        positions = positions_from_mask(mask, cache["pos"])
      write_at = cache["end"]
      slots = jnp.arange(window)
      kv_mask = jax.lax.dynamic_update_slice(cache["mask"], mask, (0, write_at))
      query_slots = write_at + jnp.arange(t)
      attn_mask = kv_mask[:, None, :window] & (slots[None, None, :] <= query_slots[None, :, None])
      kv = {"k": cache["k"], "v": cache["v"]}
    cos, sin = rope.cos_sin(positions, self.inv_freq, self.rope_scale)
    x = self.embed(tokens)
    if self.cfg.scan_layers:
      x, kv = self.layers(x, cos, sin, attn_mask, write_at, kv)
    else:
      new_kv = []
      for i, layer in enumerate(self.layers):
        x, kv_i = layer(x, cos, sin, attn_mask, write_at,
                        None if kv is None else {"k": kv["k"][i], "v": kv["v"][i]})
        new_kv.append(kv_i)
      if kv is not None:
        kv = {"k": tuple(c["k"] for c in new_kv), "v": tuple(c["v"] for c in new_kv)}
    hidden = self.final_norm(x)
    if cache is None:
      return hidden, None
    overflow = write_at + t > window
    hidden = jnp.where(overflow, jnp.nan, hidden).astype(hidden.dtype)
    new_cache = dict(kv, mask=kv_mask, pos=cache["pos"] + mask.sum(1, dtype=jnp.int32),
                     end=cache["end"] + t)
    return hidden, new_cache

  def logits(self, hidden):
    """Head outputs in float32: vocabulary logits, or per-token class scores for seq_cls."""
    if self.cfg.task == "seq_cls":
      return self.score(hidden)
    if self.cfg.tie_embeddings:
      return jnp.einsum("bte,ve->btv", hidden, self.embed.embedding,
                        preferred_element_type=jnp.float32)
    return self.lm_head(hidden)

  def forward(self, tokens, mask, cache=None, positions=None, window=None):
    """`__call__` followed by `logits`: (logits [B, T, V or labels], new cache)."""
    hidden, cache = self(tokens, mask, cache, positions, window)
    return self.logits(hidden), cache


def pool_last(values, mask, tokens=None, pad_id=None):
  """values [B, T, ...] at each row's last real token (left or right padding).

  With tokens and pad_id, tokens equal to pad_id do not count as real either:
  transformers' *ForSequenceClassification picks the rightmost non-pad token, so
  a row that ends in the pad id (pad == eos reward models) is scored one token
  earlier. Pass both to reproduce it.
  """
  t = mask.shape[1]
  real = mask.astype(bool)
  if pad_id is not None:
    real = real & (tokens != pad_id)
  last = t - 1 - jnp.argmax(jnp.flip(real, axis=1), axis=1)
  return jnp.take_along_axis(values, last.reshape((-1, 1) + (1,) * (values.ndim - 2)), axis=1)[:, 0]

