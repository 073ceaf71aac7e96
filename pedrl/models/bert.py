"""BERT and XLM-RoBERTa encoders for sentence embeddings (BGE-*-en-v1.5, MiniLM, BGE-M3).

Post-LayerNorm blocks, absolute position embeddings, bidirectional attention.
Positions are counted over real tokens (the attention mask). For BERT that
equals transformers' arange on the right-padded batches its tokenizers produce.
XLM-R numbers real tokens from pad_token_id + 1 and puts padding at
pad_token_id; transformers finds the real tokens by `input_ids != pad_token_id`
rather than by the mask, which agrees whenever padding holds the pad id and
text never does (as its tokenizer guarantees).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from pedrl.models import layers
from pedrl.models.config import ModelConfig
from pedrl.models.decoder import positions_from_mask, scanned

ACTIVATIONS = {
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_new": lambda x: jax.nn.gelu(x, approximate=True),
    "gelu_pytorch_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "relu": jax.nn.relu,
}
POOLING = ("cls", "mean")


class BertLayer(nn.Module):
  cfg: ModelConfig

  @nn.compact
  def __call__(self, x: jax.Array, mask: jax.Array, _: None) -> tuple[jax.Array, None]:
    cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
    b, t, e = x.shape
    h, d = cfg.num_heads, cfg.head_dim
    ln = lambda name: nn.LayerNorm(cfg.norm_eps, dtype=dtype, param_dtype=dtype, name=name)
    q, k, v = (layers.dense(h * d, True, dtype, n)(x).reshape(b, t, h, d) for n in "qkv")
    attn = layers.dot_attention(q, [(k.transpose(0, 2, 3, 1), v.swapaxes(1, 2), mask)])
    attn = attn.reshape(b, t, h * d)
    x = ln("attn_norm")(x + layers.dense(e, True, dtype, "o")(attn))
    up = ACTIVATIONS[cfg.hidden_act](layers.dense(cfg.intermediate_size, True, dtype, "up")(x))
    x = ln("mlp_norm")(x + layers.dense(e, True, dtype, "down")(up))
    return x, None


class Bert(nn.Module):
  """Returns the last hidden states [B, T, E]; see `embed` for pooled vectors."""
  cfg: ModelConfig

  @nn.compact
  def __call__(self, tokens: jax.Array, mask: jax.Array,
               token_types: jax.Array | None = None) -> tuple[jax.Array, None]:
    cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
    if cfg.hidden_act not in ACTIVATIONS:
      raise ValueError(f"BERT hidden_act {cfg.hidden_act!r} is not one of {sorted(ACTIVATIONS)}")
    if tokens.shape[1] > cfg.max_tokens:
      offset = (f" (max_position_embeddings={cfg.max_position_embeddings} less the offset "
                f"{cfg.position_offset})" if cfg.position_offset else "")
      raise ValueError(f"{tokens.shape[1]} tokens exceed the encoder's {cfg.max_tokens} "
                       f"positions{offset}; truncate the input")
    mask = mask.astype(bool)
    if token_types is None:  # XLM-R has one token type; BERT's single segment is type 0.
      token_types = jnp.zeros_like(tokens)
    if cfg.position_offset:
      pos = jnp.cumsum(mask, 1, dtype=jnp.int32) * mask + cfg.position_offset - 1
    else:
      pos = positions_from_mask(mask)
    emb = lambda n, name: nn.Embed(n, cfg.hidden_size, dtype=dtype, param_dtype=dtype, name=name)
    x = (emb(cfg.vocab_size, "word")(tokens)
         + emb(cfg.max_position_embeddings, "position")(pos)
         + emb(cfg.type_vocab_size, "token_type")(token_types))
    x = nn.LayerNorm(cfg.norm_eps, dtype=dtype, param_dtype=dtype, name="embed_norm")(x)
    attn_mask = jnp.broadcast_to(mask[:, None, :], (mask.shape[0], mask.shape[1], mask.shape[1]))
    x, _ = scanned(BertLayer, cfg, n_broadcast=1)(cfg, name="layers")(x, attn_mask, None)
    return x


def pool(hidden: jax.Array, mask: jax.Array, mode: str = "cls") -> jax.Array:
  """Sentence vectors [B, E], L2-normalised: the CLS token (BGE) or the masked mean (MiniLM)."""
  hidden = hidden.astype(jnp.float32)
  if mode == "cls":
    vec = hidden[:, 0]
  elif mode == "mean":
    m = mask.astype(jnp.float32)[..., None]
    vec = (hidden * m).sum(1) / jnp.maximum(m.sum(1), 1e-9)
  else:
    raise ValueError(f"pooling {mode!r} is not one of {POOLING}")
  return vec / jnp.maximum(jnp.linalg.norm(vec, axis=-1, keepdims=True), 1e-12)
