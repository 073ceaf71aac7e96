"""Batched generation on the KV-cache path: one prefill, then a jitted decode loop.

This is the greedy core; temperature / top-k / top-p, stop strings and
multi-turn cache reuse build on the same prefill and step functions.
"""
import functools

import jax
import jax.numpy as jnp

from pedrl.models.decoder import Decoder, init_cache


def next_token_logits(model: Decoder, params, tokens, mask, cache):
  """Runs new tokens through the cache; float32 logits [B, V] at the last slot."""
  hidden, cache = model.apply({"params": params}, tokens, mask, cache)
  logits = model.apply({"params": params}, hidden[:, -1:], method=Decoder.logits)
  return logits[:, 0], cache


@functools.partial(jax.jit, static_argnums=(0, 4))
def _greedy(model, params, tokens, mask, max_new_tokens):
  b, t = tokens.shape
  cache = init_cache(model.cfg, b, t + max_new_tokens)
  logits, cache = next_token_logits(model, params, tokens, mask, cache)
  first = jnp.argmax(logits, axis=-1).astype(jnp.int32)
  out = jnp.zeros((b, max_new_tokens), jnp.int32).at[:, 0].set(first)

  def body(carry):
    i, out, cache, last = carry
    logits, cache = next_token_logits(model, params, last[:, None], jnp.ones((b, 1), bool), cache)
    nxt = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    return i + 1, out.at[:, i].set(nxt), cache, nxt

  _, out, _, _ = jax.lax.while_loop(
      lambda c: c[0] < max_new_tokens, body, (jnp.int32(1), out, cache, first))
  return out


def generate_greedy(model: Decoder, params, tokens, mask, max_new_tokens: int):
  """Greedy continuation [B, max_new_tokens] of left-padded prompts tokens/mask [B, T]."""
  if max_new_tokens <= 0:
    raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
  if tokens.ndim != 2 or tokens.shape[1] == 0:
    raise ValueError(f"prompts must be a non-empty [batch, length] array, got shape {tokens.shape}")
  if not bool(jnp.all(jnp.asarray(mask)[:, -1])):
    raise ValueError("prompts must be left-padded: every row's last token must be real "
                     "(an empty prompt has none)")
  total = tokens.shape[1] + max_new_tokens
  if total > model.cfg.max_position_embeddings:
    raise ValueError(f"prompt ({tokens.shape[1]}) + max_new_tokens ({max_new_tokens}) exceeds "
                     f"the model's context of {model.cfg.max_position_embeddings}")
  return _greedy(model, params, jnp.asarray(tokens), jnp.asarray(mask, bool), max_new_tokens)
