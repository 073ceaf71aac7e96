"""The GRPO objective on tutor tokens: clipped ratio, k3 KL to the reference, aggregation.

All inputs are [B, T] float32 arrays over the tutor-side token sequences; `mask`
is 1 exactly on tutor-generated tokens (Dialogue.tutor_mask), so student
tokens, system prompts and template tokens never contribute. Log-probs are
under softmax(logits / T_sampling), as the sampler reported them.

The loss is returned as (sum, normalizer) so that micro-batches accumulate to
exactly the mini-batch loss: token_mean divides by the mini-batch's tutor
token count (the reference code's choice), sequence_mean by its number of
sequences after averaging within each.
"""
import jax
import jax.numpy as jnp

from pedrl.rl.settings import AGGREGATIONS  # Re-exported: defined there, without JAX.


def k3_kl(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
  """KL(π‖π_ref) per token, k3 estimator: exp(ref − logp) − (ref − logp) − 1 (≥ 0, 0 iff equal)."""
  d = ref_logp - logp
  return jnp.exp(d) - d - 1.0


def clipped_objective(logp: jax.Array, old_logp: jax.Array, advantages: jax.Array,
                      eps_low: float = 0.2,
                      eps_high: float | None = None) -> tuple[jax.Array, jax.Array]:
  """min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)·A), ρ = exp(logp − old_logp) (PPO/GRPO)."""
  ratio = jnp.exp(logp - old_logp)
  eps_high = eps_low if eps_high is None else eps_high
  clipped = jnp.clip(ratio, 1.0 - eps_low, 1.0 + eps_high)
  return jnp.minimum(ratio * advantages, clipped * advantages), ratio


def grpo_loss_terms(logp: jax.Array, old_logp: jax.Array, ref_logp: jax.Array,
                    advantages: jax.Array, mask: jax.Array, beta: float, eps_low: float = 0.2,
                    eps_high: float | None = None, aggregation: str = "token_mean",
                    num_sequences: jax.Array | float | None = None,
                    num_tokens: jax.Array | float | None = None
    ) -> tuple[jax.Array, jax.Array, dict[str, jax.Array]]:
  """(loss sum, normalizer, metrics) for one micro-batch; loss = sum / normalizer.

  num_sequences / num_tokens: the mini-batch totals the micro-batch belongs to
  (default: this batch's own), so that micro-batch sums add up exactly.
  """
  if aggregation not in AGGREGATIONS:
    raise ValueError(f"aggregation {aggregation!r} is not one of {AGGREGATIONS}")
  mask = mask.astype(jnp.float32)
  objective, ratio = clipped_objective(logp, old_logp, advantages, eps_low, eps_high)
  kl = k3_kl(logp, ref_logp)
  per_token = (-objective + beta * kl) * mask
  tokens = mask.sum()
  if aggregation == "token_mean":
    total, norm = per_token.sum(), (tokens if num_tokens is None else num_tokens)
  else:
    per_seq = per_token.sum(1) / jnp.maximum(mask.sum(1), 1.0)
    total = per_seq.sum()
    norm = (mask.shape[0] if num_sequences is None else num_sequences)
  eps_high = eps_low if eps_high is None else eps_high
  # Tokens the clip holds (min picks the clipped term, no gradient): below 1 − ε_low with
  # a negative advantage, above 1 + ε_high with a positive one, as TRL counts them. A
  # ratio outside the range on the other side keeps its unclipped term.
  clipped = (((ratio < 1.0 - eps_low) & (advantages < 0))
             | ((ratio > 1.0 + eps_high) & (advantages > 0))).astype(jnp.float32)
  metrics = {"kl_sum": (kl * mask).sum(), "clipped_sum": (clipped * mask).sum(),
             "ratio_sum": (ratio * mask).sum(), "tokens": tokens}
  return total, norm, metrics
