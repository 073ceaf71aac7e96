"""Batched sampling on a static KV cache: extend (prefill) then a jitted decode loop.

One jitted program per (batch, new-token bucket, cache size, SamplingParams):
it appends the new tokens of every row to the cache (a fresh prompt, or the
next turn of a dialogue on top of earlier turns), then decodes inside a
`lax.while_loop` until every row has stopped or `max_new_tokens` is reached.
The cache is donated, so XLA updates it in place.

Windows. A call can reach only the cache's first end + T + max_new_tokens slots
(bucketed): it cuts that window out once, runs its prefill and decode loop on
it and writes it back, so a step costs what the window holds. A dialogue's
cache need not be allocated for the whole conversation: `make_room` grows it
(doubling, up to a limit) when a turn needs more. On a fresh cache,
an opening all rows share (`Sampler.share_prefix` tokens or more) is computed
once on one row and copied to the others before the rest is appended.

Row lifetime. Each decode step draws one token per row, records it and its
log-prob, and feeds it back with mask = "the row was still running". A row's
stop token is therefore written to the cache (the next turn follows it), and
every step after it is a masked, invisible slot. The returned cache holds
exactly each row's prompt and generated tokens, ready for the next `extend`.

Text. `Generation.texts` decodes each row's tokens up to, not including, its
stop: a stop token id is dropped, and the text is cut where the first stop
string begins (the token ids keep everything sampled, stop included, because
the model was trained to emit them). `stop_reasons` says which stop ended the
row: the string, or the token as text.
"""
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from pedrl import sharding as sharding_lib, tokenizer as tokenizer_lib
from pedrl.engine import compiler, distribution, kv_cache, stops
from pedrl.engine.distribution import SamplingParams
from pedrl.engine.shapes import (CHUNK_BUCKETS, LENGTH_BUCKETS, bucket, bucket_below,
                                 left_padded)
from pedrl.models.decoder import Decoder, KVCache, Params, with_fused_qkv
from pedrl.streams import sequence_keys


T = TypeVar("T")


def next_token_logits(model: Decoder, params: Params, tokens: jax.Array, mask: jax.Array,
                      cache: KVCache) -> tuple[jax.Array, KVCache]:
  """Runs new tokens through the cache; float32 logits [B, V] at the last slot.

  Under a mesh (`Sampler` traces inside its mesh's `sharding.context`) the logits are
  gathered whole next to their rows: the head splits the vocabulary over `tensor`, and
  sampling from split logits (top-k, the draw, its log-prob) made XLA's partitioner
  all-reduce several times a step, where the gather is one collective."""
  hidden, cache = model.apply({"params": params}, tokens, mask, cache)
  logits = model.apply({"params": params}, hidden[:, -1:], method=Decoder.logits)
  return sharding_lib.shard_rows(logits[:, 0]), cache


def _prepared(model: Decoder, params):
  """The params a sampling program multiplies by: with ModelConfig.qkv_matmul="fused",
  q, k and v side by side once per call (decoder.with_fused_qkv), not at every step."""
  return with_fused_qkv(params) if model.cfg.qkv_matmul == "fused" else params


@functools.partial(compiler.jit, static_argnums=(0, 5), donate_argnums=(2,))
def _extend(model, params, cache, tokens, mask, window):
  params = _prepared(model, params)
  _, cache = model.apply({"params": params}, tokens, mask, cache, window=window)
  return cache


@functools.partial(compiler.jit, static_argnums=(0, 5), donate_argnums=(2,))
def _extend_shared(model, params, cache, tokens, mask, window):
  """Runs one row of tokens [1, T] on a fresh cache's first row and copies the
  result to every row: an opening all rows share is computed once."""
  one = cache.head(window).take(jnp.zeros((1,), jnp.int32))
  _, one = model.apply({"params": params}, tokens, mask, one)
  return cache.with_head(one.take(jnp.zeros((cache.batch,), jnp.int32)))


@struct.dataclass
class DecodeState:
  """The decode loop's carry: step i, the cache, the logits [B, V] of each row's
  next token, its stop-string matcher state, and what was sampled so far."""
  i: jax.Array
  cache: KVCache
  logits: jax.Array
  match: jax.Array  # [B] state of stops.compile_stop_strings' table.
  tokens: jax.Array  # [B, N], pad after a row's end.
  logprobs: jax.Array  # [B, N], 0 after a row's end.
  length: jax.Array  # [B] sampled tokens, stop included.
  stopped: jax.Array  # [B] a stop ended the row.
  done: jax.Array  # [B] stopped, hit max_new_tokens, or batch filler.


@struct.dataclass
class Decoded:
  """What the decode loop returns, on the devices (`Generation` is the host's copy)."""
  tokens: jax.Array
  logprobs: jax.Array
  length: jax.Array
  stopped: jax.Array


def _decode(model, params, s: DecodeState, keys, stop_table, sp: SamplingParams, rows_sampling,
            shrink_at: int) -> DecodeState:
  """Samples until every row is done, or until at most `shrink_at` rows are live (0:
  never), so the caller can go on with those rows in a smaller batch."""
  n = sp.max_new_tokens
  stop_ids = jnp.asarray(sp.stop_token_ids or (-1,), jnp.int32)
  pad = model.cfg.pad_token_id or 0

  def step(s: DecodeState) -> DecodeState:
    i, live = s.i, ~s.done
    step_keys = jax.vmap(jax.random.fold_in, (0, None))(keys, i)
    tok = (distribution.sample(s.logits, step_keys, sp) if rows_sampling is None else
           distribution.sample_rows(s.logits, step_keys, rows_sampling))
    lp = distribution.token_logprobs(s.logits, tok, sp.logprob_temperature)
    hit = jnp.isin(tok, stop_ids)
    match = s.match
    if stop_table is not None:
      packed = stop_table[match, tok].astype(jnp.int32)
      hit, match = hit | (packed % 2 == 1), packed // 2
    stopped = live & hit
    logits, cache = next_token_logits(model, params, tok[:, None], live[:, None], s.cache)
    return s.replace(
        i=i + 1, cache=cache, logits=logits, match=match,
        tokens=s.tokens.at[:, i].set(jnp.where(live, tok, pad)),
        logprobs=s.logprobs.at[:, i].set(jnp.where(live, lp, 0.0)),
        length=s.length + live, stopped=s.stopped | stopped,
        done=s.done | stopped | (i + 1 >= n))

  def going(s):
    live = jnp.sum(~s.done)
    return (live > 0) & (live > shrink_at)
  return jax.lax.while_loop(going, step, s)


@functools.partial(compiler.jit, static_argnums=(0, 8, 9, 11), donate_argnums=(2,))
def _generate(model, params, cache, tokens, mask, real, keys, stop_table, sp: SamplingParams,
              window, rows_sampling=None, shrink_at: int = 0):
  """Extends the cache by tokens/mask, then decodes; rows with real=False (batch
  filler) start done, so they never keep the loop running. The whole call works
  on the cache's first `window` slots (all it can reach), cut out once.
  `rows_sampling` (distribution.RowSampling) overrides sp's temperature, top-k and
  top-p per row. Returns the loop's state (its cache left out) and the whole cache:
  with `shrink_at` > 0 some rows may not be done yet (`_decode`)."""
  b, n = tokens.shape[0], sp.max_new_tokens
  params = _prepared(model, params)
  logits, head = next_token_logits(model, params, tokens, mask, cache.head(window))
  pad = model.cfg.pad_token_id or 0
  state = DecodeState(
      i=jnp.int32(0), cache=head, logits=logits, match=jnp.zeros((b,), jnp.int32),
      tokens=jnp.full((b, n), pad, jnp.int32), logprobs=jnp.zeros((b, n), jnp.float32),
      length=jnp.zeros((b,), jnp.int32), stopped=jnp.zeros((b,), bool),
      done=~real)
  s = _decode(model, params, state, keys, stop_table, sp, rows_sampling, shrink_at)
  return s.replace(cache=None), cache.with_head(s.cache)


@functools.partial(compiler.jit, static_argnums=(0, 6, 7, 10), donate_argnums=(2, 3))
def _resume(model, params, cache, state, keys, stop_table, sp: SamplingParams, window,
            rows_sampling, rows, shrink_at: int):
  """`_generate`'s decoding resumed for rows `rows` alone (a smaller batch: the live rows,
  filled with copies of one finished row), then written back into the whole batch (a
  repeated row carries equal values). One program: taking, decoding and putting back,
  of the window's slots only (the rows' whole cache would cost a copy of it)."""
  params = _prepared(model, params)
  pick = lambda x: x[rows]
  per_row = state.replace(i=None, cache=None)
  part = jax.tree.map(pick, per_row).replace(i=state.i, cache=cache.head(window).take(rows))
  part = _decode(model, params, part, pick(keys), stop_table, sp,
                 jax.tree.map(pick, rows_sampling), shrink_at)
  put = lambda x, y: x.at[rows].set(y)
  state = jax.tree.map(put, per_row, part.replace(i=None, cache=None)).replace(i=part.i)
  return state, cache.put(rows, part.cache)


@dataclasses.dataclass
class Generation:
  """What a sampling call produced for each of its rows (numpy, on the host).

  tokens [B, N] (pad after a row's end), logprobs [B, N] (0 after the end),
  lengths [B] sampled tokens per row (stop token included), stopped [B] (False:
  hit max_new_tokens), texts and stop_reasons (when the sampler has a tokenizer).
  """
  tokens: np.ndarray
  logprobs: np.ndarray
  lengths: np.ndarray
  stopped: np.ndarray
  texts: list | None = None
  stop_reasons: list | None = None
  row_steps: int = 0  # Decode steps x rows computed (filler and finished rows included).

  @property
  def finish_reasons(self) -> list[str]:
    return ["stop" if s else "length" for s in self.stopped]

  def row_tokens(self, i: int) -> np.ndarray:
    return self.tokens[i, :self.lengths[i]]


def _filled_keys(keys, rows: int):
  """`keys` followed by copies of the first up to `rows` (batch filler), put together
  on the host: eager jnp ops would compile a program per live-row count."""
  typed = jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key)
  data = np.asarray(jax.random.key_data(keys) if typed else keys)
  data = sharding_lib.on_device(np.concatenate([data, np.repeat(data[:1], rows - len(data), 0)]))
  return jax.random.wrap_key_data(data, impl=jax.random.key_impl(keys)) if typed else data


class Sampler:
  """Samples from one decoder on one mesh; holds what is fixed across calls.

  Args:
    model: the Decoder module (its params are passed per call: the live ones).
    tokenizer: optional; needed for stop strings and decoded texts.
    stop_strings: strings that end a row wherever they appear in its output.
    mesh: shard rows over (data, fsdp) and KV heads over tensor; None: one device.
    length_buckets: allowed padded lengths of caches and the windows calls reach.
    chunk_buckets: allowed padded lengths of new-token chunks.
    share_prefix: on a fresh cache, rows whose tokens open with the same
      share_prefix or more tokens (a system prompt's instructions, a problem's G
      rollouts) get that opening computed once and copied; 0: never.
    compact: once a call's live rows fit a batch at most half as large (a power of two,
      padded for the mesh's batch shards), go on with those rows alone in it, again and
      again (finished rows stop costing decode steps); the samples are the same
      either way. False: every call decodes its whole batch to its longest row.
  """

  def __init__(self, model: Decoder, tokenizer=None, stop_strings=(), mesh=None,
               length_buckets=LENGTH_BUCKETS, chunk_buckets=CHUNK_BUCKETS,
               share_prefix: int = 32, compact: bool = True,
               skip_special_tokens: bool = False):
    self.model, self.cfg, self.tokenizer, self.mesh = model, model.cfg, tokenizer, mesh
    self.share_prefix, self.compact = share_prefix, compact
    # Texts leave the tokenizer's special tokens out (pedrl.tokenizer.skipped_ids), as a
    # vLLM server returns them; dialogues keep them (their texts are rendered as sampled).
    self.skip_special_tokens = skip_special_tokens
    self.buckets, self.chunk_buckets = tuple(length_buckets), tuple(chunk_buckets)
    self.stop_strings = tuple(stop_strings)
    compiler.engine_options()  # Its probe compiles now, not inside the first call.
    self.pad_id = self.cfg.pad_token_id or 0
    self._warned_no_stops = False
    self._stop_table = None
    if self.stop_strings:
      if tokenizer is None:
        raise ValueError("stop strings need the tokenizer, to know each token's bytes")
      table = stops.compile_stop_strings(
          self.stop_strings, stops.token_bytes(tokenizer, self.cfg.vocab_size))
      self._stop_table = self._replicated(table.table)

  # -- Placement ---------------------------------------------------------------

  def _replicated(self, x):
    if self.mesh is None:
      return sharding_lib.on_device(x)
    return sharding_lib.put(x, sharding_lib.replicated(self.mesh))

  def _rows(self, x):
    return sharding_lib.put_rows(x, self.mesh)

  def on_mesh(self, fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) traced under the mesh's context (`next_token_logits` keeps the logits
    whole beside their rows there); the decode programs, or their `.lower`."""
    with sharding_lib.context(self.mesh):
      return fn(*args)

  def padded_batch(self, n: int) -> int:
    """Rows a cache for n sequences gets: a multiple of the mesh's batch shards."""
    shards = sharding_lib.batch_shards(self.mesh)
    return -(-n // shards) * shards

  # -- Caches ----------------------------------------------------------------

  def new_cache(self, batch: int, size: int) -> KVCache:
    """An empty cache for `batch` sequences of up to `size` tokens (both padded)."""
    if size > self.cfg.max_position_embeddings:
      raise ValueError(f"a cache of {size} tokens exceeds the model's context of "
                       f"{self.cfg.max_position_embeddings}")
    size = min(bucket(size, self.buckets), self.cfg.max_position_embeddings)
    return kv_cache.create(self.cfg, self.padded_batch(batch), size, self.mesh)

  def _checked(self, rows, cache, need_token: bool):
    """The rows as int arrays; a ValueError naming the first bad one."""
    rows = [np.asarray(r, np.int64).reshape(-1) for r in rows]
    if not 0 < len(rows) <= cache.batch:
      raise ValueError(f"got {len(rows)} rows of tokens for a cache of {cache.batch} rows")
    for i, r in enumerate(rows):
      if need_token and r.size == 0:
        raise ValueError(f"row {i} has no tokens: a sampled row needs at least one new token")
      if r.size and (r.min() < 0 or r.max() >= self.cfg.vocab_size):
        raise ValueError(f"row {i} has token ids outside [0, {self.cfg.vocab_size})")
    return rows

  def _chunk(self, rows, cache, extra: int, need_token: bool):
    """Left-pads new-token rows into a bucketed [cache batch, T] chunk and checks room."""
    rows = self._checked(rows, cache, need_token)
    b = cache.batch
    longest = max(r.size for r in rows)
    t = bucket(max(longest, 1), self.chunk_buckets)
    end, pos = int(cache.end), int(np.max(sharding_lib.to_host(cache.pos)))
    room = cache.size - end
    if longest + extra > room or t + extra > room:
      t = longest
      if longest + extra > room:
        raise ValueError(
            f"{longest} new tokens + {extra} to generate do not fit the KV cache: "
            f"{end} of {cache.size} slots are used")
    if pos + longest + extra > self.cfg.max_position_embeddings:
      raise ValueError(f"position {pos} + {longest} new + {extra} generated tokens exceeds "
                       f"the model's context of {self.cfg.max_position_embeddings}")
    tokens, mask = left_padded(rows, b, t, self.pad_id)
    for i in range(len(rows), b):  # Filler rows: one token, so their logits stay finite.
      tokens[i, -1], mask[i, -1] = self.pad_id, True
    # Attend only to the slots this call can reach (bucketed: few compiled windows).
    window = min(bucket(end + t + extra, self.buckets), cache.size)
    return self._rows(tokens), self._rows(mask), window

  def extend(self, params: Params, cache: KVCache, rows: Sequence[Sequence[int]],
             reserve: int = 0) -> KVCache:
    """Appends each row's new tokens (e.g. the other speaker's turn) to the cache,
    keeping `reserve` slots free after them (the padding shrinks if it must)."""
    if not any(len(r) for r in rows):
      return cache
    tokens, mask, window = self._chunk(rows, cache, reserve, need_token=False)
    return _extend(self.model, params, cache, tokens, mask, window)

  def prefill_shared(self, params: Params, prompts: Sequence[Sequence[int]], copies: int,
                     cache_size: int) -> tuple[KVCache, list[list[int]]]:
    """One prefill per prompt, then `copies` consecutive rows of each (G rollouts).

    The last token of each prompt is held back and returned, to be passed as
    that row's new tokens to `generate` (which needs the last token's logits).
    """
    if any(len(p) == 0 for p in prompts):
      raise ValueError("empty prompt")
    # cache_size counts tokens; the prefill chunk takes its bucketed width in slots.
    longest = max(len(p) for p in prompts)
    slots = bucket(longest - 1, self.buckets) + 1 + max(cache_size - longest, 0)
    cache = self.new_cache(len(prompts), min(max(cache_size, slots),
                                             self.cfg.max_position_embeddings))
    # Room for each held-back last token and what it generates, even in a cache capped at
    # the model's context: the prefill's padding gives way rather than the generation.
    cache = self.extend(params, cache, [p[:-1] for p in prompts],
                        reserve=max(cache_size - longest, 0) + 1)
    cache = self.select_rows(cache, np.repeat(np.arange(len(prompts)), copies))
    return cache, [[p[-1]] for p in prompts for _ in range(copies)]

  def _shared_opening(self, params, cache, rows, extra: int):
    """(cache, rows): on a fresh cache, the rows' common opening (each row keeps a
    token of its own), cut to a bucket's length, written once to every row and cut
    from the rows. Cut rather than padded: padding would add masked slots a cache
    sized for the rows (a dialogue's first turn) has no room for, and the
    opening's last few tokens cost little more as part of every row's chunk."""
    if not self.share_prefix or len(rows) < 2 or int(cache.end) != 0:
      return cache, rows
    rows = self._checked(rows, cache, need_token=True)
    n = min(r.size for r in rows) - 1
    for r in rows[1:]:
      differ = np.flatnonzero(r[:n] != rows[0][:n])
      n = int(differ[0]) if differ.size else n
    t = bucket_below(n, self.chunk_buckets)
    if n < self.share_prefix or t == 0:
      return cache, rows
    if t + bucket(max(r.size for r in rows) - t, self.chunk_buckets) + extra > cache.size:
      return cache, rows  # The rest's chunk would not fit its bucketed width: one chunk.
    tokens = self._replicated(rows[0][None, :t].astype(np.int32))
    cache = _extend_shared(self.model, params, cache, tokens,
                           self._replicated(np.ones((1, t), bool)), t)
    return cache, [r[t:] for r in rows]

  def select_rows(self, cache: KVCache, rows: Sequence[int],
                  batch: int | None = None) -> KVCache:
    """The cache of rows `rows` (indices, may repeat), padded to `batch` rows
    (default: the mesh's padded batch) with copies of the first; dialogues that
    ended leave the batch this way."""
    rows = np.asarray(rows, np.int32)
    full = self.padded_batch(batch or rows.size)
    if full < rows.size:
      raise ValueError(f"{rows.size} rows do not fit a batch of {full}")
    rows = np.concatenate([rows, np.full(full - rows.size, rows[0], np.int32)])
    return kv_cache.take(cache, self._rows(rows))

  def clear_rows(self, cache: KVCache, rows: Sequence[int]) -> KVCache:
    """The cache with rows `rows` (indices) emptied, to be fed again from their start
    (a dialogue whose earlier turns now render differently); the other rows keep
    their slots and positions, so what they sample does not depend on it."""
    clear = np.zeros(cache.batch, bool)
    clear[np.asarray(rows, np.int64)] = True
    return kv_cache.clear(cache, self._rows(clear))

  def make_room(self, cache: KVCache, need: int, limit: int | None = None) -> tuple[KVCache, int]:
    """The cache and its free slots, made `need` if it can: grown while it has fewer
    than `limit` slots (at least doubled, so a long dialogue grows a few times), then
    compacted (left padding and early stops leave masked gaps).

    A dialogue's cache starts at what its first turn needs and grows to `limit`,
    rather than being allocated for the whole conversation limit: that costs
    memory a short dialogue never uses, and on CPU a fresh buffer's first touch
    (page faults: 0.39 s for a 1.2 GB cache on the 2-core machine of
    `pedrl.bench.rollout`).
    """
    room = cache.room
    if room < need and limit and cache.size < limit:
      size = bucket(max(2 * cache.size, cache.size - room + need), self.buckets)
      cache = kv_cache.grow(cache, min(size, limit, self.cfg.max_position_embeddings))
      room = cache.room
    if room < need:
      cache = kv_cache.compact(cache)
      room = cache.room
    return cache, room

  # -- Sampling --------------------------------------------------------------

  def with_stops(self, sampling: SamplingParams) -> SamplingParams:
    """`sampling` with stop_token_ids None replaced by the model's end-of-sequence
    ids; logs a warning (once per sampler) when nothing can stop a row."""
    if sampling.stop_token_ids is None:
      sampling = dataclasses.replace(sampling, stop_token_ids=tuple(self.cfg.eos_token_ids))
    if not sampling.stop_token_ids and not self.stop_strings and not self._warned_no_stops:
      self._warned_no_stops = True
      logging.warning("sampling with no stop token and no stop string (the model's config "
                      "names %s end-of-sequence ids): every row runs to max_new_tokens",
                      list(self.cfg.eos_token_ids) or "no")
    return sampling

  def generate(self, params: Params, rows: Sequence[Sequence[int]], keys: jax.Array,
               sampling: SamplingParams, cache: KVCache | None = None,
               rows_sampling: distribution.RowSampling | None = None) -> tuple[Generation, KVCache]:
    """Samples a continuation for each row of new tokens.

    Args:
      params: the model's current params.
      rows: per sequence, the token ids to append before sampling: the whole
        prompt for a fresh cache, the next turn's tokens for a dialogue's cache.
      keys: one PRNG key per row (`sequence_keys`).
      sampling: SamplingParams.
      cache: the rows' cache from earlier calls; None starts a fresh one sized
        for this prompt plus max_new_tokens.
      rows_sampling: optional distribution.RowSampling, one temperature, top-k and
        top-p per row in place of `sampling`'s (a server's mixed requests share one
        compiled program); the reported log-probs stay at `sampling`'s temperature.
    Returns:
      (Generation for the len(rows) rows, the updated cache).
    """
    sampling = self.with_stops(sampling)
    if cache is None:
      if not rows or any(len(r) == 0 for r in rows):
        raise ValueError("empty prompt: every row needs at least one token")
      longest = max(len(r) for r in rows)
      if longest + sampling.max_new_tokens > self.cfg.max_position_embeddings:
        raise ValueError(f"a prompt of {longest} tokens + {sampling.max_new_tokens} new tokens "
                         f"exceeds the model's context of {self.cfg.max_position_embeddings}")
      size = bucket(longest, self.buckets) + sampling.max_new_tokens
      cache = self.new_cache(len(rows), min(size, self.cfg.max_position_embeddings))
    cache, rows = self._shared_opening(params, cache, rows, sampling.max_new_tokens)
    n = len(rows)
    tokens, mask, window = self._chunk(rows, cache, sampling.max_new_tokens, need_token=True)
    keys = jnp.asarray(keys)
    if keys.shape[0] != n:
      raise ValueError(f"{keys.shape[0]} keys for {n} rows")
    if n < tokens.shape[0]:
      keys = _filled_keys(keys, tokens.shape[0])
    real = self._rows(np.arange(tokens.shape[0]) < n)
    if rows_sampling is not None:
      fill = tokens.shape[0] - n
      rows_sampling = jax.tree.map(
          lambda x: self._rows(jnp.concatenate([x, jnp.repeat(x[:1], fill)])), rows_sampling)
    keys, b = self._rows(keys), tokens.shape[0]
    state, cache = self.on_mesh(_generate, self.model, params, cache, tokens, mask, real, keys,
                                self._stop_table, sampling, window, rows_sampling,
                                self._shrink_at(b))
    row_steps = b * int(state.i)
    while not (done := sharding_lib.to_host(state.done)).all():  # On the host: no program.
      state, cache, row_steps = self._resumed(params, cache, state, done, keys, sampling,
                                              window, rows_sampling, row_steps)
    out = sharding_lib.to_host(Decoded(state.tokens, state.logprobs, state.length,
                                       state.stopped))
    gen = Generation(out.tokens[:n], out.logprobs[:n], out.length[:n], out.stopped[:n],
                     row_steps=row_steps)
    if self.tokenizer is not None:
      gen.texts, gen.stop_reasons = zip(*(self._text(gen, i, sampling) for i in range(n)))
      gen.texts, gen.stop_reasons = list(gen.texts), list(gen.stop_reasons)
    return gen, cache

  def _resumed(self, params, cache, state, done: np.ndarray, keys, sampling, window,
               rows_sampling, row_steps: int):
    """One more stretch of decoding with the live rows alone, in the power-of-two batch
    that holds them (filled with copies of a finished row), until they are done or half
    of that batch is; written back into the whole batch. A row's draws depend on its key
    and the step only, so it samples what it would have in the whole batch. `done`:
    state.done on the host."""
    live, finished = np.flatnonzero(~done), np.flatnonzero(done)
    size = self._live_batch(len(live))
    rows = np.concatenate([live, np.repeat(finished[:1], size - len(live))]).astype(np.int32)
    start = int(state.i)
    state, cache = self.on_mesh(_resume, self.model, params, cache, state, keys,
                                self._stop_table, sampling, window, rows_sampling,
                                self._rows(rows), self._shrink_at(size))
    return state, cache, row_steps + size * (int(state.i) - start)

  def _live_batch(self, live: int) -> int:
    """The batch `live` rows go on in: the power of two that holds them, padded to a
    multiple of the mesh's batch shards (rows sharded over them stay divisible)."""
    return self.padded_batch(1 << (live - 1).bit_length())

  def _shrink_at(self, batch: int) -> int:
    """The most live rows at which decoding leaves a batch of `batch` rows for a smaller
    one: the largest count whose `_live_batch` is at most half of it; 0 (never) when
    compaction is off or none is (e.g. a batch of two shards' rows on a mesh)."""
    at, p = 0, 1
    while self.compact and self.padded_batch(p) <= batch // 2:
      at, p = p, 2 * p
    return at

  def _text(self, gen: Generation, i: int, sampling: SamplingParams):
    ids = gen.row_tokens(i).tolist()
    reason = None
    if gen.stopped[i] and ids and ids[-1] in sampling.stop_token_ids:
      reason = self.tokenizer.decode(ids[-1:])
      ids = ids[:-1]
    text = tokenizer_lib.decode(self.tokenizer, ids, self.skip_special_tokens)
    cut, which = stops.find_stop(text, self.stop_strings)
    if which is not None:
      text, reason = text[:cut], which
    return text, reason


def generate_greedy(model: Decoder, params: Params, tokens: jax.Array, mask: jax.Array,
                    max_new_tokens: int) -> jax.Array:
  """Greedy continuation [B, max_new_tokens] of left-padded prompts tokens/mask [B, T].

  No stops: every row runs max_new_tokens (what transformers' generate does
  with eos_token_id=None). Array in, array out, for parity checks.
  """
  if max_new_tokens <= 0:
    raise ValueError(f"max_new_tokens must be positive, got {max_new_tokens}")
  sp = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop_token_ids=())
  tokens, host_mask = jnp.asarray(tokens), np.asarray(mask, bool)
  if tokens.ndim != 2 or tokens.shape[1] == 0:
    raise ValueError(f"prompts must be a non-empty [batch, length] array, got shape {tokens.shape}")
  if not host_mask[:, -1].all():
    raise ValueError("prompts must be left-padded: every row's last token must be real "
                     "(an empty prompt has none)")
  total = tokens.shape[1] + max_new_tokens
  if total > model.cfg.max_position_embeddings:
    raise ValueError(f"prompt ({tokens.shape[1]}) + max_new_tokens ({max_new_tokens}) exceeds "
                     f"the model's context of {model.cfg.max_position_embeddings}")
  mesh = getattr(getattr(tokens, "sharding", None), "mesh", None)
  cache = kv_cache.create(model.cfg, tokens.shape[0], total, mesh)
  keys = sequence_keys(0, np.arange(tokens.shape[0]))
  real = jnp.ones((tokens.shape[0],), bool)
  if mesh is not None:
    rows = kv_cache.shardings(model.cfg, mesh, tokens.shape[0]).pos  # Replicated if indivisible.
    keys, real = jax.device_put(keys, rows), jax.device_put(real, rows)
  # No mesh context (its rows may not divide the mesh): the logits stay as XLA splits them.
  out, _ = _generate(model, params, cache, tokens, jnp.asarray(mask, bool), real, keys, None, sp,
                     None)
  return out.tokens
