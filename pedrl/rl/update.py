"""One update of the tutor: micro-batched gradients accumulated exactly, then optax.

The update is the same compiled program for every objective (pedrl.rl.objective:
GRPO here, SFT in pedrl.rl.sft, DPO in pedrl.rl.dpo); `GRPOObjective` is GRPO's,
reading a `pedrl.rl.batch.TrainBatch` ([B, T] arrays over the tutor-side token
sequences, left- or right-padded).
"""
import dataclasses
import functools
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax import struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from pedrl import sharding as sharding_lib
from pedrl.engine.scoring import sequence_logprobs
from pedrl.rl import batch as batch_lib, loss as loss_lib, objective as objective_lib
# Re-exported: defined there, importable without JAX.
from pedrl.rl.settings import GRPOSettings, SCHEDULES, OptimizerSettings


T = TypeVar("T")


def policy_logprobs(model: nn.Module, params: objective_lib.Params, tokens: jax.Array | np.ndarray,
                    attn_mask: jax.Array | np.ndarray, temperature: float) -> jax.Array:
  """log π(token_t | tokens_<t) under logits / T, float32 [B, T] (0 at t = 0)."""
  return sequence_logprobs(model, params, tokens, attn_mask, temperature)


@struct.dataclass
class GRPOMetrics:
  """GRPO's metrics of one update; kl, clip_fraction, ratio and sampler_logp_diff are
  means over the mini-batch's tutor tokens."""
  loss: jax.Array
  kl: jax.Array
  clip_fraction: jax.Array
  ratio: jax.Array
  tutor_tokens: jax.Array
  # |old − current| log-prob: with the sampler's old log-probs (rl.old_logprobs=sampler),
  # its gap to the trainer's on a first pass (rounding).
  sampler_logp_diff: jax.Array

  def guarded(self) -> dict[str, jax.Array]:
    return {"loss": self.loss, "kl": self.kl}  # A non-finite KL (log-probs far apart) too.

  def to_row(self) -> dict[str, float]:
    return objective_lib.fields_row(self)


@dataclasses.dataclass(frozen=True)
class GRPOObjective:
  """GRPO's objective (pedrl.rl.objective) on a TrainBatch: pedrl.rl.loss's clipped
  ratio and k3 KL on the tutor's tokens, its log-probs of logits / `temperature`: the
  tutor's sampling temperature (SamplingParams.logprob_temperature), so that they are
  the sampler's distribution and a first pass has ratio 1."""
  settings: GRPOSettings
  temperature: float

  @property
  def micro_batch(self) -> int:
    return self.settings.micro_batch

  def totals(self, batch: batch_lib.TrainBatch) -> tuple:
    """The mini-batch's tutor-token count and row count: every micro-batch's normalizer."""
    return (np.float32(max(np.asarray(batch.loss_mask).sum(), 1)), np.float32(batch.rows))

  def loss(self, model: nn.Module, params: objective_lib.Params, part: batch_lib.TrainBatch,
           totals: tuple) -> tuple[jax.Array, dict[str, jax.Array]]:
    num_tokens, num_sequences = totals
    logp = policy_logprobs(model, params, part.tokens, part.attn_mask, self.temperature)
    s = self.settings
    total, norm, sums = loss_lib.grpo_loss_terms(
        logp, part.old_logp, part.ref_logp, part.advantages, part.loss_mask,
        s.beta, s.eps_low, s.eps_high, s.aggregation,
        num_sequences=num_sequences, num_tokens=num_tokens)
    mask = part.loss_mask.astype(jnp.float32)
    sums["old_logp_diff_sum"] = (jnp.abs(logp - part.old_logp) * mask).sum()
    return total / norm, sums

  def metrics(self, sums: dict) -> GRPOMetrics:
    tokens = jnp.maximum(sums["tokens"], 1.0)
    return GRPOMetrics(loss=sums["loss"], kl=sums["kl_sum"] / tokens,
                       clip_fraction=sums["clipped_sum"] / tokens,
                       ratio=sums["ratio_sum"] / tokens, tutor_tokens=sums["tokens"],
                       sampler_logp_diff=sums["old_logp_diff_sum"] / tokens)


@struct.dataclass
class UpdateMetrics:
  """What one optimizer step reports (`train_step`): the objective's metrics, the
  gradient's norm, whether the update was skipped (a non-finite loss, guarded metric or
  gradient: params and optimizer state unchanged) and whether the params are finite."""
  objective: objective_lib.LossStats
  grad_norm: jax.Array
  skipped: jax.Array  # bool
  params_finite: jax.Array  # bool

  def guarded(self) -> dict[str, float]:
    """The values that decide a skip, by name: the objective's guarded metrics, the
    gradient norm."""
    return {**{k: float(v) for k, v in self.objective.guarded().items()},
            "grad_norm": float(self.grad_norm)}

  def to_row(self) -> dict[str, float]:
    return {**self.objective.to_row(), "grad_norm": float(self.grad_norm)}


def lr_schedule(lr: float, kind: str = "constant", total_updates: int = 1,
                warmup: int = 0) -> optax.Schedule:
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


def make_optimizer(lr: float | optax.Schedule, weight_decay: float = 0.0,
                   max_grad_norm: float = 1.0, b1: float = 0.9, b2: float = 0.999,
                   eps: float = 1e-8) -> optax.GradientTransformation:
  """AdamW after global-norm clipping; `lr` may be an optax schedule."""
  return optax.chain(optax.clip_by_global_norm(max_grad_norm),
                     optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay))


def _micro_shape(rows: int, micro_batch: int, mesh) -> tuple:
  """(n, m): n micro-batches of m rows, m rounded up to the mesh's batch shards."""
  shards = sharding_lib.batch_shards(mesh)
  m = -(-min(micro_batch, rows) // shards) * shards
  return -(-rows // m), m


def split_rows(tree: T, n: int, m: int, mesh: Mesh | None = None) -> T:
  """[n·m, ...] host arrays → [n, m, ...] device arrays, each micro-batch's rows split
  over the mesh's batch axes."""
  def one(v):
    v = np.asarray(v).reshape(n, m, *np.shape(v)[1:])
    return (sharding_lib.on_device(v) if mesh is None else sharding_lib.put(
        v, NamedSharding(mesh, P(None, sharding_lib.BATCH, *(None,) * (v.ndim - 2)))))
  return jax.tree.map(one, tree)


def micro_batches(batch: objective_lib.Batch, micro_batch: int,
                  mesh: Mesh | None = None) -> objective_lib.Batch:
  """The batch as [n, m, ...] device arrays; the last micro-batch is filled with rows that
  carry no loss (the batch's `padded`)."""
  n, m = _micro_shape(batch.rows, micro_batch, mesh)
  return split_rows(batch.padded(n * m), n, m, mesh)


def _accumulated_grads(model, params, micro, objective, totals):
  """Sum over micro-batches (a scan: one compiled body) of the gradient of each one's
  share of the mini-batch loss, and of the metric sums."""
  loss = lambda p, part: objective.loss(model, p, part, totals)

  def body(carry, part):
    (value, m), g = jax.value_and_grad(loss, has_aux=True)(params, part)
    m["loss"] = value  # This micro-batch's share: the shares add up to the mini-batch loss.
    return jax.tree.map(jnp.add, carry, (g, m)), None

  _, sums = jax.eval_shape(loss, params, jax.tree.map(lambda x: x[0], micro))
  zeros = (jax.tree.map(jnp.zeros_like, params),
           {k: jnp.float32(0) for k in ("loss", *sums)})
  return jax.lax.scan(body, zeros, micro)[0]


def _totals(objective, batch) -> tuple:
  return tuple(np.float32(x) for x in objective.totals(batch))


@functools.partial(jax.jit, static_argnums=(0, 3))
def _gradients(model, params, micro, objective, totals):
  return _accumulated_grads(model, params, micro, objective, totals)


def gradients(model: nn.Module, params: objective_lib.Params, batch: objective_lib.Batch,
              objective: objective_lib.Objective,
              mesh: Mesh | None = None) -> tuple[objective_lib.Params, dict[str, jax.Array]]:
  """The mini-batch gradient, accumulated over micro-batches of objective.micro_batch
  rows; equal to one pass over the whole batch. Returns (grads, summed metrics)."""
  with sharding_lib.context(mesh):
    return _gradients(model, params, micro_batches(batch, objective.micro_batch, mesh),
                      objective, _totals(objective, batch))


def state_shardings(optimizer: optax.GradientTransformation, params: objective_lib.Params) -> Any:
  """Where each optimizer-state leaf lives: a moment like the param whose path it ends
  with, counters and other leaves replicated over the params' mesh (or their device)."""
  by_path = {tuple(map(str, p)): (x.shape, x.sharding)
             for p, x in jax.tree_util.tree_leaves_with_path(params)}
  first = jax.tree.leaves(params)[0].sharding
  rest = NamedSharding(first.mesh, P()) if isinstance(first, NamedSharding) else first

  def one(path, leaf):
    path = tuple(map(str, path))
    for i in range(len(path)):
      shape, sharding = by_path.get(path[i:], (None, None))
      if shape == leaf.shape:
        return sharding
    return rest
  return jax.tree_util.tree_map_with_path(one, jax.eval_shape(optimizer.init, params))


def init_optimizer(optimizer: optax.GradientTransformation,
                   params: objective_lib.Params) -> objective_lib.OptState:
  """optimizer.init(params), every leaf placed as train_step keeps it (`state_shardings`),
  so a checkpoint restored into this template feeds the compiled step as it is."""
  return jax.jit(optimizer.init, out_shardings=state_shardings(optimizer, params))(params)


def all_finite(tree: T) -> jax.Array:
  """True iff every floating-point value in `tree` is finite (one fused reduction)."""
  leaves = [jnp.isfinite(x).all() for x in jax.tree.leaves(tree)
            if jnp.issubdtype(x.dtype, jnp.inexact)]
  return jnp.stack(leaves).all() if leaves else jnp.bool_(True)


def _step(model, optimizer, objective, params, opt_state, micro, totals):
  grads, sums = _accumulated_grads(model, params, micro, objective, totals)
  metrics = objective.metrics(sums)
  grad_norm = optax.tree.norm(grads)
  # A non-finite loss, guarded metric or gradient skips the update: params and optimizer
  # state stay as they were. Deciding on these scalars (not on the updated weights) costs
  # no second copy of the state; with finite gradients, clipping, a finite lr and
  # adam_eps > 0 (checked in the config) AdamW cannot produce a non-finite value, and
  # `params_finite` reports if it did.
  ok = all_finite((metrics.guarded(), grad_norm))

  def update(state):
    p, s = state
    updates, s = optimizer.update(grads, s, p)
    return optax.apply_updates(p, updates), s

  params, opt_state = jax.lax.cond(ok, update, lambda state: state, (params, opt_state))
  return params, opt_state, UpdateMetrics(metrics, grad_norm, ~ok, all_finite(params))


def _layout(tree) -> tuple:
  """(sharding leaves, treedef) of a pytree of arrays: hashable, a compile-cache key."""
  leaves, treedef = jax.tree.flatten(jax.tree.map(lambda a: a.sharding, tree))
  return tuple(leaves), treedef


@functools.lru_cache(maxsize=8)
def _compiled_step(model, optimizer, objective, layout):
  """_step jitted with params and optimizer state donated and returned in their input
  layout (so the buffers are reused and the sampler's programs see the same shardings)."""
  param_leaves, param_def, state_leaves, state_def = layout
  out = (jax.tree.unflatten(param_def, param_leaves), jax.tree.unflatten(state_def, state_leaves),
         None)
  return jax.jit(functools.partial(_step, model, optimizer, objective), donate_argnums=(0, 1),
                 out_shardings=out)


def _step_call(model, params, opt_state, optimizer, batch, objective, mesh):
  """(the jitted step, its arguments) for one mini-batch of host arrays."""
  micro = micro_batches(batch, objective.micro_batch, mesh)
  step = _compiled_step(model, optimizer, objective, _layout(params) + _layout(opt_state))
  return step, (params, opt_state, micro, _totals(objective, batch))


def train_step(model: nn.Module, params: objective_lib.Params, opt_state: objective_lib.OptState,
               optimizer: optax.GradientTransformation, batch: objective_lib.Batch,
               objective: objective_lib.Objective,
               mesh: Mesh | None = None
    ) -> tuple[objective_lib.Params, objective_lib.OptState, UpdateMetrics]:
  """One optimizer step of `objective` (pedrl.rl.objective; GRPOObjective is GRPO's) on a
  mini-batch of host arrays, as one compiled program (micro-batch gradients,
  accumulation, clipping, AdamW). `opt_state` comes from `init_optimizer` (placed like
  the params); both are donated: their buffers become the new ones. Returns (params,
  opt_state, UpdateMetrics of host values)."""
  step, args = _step_call(model, params, opt_state, optimizer, batch, objective, mesh)
  with sharding_lib.context(mesh):
    params, opt_state, metrics = step(*args)
  return params, opt_state, sharding_lib.to_host(metrics)


def train_step_program(model: nn.Module, params: objective_lib.Params,
                       opt_state: objective_lib.OptState, optimizer: optax.GradientTransformation,
                       batch: objective_lib.Batch, objective: objective_lib.Objective,
                       mesh: Mesh | None = None) -> jax.stages.Compiled:
  """The program `train_step` runs for these arguments, for XLA's memory and cost
  analyses (from the compilation caches once train_step has run it)."""
  step, args = _step_call(model, params, opt_state, optimizer, batch, objective, mesh)
  with sharding_lib.context(mesh):
    return step.lower(*args).compile()


@functools.partial(jax.jit, static_argnums=(0, 4))
def _chunked_logprobs(model, params, tokens, attn_mask, temperature):
  return jax.lax.map(lambda ta: policy_logprobs(model, params, *ta, temperature),
                     (tokens, attn_mask))


def _chunked(tokens, attn_mask, chunk: int, mesh):
  """[B, T] host arrays as [n, chunk, T] device arrays (rows filled with copies of row 0)."""
  rows = tokens.shape[0]
  n, m = _micro_shape(rows, chunk, mesh)
  fill = batch_lib.fill_rows(rows, n * m)
  return split_rows((tokens[fill], attn_mask[fill]), n, m, mesh)


def logprobs_in_chunks(model: nn.Module, params: objective_lib.Params,
                       tokens: jax.Array | np.ndarray, attn_mask: jax.Array | np.ndarray,
                       temperature: float, chunk: int, mesh: Mesh | None = None) -> np.ndarray:
  """policy_logprobs of [B, T] host arrays, `chunk` rows at a time (one pass over all
  would hold [B, T, vocab] float32 logits), each chunk's rows split over the mesh."""
  rows = tokens.shape[0]
  with sharding_lib.context(mesh):
    lp = _chunked_logprobs(model, params, *_chunked(tokens, attn_mask, chunk, mesh),
                           temperature)
  return sharding_lib.to_host(lp).reshape(-1, tokens.shape[1])[:rows]


def logprobs_program(model: nn.Module, params: objective_lib.Params, tokens: jax.Array | np.ndarray,
                     attn_mask: jax.Array | np.ndarray, temperature: float, chunk: int,
                     mesh: Mesh | None = None) -> jax.stages.Compiled:
  """The program `logprobs_in_chunks` runs for these arguments (see train_step_program)."""
  with sharding_lib.context(mesh):
    return _chunked_logprobs.lower(model, params, *_chunked(tokens, attn_mask, chunk, mesh),
                                   temperature).compile()
