"""Decoder-only transformer: Qwen2/Qwen2.5, Qwen3 and Llama 3.x in one module.

Layers are scanned (one compiled layer body over stacked parameters), so compile
time does not grow with depth. Positions come from the attention mask
(cumsum - 1), which makes a left-padded batch equal to each sequence alone.

Layers are unrolled instead when cfg.scan_layers is False (params layers_0,
layers_1, ...; see ModelConfig.scan_layers); `stack_layers` / `unstack_layers`
convert between the two layouts.

KV cache. A `KVCache` holds every layer's keys and values at buffer slots
0..S-1, which slots hold a real token (mask [B, S]), the position the next
real token of each row gets (pos [B]) and the first free slot (end, the same
for every row); it and `LayerCache` are the only code that knows how the
layers' arrays are laid out. A call on T new tokens writes slots end..end+T-1
and lets each query see the filled slots at or before its own. Prefill,
one-token decode and appending a whole new dialogue turn (with its own padding)
are therefore one code path.
Callers keep end + T <= S (the engine's Sampler checks it on the host before
every call).

Cost follows the filled slots. A call with a static `window` reads only the
slots it can reach; a chunk of several new tokens (a prompt, a dialogue turn)
goes through `layers.blocked_attention` on CPU (ModelConfig.attention_block),
whose loops stop at the cache's filled slots (`end`, traced). Attention takes
the cache's slots and the new tokens' keys and values as two segments under
one softmax, and the new tokens are written into the cache once,
after the layer stack and after every read (the write depends on the hidden
states, see `Decoder.__call__`). The cache is thus only read inside the layers
and updated in place outside them: when one layer both wrote its slot and read
the window, or when nothing ordered the reads before the write, XLA copied
every layer's whole cache twice per decode step (`pedrl.bench.cache_size` shows
the steps and the copies; tests/engine/test_decode_program.py checks the program).

A call with T > S raises; a call that overflows at run time (end is traced)
returns NaN hidden states and writes NaN keys and values, so the error cannot
pass unnoticed, but its cache is corrupt (the write was shifted onto the last
slots) and must be dropped.
"""
import re
from typing import Any

from flax import struct
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from pedrl import sharding
from pedrl.models import decode_attention, layers
from pedrl.models import rope
from pedrl.models.config import ModelConfig

REMAT_POLICIES = {
    "nothing": jax.checkpoint_policies.nothing_saveable,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


# A decoder's parameter tree: nested dicts of arrays, as flax's init returns them.
Params = Any


@struct.dataclass
class LayerCache:
  """One layer's keys k [B, KV, D, S] and values v [B, KV, S, D], or all layers'
  with a leading layer axis (nn.scan slices it).

  Keys are stored transposed because one-token decode attention sums over D
  with the S axis contiguous (layers.dot_attention takes this layout). The
  methods take one layer's (KVCache vmaps them over a stacked one).
  """
  k: jax.Array
  v: jax.Array

  @classmethod
  def of(cls, k: jax.Array, v: jax.Array) -> "LayerCache":
    """Keys and values [B, T, KV, D] of T tokens, in this layout."""
    return cls(k.transpose(0, 2, 3, 1), v.swapaxes(1, 2))

  def write(self, new: "LayerCache", at: jax.Array | int) -> "LayerCache":
    """`new`'s T slots written at slots at..at+T-1 (one layer's, or all layers'
    with a leading layer axis on both)."""
    lead = (0,) * (self.k.ndim - 1)
    return LayerCache(
        jax.lax.dynamic_update_slice(self.k, new.k.astype(self.k.dtype), lead + (at,)),
        jax.lax.dynamic_update_slice(self.v, new.v.astype(self.v.dtype), lead[:-1] + (at, 0)))

  @property
  def size(self) -> int:
    return self.v.shape[-2]

  def read(self, s: int, dtype: jnp.dtype | str | None) -> tuple[jax.Array, jax.Array]:
    """(keys, values) of the first s slots in `dtype`, as dot_attention takes them."""
    return self.k[..., :s].astype(dtype), self.v[..., :s, :].astype(dtype)

  def gather(self, order: jax.Array) -> "LayerCache":
    """Row b's slots in the order order[b] (order [B, S])."""
    return LayerCache(jnp.take_along_axis(self.k, order[:, None, None, :], axis=3),
                      jnp.take_along_axis(self.v, order[:, None, :, None], axis=2))


@struct.dataclass
class KVCache:
  """A KV cache with S slots per row (see the module docstring).

  k and v are stacked [L, ...] arrays of the layers' LayerCache fields with
  scanned layers, tuples of L arrays with unrolled ones; only this class and
  LayerCache look inside them.
  """
  k: Any
  v: Any
  mask: jax.Array  # [B, S] bool: the slot holds a real token.
  pos: jax.Array  # [B] int32: the position the row's next real token gets.
  end: jax.Array  # [] int32: the first free slot.

  @classmethod
  def zeros(cls, cfg: ModelConfig, batch: int, size: int,
            dtype: jnp.dtype | str | None = None) -> "KVCache":
    """An empty cache with `size` slots per row, in the layout of cfg's layer stack."""
    dtype = jnp.dtype(dtype or cfg.dtype)
    def zeros(shape):  # A fresh buffer per call: k and v are donated separately.
      if cfg.scan_layers:
        return jnp.zeros((cfg.num_layers,) + shape, dtype)
      return tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_layers))
    return cls(k=zeros((batch, cfg.num_kv_heads, cfg.head_dim, size)),
               v=zeros((batch, cfg.num_kv_heads, size, cfg.head_dim)),
               mask=jnp.zeros((batch, size), bool), pos=jnp.zeros((batch,), jnp.int32),
               end=jnp.zeros((), jnp.int32))

  @classmethod
  def shardings(cls, cfg: ModelConfig, mesh: jax.sharding.Mesh, rows: Any, heads: Any) -> "KVCache":
    """NamedShardings of a cache: rows split over mesh axes `rows`, KV heads over
    `heads` (None: replicated)."""
    put = lambda *spec: NamedSharding(mesh, P(*spec))
    kv = put(None, rows, heads) if cfg.scan_layers else (put(rows, heads),) * cfg.num_layers
    return cls(k=kv, v=kv, mask=put(rows), pos=put(rows), end=put())

  @property
  def size(self) -> int:
    return self.mask.shape[1]

  @property
  def batch(self) -> int:
    return self.mask.shape[0]

  @property
  def room(self) -> int:
    """Slots left after the last chunk written (reads `end` from the device)."""
    return self.size - int(self.end)

  @property
  def _stacked(self) -> bool:
    return not isinstance(self.k, tuple)

  @property
  def per_layer(self) -> LayerCache | tuple[LayerCache, ...]:
    """The layers' caches as the layer stack takes them: one LayerCache with a
    leading layer axis (scanned), or a tuple of L LayerCaches (unrolled)."""
    if self._stacked:
      return LayerCache(self.k, self.v)
    return tuple(map(LayerCache, self.k, self.v))

  def write(self, new: LayerCache | tuple[LayerCache, ...], at: jax.Array | int) -> "KVCache":
    """The new tokens' keys and values (in the form `per_layer` gives, T slots
    each) written at slots at..at+T-1 of every layer."""
    if self._stacked:
      return self.with_layers(self.per_layer.write(new, at))
    return self.with_layers(tuple(c.write(n, at) for c, n in zip(self.per_layer, new)))

  def with_layers(self, layers: LayerCache | tuple[LayerCache, ...]) -> "KVCache":
    """This cache with the layers' caches replaced (in the form `per_layer` gives)."""
    if self._stacked:
      return self.replace(k=layers.k, v=layers.v)
    return self.replace(k=tuple(c.k for c in layers), v=tuple(c.v for c in layers))

  def head(self, s: int | None) -> "KVCache":
    """The cache cut to its first s slots (the whole cache if s is None or >= S).
    A call that can reach only those works on the head, at a cost that follows s."""
    if s is None or s >= self.size:
      return self
    return self.replace(k=jax.tree.map(lambda a: a[..., :s], self.k),
                        v=jax.tree.map(lambda a: a[..., :s, :], self.v), mask=self.mask[:, :s])

  def with_head(self, head: "KVCache") -> "KVCache":
    """This cache with its first slots replaced by `head`'s (in place when donated),
    and head's pos and end."""
    if head.size == self.size:
      return head
    put = lambda a, h: jax.lax.dynamic_update_slice(a, h, (0,) * a.ndim)
    return self.replace(k=jax.tree.map(put, self.k, head.k), v=jax.tree.map(put, self.v, head.v),
                        mask=put(self.mask, head.mask), pos=head.pos, end=head.end)

  def grown(self, size: int) -> "KVCache":
    """This cache in one of `size` >= S slots: the same slots first, empty ones after."""
    more = size - self.size
    pad = lambda a, axis: jnp.pad(a, [(0, more if i == a.ndim + axis else 0)
                                      for i in range(a.ndim)])
    return self.replace(k=jax.tree.map(lambda a: pad(a, -1), self.k),
                        v=jax.tree.map(lambda a: pad(a, -2), self.v), mask=pad(self.mask, -1))

  def _map_layers(self, f) -> "KVCache":
    """f (LayerCache -> LayerCache) applied to every layer."""
    layers = self.per_layer
    return self.with_layers(jax.vmap(f)(layers) if self._stacked else tuple(map(f, layers)))

  def take(self, rows: Any) -> "KVCache":
    """The cache of rows `rows` (an int array; may repeat rows, e.g. G copies of a prompt)."""
    pick = lambda x: jnp.take(x, rows, axis=0)
    return self._map_layers(lambda c: jax.tree.map(pick, c)).replace(
        mask=pick(self.mask), pos=pick(self.pos))

  def put(self, rows: Any, part: "KVCache") -> "KVCache":
    """This cache with rows `rows` replaced by `part`'s (len(rows) rows; a repeated row
    must carry equal values) in part's slots, this cache's first part.size (a head,
    written back without a copy of the rows' other slots), and part's end."""
    index = (slice(None), rows) if self._stacked else (rows,)  # Stacked: [L, B, ...].
    slots = slice(0, part.size)
    k_at = lambda a, b: a.at[index + (Ellipsis, slots)].set(b)  # [..., D, S]
    v_at = lambda a, b: a.at[index + (Ellipsis, slots, slice(None))].set(b)  # [..., S, D]
    return self.replace(k=jax.tree.map(k_at, self.k, part.k), v=jax.tree.map(v_at, self.v, part.v),
                        mask=self.mask.at[rows, slots].set(part.mask),
                        pos=self.pos.at[rows].set(part.pos), end=part.end)

  def cleared(self, rows: jax.Array) -> "KVCache":
    """This cache with the rows where `rows` (bool [B]) is true emptied: no slot
    filled, their next token at position 0. Their slots stay taken until `compact`
    packs them away, so clearing a row moves no other row's keys or values."""
    return self.replace(mask=self.mask & ~rows[:, None], pos=jnp.where(rows, 0, self.pos))

  def compact(self) -> "KVCache":
    """Moves each row's filled slots to the front, in order, and the end back.

    Every chunk takes the same slots in all rows, so left padding and rows that
    stopped early leave masked gaps; a long dialogue packs them away when its
    cache runs out of room instead of needing a cache sized for the gaps.
    """
    order = jnp.argsort(~self.mask, axis=1, stable=True)  # Filled slots first, in order.
    return self._map_layers(lambda c: c.gather(order)).replace(
        mask=jnp.take_along_axis(self.mask, order, axis=1),
        end=jnp.max(jnp.sum(self.mask, axis=1, dtype=jnp.int32)))


class Attention(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, masks: tuple,
               kv: LayerCache | None) -> tuple[jax.Array, LayerCache | None]:
    """Attention of x over the cache kv (None: none) and x's own tokens, with
    masks (cache mask or None, the new tokens' mask, the cache's filled slots or
    None); returns (out, the new tokens' LayerCache, None without a cache)."""
    cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
    b, t, _ = x.shape
    h, g, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    fused = self.variables.get("params", {}).get("qkv")  # with_fused_qkv's, when given.
    if cfg.qkv_matmul == "fused" and fused is not None:
      y = jax.lax.dot_general(x.astype(dtype), fused["kernel"].astype(dtype),
                              (((x.ndim - 1,), (0,)), ((), ())))
      if "bias" in fused:
        y = y + fused["bias"].astype(dtype)
      q, k, v = jnp.split(y, [h * d, (h + g) * d], axis=-1)
    elif cfg.qkv_matmul == "fused":
      q, k, v = layers.side_by_side(x, [
          layers.DenseParams(n, cfg.qkv_bias, dtype, name=name)(x.shape[-1])
          for n, name in ((h * d, "q"), (g * d, "k"), (g * d, "v"))], dtype)
    elif cfg.qkv_matmul == "separate":
      q = layers.dense(h * d, cfg.qkv_bias, dtype, "q")(x)
      k = layers.dense(g * d, cfg.qkv_bias, dtype, "k")(x)
      v = layers.dense(g * d, cfg.qkv_bias, dtype, "v")(x)
    else:
      raise ValueError(f"ModelConfig.qkv_matmul={cfg.qkv_matmul!r}: expected separate or fused")
    q, k, v = q.reshape(b, t, h, d), k.reshape(b, t, g, d), v.reshape(b, t, g, d)
    if cfg.qk_norm:  # Qwen3: RMSNorm over each head before rotation.
      q = layers.RMSNorm(cfg.norm_eps, dtype, name="q_norm")(q)
      k = layers.RMSNorm(cfg.norm_eps, dtype, name="k_norm")(k)
    q, k = rope.apply(q, cos, sin), rope.apply(k, cos, sin)
    old_mask, new_mask, filled = masks
    if kv is None and (impl := full_attention(cfg)) != "einsum":  # new_mask: lengths [B].
      out = layers.causal_attention(q, k, v, new_mask, impl)
      return layers.dense(cfg.hidden_size, cfg.o_bias, dtype, "o")(out.reshape(b, t, h * d)), None
    new = LayerCache.of(k, v)
    segments = [(*new.read(t, dtype), new_mask)]
    block = cfg.attention_block
    if block is None:
      block = 256 if jax.default_backend() == "cpu" else 0
    # The cache is read, not written (see Decoder).
    if kv is not None and t > 1 and block:  # Blocks sliced from the whole cache: no copy.
      out = layers.blocked_attention(q, (*kv.read(kv.size, dtype), old_mask), filled,
                                     segments[0], block)
    elif (kv is not None and t == 1 and cfg.decode_attention == "pallas"
          and (kernel_block := decode_attention.block_size(old_mask.shape[-1]))):
      out = decode_attention.attend(q, (*kv.read(old_mask.shape[-1], dtype), old_mask),
                                    segments[0], kernel_block,
                                    interpret=jax.default_backend() == "cpu")
    else:
      if cfg.decode_attention not in ("xla", "pallas"):
        raise ValueError(f"ModelConfig.decode_attention={cfg.decode_attention!r}: expected "
                         "xla or pallas")
      if kv is not None and old_mask.shape[-1]:
        segments.insert(0, (*kv.read(old_mask.shape[-1], dtype), old_mask))
      out = layers.dot_attention(q, segments)
    out = layers.dense(cfg.hidden_size, cfg.o_bias, dtype, "o")(out.reshape(b, t, h * d))
    return out, (None if kv is None else new)


def full_attention(cfg: ModelConfig) -> str:
  """How a whole sequence without a KV cache attends (ModelConfig.full_attention)."""
  impl = cfg.full_attention
  if impl == "auto":
    fused = jax.default_backend() == "gpu" and jnp.dtype(cfg.dtype) in (jnp.bfloat16, jnp.float16)
    impl = "cudnn" if fused else "einsum"
  if impl not in ("einsum", "cudnn", "xla"):
    raise ValueError(f"ModelConfig.full_attention={cfg.full_attention!r}: expected auto, "
                     "einsum, cudnn or xla")
  return impl


def _real_first(mask):
  """Where each row's run of real tokens starts and how long it is; the gather indices
  that bring it to the front (and back); whether the row's real tokens are one run."""
  t = mask.shape[1]
  start = jnp.argmax(mask, axis=1)  # 0 for a row with no real token.
  lengths = mask.sum(1, dtype=jnp.int32)
  ahead = (jnp.arange(t)[None] + start[:, None]) % t
  back = (jnp.arange(t)[None] - start[:, None]) % t
  one_run = (jnp.take_along_axis(mask, ahead, 1) == (jnp.arange(t)[None] < lengths[:, None])).all(1)
  return lengths, ahead, back, one_run


class GatedMLP(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
    gate = layers.dense(cfg.intermediate_size, cfg.mlp_bias, dtype, "gate")(x)
    up = layers.dense(cfg.intermediate_size, cfg.mlp_bias, dtype, "up")(x)
    return layers.dense(cfg.hidden_size, cfg.mlp_bias, dtype, "down")(nn.silu(gate) * up)


class DecoderLayer(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array, cos: jax.Array, sin: jax.Array, masks: tuple,
               kv: LayerCache | None) -> tuple[jax.Array, LayerCache | None]:
    cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
    h, kv = Attention(cfg, name="attn")(
        layers.RMSNorm(cfg.norm_eps, dtype, name="input_norm")(x), cos, sin, masks, kv)
    x = x + h
    x = x + GatedMLP(cfg, name="mlp")(layers.RMSNorm(cfg.norm_eps, dtype, name="post_attn_norm")(x))
    return x, kv


def scanned(layer_cls: type[nn.Module], cfg: ModelConfig, n_broadcast: int,
            remat_policy: str = "nothing") -> type[nn.Module]:
  """Wraps a layer in remat (if configured) and scans it over cfg.num_layers.

  The layer is called as layer(x, *broadcast_args, per_layer) and returns
  (x, per_layer_out); per_layer may be None.
  """
  if cfg.remat:
    layer_cls = nn.remat(layer_cls, prevent_cse=False, policy=REMAT_POLICIES[remat_policy])
  return nn.scan(
      layer_cls, variable_axes={"params": 0}, split_rngs={"params": True},
      in_axes=(nn.broadcast,) * n_broadcast + (0,), length=cfg.num_layers)


def unrolled(layer_cls: type[nn.Module], cfg: ModelConfig,
             remat_policy: str = "nothing") -> type[nn.Module]:
  """The layer class for unrolled stacks, wrapped in remat if configured."""
  if cfg.remat:
    return nn.remat(layer_cls, policy=REMAT_POLICIES[remat_policy])
  return layer_cls


def with_fused_qkv(params: Params) -> Params:
  """params with each attention block's q, k and v kernels (and biases) also side by
  side, as "qkv" (concatenated on their output axis; stacked layers keep their leading
  layer axis). A model with qkv_matmul="fused" multiplies by it instead of concatenating
  the three kernels at every call: the sampler's programs fuse once per call, outside
  their decode loop."""
  def walk(tree):
    if not hasattr(tree, "items"):
      return tree
    tree = {name: walk(sub) for name, sub in tree.items()}
    if all(hasattr(tree.get(n), "items") and "kernel" in tree[n] for n in "qkv"):
      parts = [tree[n] for n in "qkv"]
      tree["qkv"] = {"kernel": jnp.concatenate([p["kernel"] for p in parts], axis=-1)}
      if all("bias" in p for p in parts):
        tree["qkv"]["bias"] = jnp.concatenate([p["bias"] for p in parts], axis=-1)
    return tree
  return walk(params)


def unstack_layers(params: Params) -> Params:
  """Scanned params (`layers` with a leading layer axis) -> layers_0, layers_1, ..."""
  out = {k: v for k, v in params.items() if k != "layers"}
  num_layers = jax.tree.leaves(params["layers"])[0].shape[0]
  for i in range(num_layers):
    out[f"layers_{i}"] = jax.tree.map(lambda x, i=i: x[i], params["layers"])
  return out


def stack_layers(params: Params) -> Params:
  """Unrolled params (layers_0, layers_1, ...) -> one `layers` tree with a leading layer axis."""
  names = sorted((k for k in params if re.fullmatch(r"layers_\d+", k)), key=lambda k: int(k[7:]))
  out = {k: v for k, v in params.items() if k not in names}
  out["layers"] = jax.tree.map(lambda *xs: jnp.stack(xs), *(params[k] for k in names))
  return out


def positions_from_mask(mask: jax.Array, start: jax.Array | None = None) -> jax.Array:
  """Position of each real token: start + number of real tokens before it."""
  pos = jnp.cumsum(mask.astype(jnp.int32), axis=1) - 1
  if start is not None:
    pos = pos + start[:, None]
  return jnp.maximum(pos, 0)


class Decoder(nn.Module):
  """Returns final hidden states; `logits` applies the head (LM or score) in float32."""
  cfg: ModelConfig

  def setup(self) -> None:
    cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
    self.embed = nn.Embed(cfg.vocab_size, cfg.hidden_size, dtype=dtype, param_dtype=dtype)
    if cfg.scan_layers:
      self.layers = scanned(DecoderLayer, cfg, n_broadcast=3)(cfg)
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

  def __call__(self, tokens: jax.Array, mask: jax.Array, cache: KVCache | None = None,
               positions: jax.Array | None = None,
               window: int | None = None) -> tuple[jax.Array, KVCache | None]:
    """Runs the stack on tokens [B, T] with mask [B, T] (True = real token).

    With a cache, the new tokens attend to its first `window` slots (static;
    default all S): the call works on `cache.head(window)`, so early turns of a
    dialogue read only the part they can have filled. (The engine's decode loop
    cuts the head once, before the loop.) Tokens written past the window make
    the hidden states NaN, like an overflow.

    Returns (hidden [B, T, E], new cache or None).
    """
    if cache is not None and window is not None and window < cache.size:
      hidden, head = self(tokens, mask, cache.head(window), positions)
      return hidden, cache.with_head(head)
    t = tokens.shape[1]
    mask = mask.astype(bool)
    if cache is not None and t > cache.size:
      raise ValueError(f"{t} new tokens do not fit a KV cache window of {cache.size} slots")
    # Two key segments: the cache's filled slots, all before the new tokens, and
    # the new tokens, causal among themselves. The new tokens go to slots
    # end..end+t-1 <= S, so only the first S - t slots can hold earlier ones; one
    # token reads all S (its own slot is still masked): an S - 1 slice would be
    # copied out of the cache at every decode step.
    reach = None if cache is None else cache.size - (t if t > 1 else 0)
    packed = cache is None and full_attention(self.cfg) != "einsum"
    if not packed:
      masks = (None if cache is None else cache.mask[:, None, :reach],
               mask[:, None, :] & jnp.tril(jnp.ones((t, t), bool))[None],
               None if cache is None else cache.end)
    if cache is None:
      kv = None
      if positions is None:
        positions = positions_from_mask(mask)
      if packed:
        # Fused attention takes lengths, so each row's real tokens move to the front
        # (their positions with them: the same computation) and the hidden states back.
        lengths, ahead, back, one_run = _real_first(mask)
        tokens, positions = (jnp.take_along_axis(a, ahead, 1) for a in (tokens, positions))
        masks = (None, lengths, None)
    else:
      kv = cache.per_layer
      if positions is None:
        positions = positions_from_mask(mask, cache.pos)
    cos, sin = rope.cos_sin(positions, self.inv_freq, self.rope_scale)
    x = self.embed(tokens)
    if cache is None:  # Whole sequences (training, scoring): rows split over the mesh.
      x = sharding.shard_rows(x)
    if self.cfg.scan_layers:
      x, new = self.layers(x, cos, sin, masks, kv)
    else:
      kv = [None] * len(self.layers) if kv is None else kv
      new = [None] * len(self.layers)
      for i, layer in enumerate(self.layers):
        x, new[i] = layer(x, cos, sin, masks, kv[i])
    hidden = self.final_norm(x)
    if packed:
      hidden = jnp.take_along_axis(hidden, back[:, :, None], 1)
      return jnp.where(one_run[:, None, None], hidden, jnp.nan).astype(hidden.dtype), None
    if cache is None:
      return hidden, None
    at = cache.end
    hidden = jnp.where(at + t > cache.size, jnp.nan, hidden).astype(hidden.dtype)  # Overflow.
    # A row's new keys and values are written as NaN unless its hidden states are
    # finite. Besides marking a broken row's cache, this makes the write depend on
    # every layer's read of the cache: XLA cannot otherwise order an unrolled
    # stack's reads before the in-place write, and copies every layer's cache.
    ok = jnp.isfinite(hidden).all(axis=(1, 2))
    new = jax.tree.map(lambda a: jnp.where(ok.reshape((-1,) + (1,) * 3), a, jnp.nan), new)
    return hidden, cache.write(new, at).replace(
        mask=jax.lax.dynamic_update_slice(cache.mask, mask, (0, at)),
        pos=cache.pos + mask.sum(1, dtype=jnp.int32), end=at + t)

  def logits(self, hidden: jax.Array) -> jax.Array:
    """Head outputs in float32: vocabulary logits, or per-token class scores for seq_cls."""
    if self.cfg.task == "seq_cls":
      return self.score(hidden)
    if self.cfg.tie_embeddings:
      # In the compute dtype, as the untied head's Dense is. With the trainer's float32
      # master weights the table and the final norm's output are float32, which made this,
      # the widest matmul, TF32 ones on a GPU (21% of a 1.5B update's kernel time on an H100).
      dtype = self.cfg.dtype
      return layers.f32_out_dot(hidden.astype(dtype), self.embed.embedding.astype(dtype),
                                (((hidden.ndim - 1,), (1,)), ((), ())))
    return self.lm_head(hidden)

  def forward(self, tokens: jax.Array, mask: jax.Array, cache: KVCache | None = None,
              positions: jax.Array | None = None,
              window: int | None = None) -> tuple[jax.Array, KVCache | None]:
    """`__call__` followed by `logits`: (logits [B, T, V or labels], new cache)."""
    hidden, cache = self(tokens, mask, cache, positions, window)
    return self.logits(hidden), cache


def pool_last(values: jax.Array, mask: jax.Array, tokens: jax.Array | None = None,
              pad_id: int | None = None) -> jax.Array:
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

