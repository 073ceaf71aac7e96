"""One GRPO update of the tutor: micro-batched gradients accumulated exactly, then optax.

A batch is a dict of [B, T] arrays over the tutor-side token sequences:
  tokens      int32 token ids (left- or right-padded)
  attn_mask   bool, real tokens
  loss_mask   bool, tutor-generated tokens (Dialogue.tutor_mask)
  advantages  float32, per token (pedrl.rl.advantages.token_advantages)
  old_logp    float32, the sampler's log-probs (same code path: first-pass ratio 1)
  ref_logp    float32, the frozen reference policy's log-probs
"""
import dataclasses
import functools

import jax
import jax.numpy as jnp
import optax

from pedrl.engine.scoring import sequence_logprobs
from pedrl.rl import loss as loss_lib


@dataclasses.dataclass(frozen=True)
class GRPOSettings:
  beta: float = 0.001  # KL coefficient (paper 003 reference; UCO uses 0.01).
  eps_low: float = 0.2  # Clip range.
  eps_high: float | None = None  # None: symmetric.
  aggregation: str = "token_mean"  # or "sequence_mean".
  temperature: float = 1.0  # The tutor's sampling temperature (log-probs of logits / T).
  micro_batch: int = 8  # Rows per gradient computation.


SCHEDULES = ("constant", "cosine", "linear")


def lr_schedule(lr: float, kind: str = "constant", total_updates: int = 1, warmup: int = 0):
  """An optax schedule over optimizer updates: optional linear warmup, then constant,
  cosine or linear decay to 0 by `total_updates`."""
  if kind not in SCHEDULES:
    raise ValueError(f"lr schedule {kind!r} is not one of {SCHEDULES}")
  rest = max(total_updates - warmup, 1)
  main = {"constant": optax.constant_schedule(lr),
          "cosine": optax.cosine_decay_schedule(lr, rest),
          "linear": optax.linear_schedule(lr, 0.0, rest)}[kind]
  if not warmup:
    return main
  return optax.join_schedules([optax.linear_schedule(0.0, lr, warmup), main], [warmup])


def make_optimizer(lr, weight_decay: float = 0.0, max_grad_norm: float = 1.0,
                   b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
  """AdamW after global-norm clipping; `lr` may be an optax schedule."""
  return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                     optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay))


def policy_logprobs(model, params, tokens, attn_mask, temperature: float):
  """log π(token_t | tokens_<t) under logits / T, float32 [B, T] (0 at t = 0)."""
  return sequence_logprobs(model, params, tokens, attn_mask, temperature)


@functools.partial(jax.jit, static_argnums=(0, 3))
def _micro_grads(model, params, batch, settings: GRPOSettings, num_tokens, num_sequences):
  def objective(p):
    logp = policy_logprobs(model, p, batch["tokens"], batch["attn_mask"], settings.temperature)
    total, norm, metrics = loss_lib.grpo_loss_terms(
        logp, batch["old_logp"], batch["ref_logp"], batch["advantages"], batch["loss_mask"],
        settings.beta, settings.eps_low, settings.eps_high, settings.aggregation,
        num_sequences=num_sequences, num_tokens=num_tokens)
    mask = batch["loss_mask"].astype(jnp.float32)
    metrics["old_logp_diff_sum"] = (jnp.abs(logp - batch["old_logp"]) * mask).sum()
    return total / norm, metrics
  return jax.grad(objective, has_aux=True)(params)


def gradients(model, params, batch, settings: GRPOSettings):
  """The mini-batch gradient, accumulated over micro-batches of settings.micro_batch rows;
  equal to one pass over the whole batch. Returns (grads, summed metrics)."""
  rows = batch["tokens"].shape[0]
  num_tokens = jnp.maximum(jnp.asarray(batch["loss_mask"], jnp.float32).sum(), 1.0)
  num_sequences = jnp.float32(rows)
  grads, metrics = None, None
  for lo in range(0, rows, settings.micro_batch):
    part = {k: v[lo:lo + settings.micro_batch] for k, v in batch.items()}
    g, m = _micro_grads(model, params, part, settings, num_tokens, num_sequences)
    grads = g if grads is None else jax.tree.map(jnp.add, grads, g)
    metrics = m if metrics is None else jax.tree.map(jnp.add, metrics, m)
  return grads, metrics


def train_step(model, params, opt_state, optimizer, batch, settings: GRPOSettings):
  """One optimizer step on a mini-batch; returns (params, opt_state, metrics)."""
  grads, m = gradients(model, params, batch, settings)
  updates, opt_state = optimizer.update(grads, opt_state, params)
  params = optax.apply_updates(params, updates)
  tokens = jnp.maximum(m["tokens"], 1.0)
  metrics = {"kl": m["kl_sum"] / tokens, "clip_fraction": m["clipped_sum"] / tokens,
             "ratio": m["ratio_sum"] / tokens, "tutor_tokens": m["tokens"],
             "sampler_logp_diff": m["old_logp_diff_sum"] / tokens,
             "grad_norm": optax.tree.norm(grads)}
  return params, opt_state, jax.device_get(metrics)
