"""Teacher-forced log-probs: many continuations per context, and whole sequences.

`Scorer.score` answers "how likely is each of these K continuations after this
context?" for N contexts at once (UCO's oracle candidates and scaffold hints,
eqs. 3 and 6). Each context is encoded once into a KV cache, the cache rows
are repeated K times, and every continuation is run on top of its copy, so a
long dialogue is not re-encoded per candidate. Log-probs come from
`distribution.token_logprobs`, the function the sampler reports with.
"""
import dataclasses
import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from pedrl import sharding as sharding_lib
from pedrl.engine import compiler, distribution, sampling, shapes
from pedrl.models.decoder import Decoder, KVCache, Params


@dataclasses.dataclass
class Scores:
  """Per (context, continuation): summed and mean log-prob, token count, per-token values.

  Arrays are [N, K] ([N, K, T] for `tokens`); a continuation with no tokens
  (ragged K, padded) has count 0, sum 0 and mean NaN.
  """
  sum: np.ndarray
  mean: np.ndarray
  count: np.ndarray
  tokens: np.ndarray


@functools.partial(compiler.jit, static_argnums=(0, 7, 8))
def _score_chunk(model, params, ctx, ctx_mask, cont, cont_mask, temperature, copies: int,
                 cache_size: int):
  cache = KVCache.zeros(model.cfg, ctx.shape[0], cache_size)
  last, cache = sampling.next_token_logits(model, params, ctx, ctx_mask, cache)
  rows = jnp.repeat(jnp.arange(ctx.shape[0]), copies)
  cache = cache.take(rows)
  hidden, _ = model.apply({"params": params}, cont, cont_mask, cache)
  first = distribution.token_logprobs(last[rows], cont[:, 0], temperature)  # After the context.
  logits = model.apply({"params": params}, hidden[:, :-1], method=Decoder.logits)
  rest = distribution.token_logprobs(logits, cont[:, 1:], temperature)
  return jnp.where(cont_mask, jnp.concatenate([first[:, None], rest], axis=1), 0.0)


# Peak float32 [rows, T, V] buffers of one chunk (logits, scaled copy, exp), measured
# from the compiled program's temp memory; the chunking budgets for them.
_LOGITS_COPIES = 4


class Scorer:
  """Scores continuations under one decoder, chunked to bound the logits' memory.

  Args:
    model: the Decoder module.
    mesh: shard rows over (data, fsdp); None: one device.
    max_logits_bytes: memory for one pass's float32 logits buffers (about four
      [rows, T, V] arrays); contexts, and if need be continuations, are split to fit.
  """

  def __init__(self, model: Decoder, mesh=None, length_buckets=shapes.LENGTH_BUCKETS,
               max_logits_bytes: int = 1 << 30) -> None:
    self.model, self.cfg, self.mesh = model, model.cfg, mesh
    self.buckets, self.max_logits_bytes = tuple(length_buckets), max_logits_bytes
    self.pad_id = self.cfg.pad_token_id or 0

  def _rows(self, x):
    return sharding_lib.put_rows(x, self.mesh)

  def score(self, params: Params, contexts: Sequence[Sequence[int]],
            continuations: Sequence[Sequence[int]], temperature: float = 1.0) -> Scores:
    """log p(continuation | context) for every continuation of every context.

    Args:
      params: the model's params.
      contexts: N token-id lists (each non-empty).
      continuations: N lists of token-id lists (K_i per context; ragged K is padded).
      temperature: log-probs of softmax(logits / temperature), as the sampler reports.
    """
    n = len(contexts)
    if n == 0 or len(continuations) != n:
      raise ValueError(f"need one list of continuations per context: got {n} contexts and "
                       f"{len(continuations)} continuation lists")
    if any(len(c) == 0 for c in contexts):
      raise ValueError("empty context: the first continuation token needs something to follow")
    if not temperature > 0:
      raise ValueError(f"temperature must be > 0, got {temperature}")
    k = max(1, max(len(c) for c in continuations))
    longest_ctx = max(len(c) for c in contexts)
    longest_cont = max((len(x) for c in continuations for x in c), default=0)
    if longest_ctx + longest_cont > self.cfg.max_position_embeddings:
      raise ValueError(f"a context of {longest_ctx} + a continuation of {longest_cont} tokens "
                       f"exceed the model's context of {self.cfg.max_position_embeddings}")
    tc = shapes.bucket(longest_ctx, self.buckets)
    tk = shapes.bucket(max(1, longest_cont), self.buckets)
    # Rows (context copies) per pass within the logits budget: all K continuations
    # of as many contexts as fit, or K split into parts when one context is too many.
    rows = max(1, self.max_logits_bytes // (tk * self.cfg.vocab_size * 4 * _LOGITS_COPIES))
    kc = min(k, rows)
    cc = max(1, rows // kc)

    ctx, ctx_mask = shapes.left_padded(contexts, n, tc, self.pad_id)
    kp = -(-k // kc) * kc
    cont = np.full((n, kp, tk), self.pad_id, np.int32)
    cont_mask = np.zeros((n, kp, tk), bool)
    for i in range(n):
      for j, x in enumerate(continuations[i]):
        cont[i, j, :len(x)], cont_mask[i, j, :len(x)] = x, True
    for a in (ctx, cont):
      if a.min() < 0 or a.max() >= self.cfg.vocab_size:
        raise ValueError(f"token ids outside [0, {self.cfg.vocab_size})")

    shards = sharding_lib.batch_shards(self.mesh)
    out = np.zeros((n, kp, tk), np.float32)
    for start in range(0, n, cc):
      stop = min(n, start + cc)
      # Pad the pass to a power of two of contexts (few compiled shapes) and to the
      # mesh; filler rows repeat the last context.
      size = min(cc, 1 << (stop - start - 1).bit_length())
      size = -(-size // shards) * shards
      sel = np.arange(start, start + size).clip(max=n - 1)
      ctx_rows, ctx_rows_mask = self._rows(ctx[sel]), self._rows(ctx_mask[sel])
      for j in range(0, kp, kc):
        lp = _score_chunk(
            self.model, params, ctx_rows, ctx_rows_mask,
            self._rows(cont[sel, j:j + kc].reshape(size * kc, tk)),
            self._rows(cont_mask[sel, j:j + kc].reshape(size * kc, tk)),
            jnp.float32(temperature), kc, tc + tk)
        out[start:stop, j:j + kc] = sharding_lib.to_host(lp).reshape(size, kc, tk)[:stop - start]
    out, cont_mask = out[:, :k], cont_mask[:, :k]
    count = cont_mask.sum(-1)
    total = out.sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
      mean = np.where(count > 0, total / count, np.nan)
    return Scores(sum=total, mean=mean, count=count, tokens=out)


def sequence_logprobs(model: Decoder, params: Params, tokens: jax.Array, mask: jax.Array,
                      temperature: float = 1.0) -> jax.Array:
  """log p(tokens[:, t] | tokens[:, :t]) for t >= 1 ([B, T], 0 at t=0 and padding).

  Full-sequence teacher forcing (GRPO's old/reference log-probs), through the
  same `token_logprobs` the sampler uses; the head in chunks of positions when the
  model's `logits_chunk` is shorter than the sequence (`head_logprobs`).
  """
  chunk = model.cfg.logits_chunk
  if 0 < chunk < tokens.shape[1] - 1:
    hidden, _ = model.apply({"params": params}, tokens, mask)
    lp = head_logprobs(model, params, hidden[:, :-1], tokens[:, 1:], temperature, chunk)
  else:
    logits, _ = model.apply({"params": params}, tokens, mask, method=Decoder.forward)
    lp = distribution.token_logprobs(logits[:, :-1], tokens[:, 1:], temperature)
  lp = jnp.where(mask[:, 1:] & mask[:, :-1], lp, 0.0)
  return jnp.pad(lp, ((0, 0), (1, 0)))


def head_logprobs(model: Decoder, params: Params, hidden: jax.Array, targets: jax.Array,
                  temperature: float, chunk: int) -> jax.Array:
  """log softmax(head(hidden) / temperature) at `targets` ([B, T, E], [B, T] -> [B, T]),
  `chunk` positions at a time.

  A whole sequence's float32 logits are the largest buffers of a training step (three
  [T, V] copies per row with their softmax and gradient: 1.9 GB a row at 1024 tokens
  and Qwen2.5's 152k vocabulary). Here a loop computes one chunk's at a time, and
  `jax.checkpoint` makes the backward pass recompute them from the kept hidden states
  (one more head matmul per token) instead of keeping every chunk's.
  """
  b, t, e = hidden.shape
  n = -(-t // chunk)
  pad = n * chunk - t  # Padded positions score token 0 of zero states; cut below.
  h = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0))).reshape(b, n, chunk, e).swapaxes(0, 1)
  y = jnp.pad(targets, ((0, 0), (0, pad))).reshape(b, n, chunk).swapaxes(0, 1)

  @jax.checkpoint
  def one(h, y):
    logits = model.apply({"params": params}, h, method=Decoder.logits)
    return distribution.token_logprobs(logits, y, temperature)
  lp = jax.lax.map(lambda hy: one(*hy), (h, y))  # [n, B, chunk]
  return lp.swapaxes(0, 1).reshape(b, n * chunk)[:, :t]


@functools.partial(compiler.jit, static_argnums=(0, 4))
def _with_alternatives(model, params, tokens, mask, k: int):
  logits, _ = model.apply({"params": params}, tokens, mask, method=Decoder.forward)
  # One log-softmax for both: a token's log-prob must equal its own entry among the top k
  # bit for bit, since clients test greediness by equality (lm-evaluation-harness compares
  # it with the top entry); two formulas round apart in the last bit.
  logprobs = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32), axis=-1)
  picked = jnp.take_along_axis(logprobs, tokens[:, 1:, None].astype(jnp.int32), axis=-1)[..., 0]
  top, ids = jax.lax.top_k(logprobs, k)
  return picked, top, ids


@dataclasses.dataclass
class Alternatives:
  """A row's tokens 1..T-1: each one's log-prob and the k likeliest tokens at its place."""
  logprobs: np.ndarray  # [T-1]
  top_logprobs: np.ndarray  # [T-1, k]
  top_ids: np.ndarray  # [T-1, k]


def token_alternatives(model: Decoder, params: Params, rows: Sequence[Sequence[int]], k: int = 5,
                       buckets: Sequence[int] = shapes.LENGTH_BUCKETS,
                       max_logits_bytes: int = 1 << 30,
                       rows_per_call: int | None = None) -> list[Alternatives]:
  """Per row of token ids: each token's log-prob under the model (temperature 1) and the
  k most likely tokens at its place with theirs, for t >= 1 (what the OpenAI API's
  `logprobs` reports).
  Rows are bucketed by length and run a few at a time, so the float32 logits stay
  within `max_logits_bytes`; with `rows_per_call` every call has exactly that many
  rows (filler rows repeat the first), so a server compiles one program per bucket."""
  out = [None] * len(rows)
  order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
  while order:
    width = shapes.bucket(len(rows[order[-1]]), buckets)
    per_call = rows_per_call or max(1, max_logits_bytes // (3 * 4 * width * model.cfg.vocab_size))
    take, order = order[-per_call:], order[:-per_call]
    size = rows_per_call or len(take)
    tokens = np.zeros((size, width), np.int32)
    mask = np.zeros((size, width), bool)
    for j, i in enumerate(take + take[:1] * (size - len(take))):
      tokens[j, :len(rows[i])], mask[j, :len(rows[i])] = rows[i], True
    picked, top, ids = (np.asarray(x) for x in _with_alternatives(
        model, params, jnp.asarray(tokens), jnp.asarray(mask), k))
    for j, i in enumerate(take):
      n = len(rows[i]) - 1
      out[i] = Alternatives(picked[j, :n], top[j, :n], ids[j, :n])
  return out
