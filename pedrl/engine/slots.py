"""Continuous batching: a decode batch of R row slots that sequences enter and leave
between decode calls, on one KV cache, from a fixed set of compiled programs.

A server's traffic is a stream of sequences of every length, sampling setting and
token budget. `Slots` holds R rows on one KV cache of S = 2 M slots (M: a
sequence's prompt + sampled tokens at most); three programs act on it:

- admit: A new sequences (A from a few buckets) enter free rows. Each row keeps
  the first `keep` tokens its previous sequence left in the cache (prefix
  caching: a shared system prompt is computed once, then reused by every later
  sequence that opens with it) and appends the rest of its prompt as a chunk of
  T tokens (T from a few buckets).
- decode: up to K steps of every live row at once, each row with its own
  temperature, top-k, top-p (`distribution.RowSampling`), key and token budget;
  a row stops at an end-of-sequence token or its budget, or when the host
  releases it: aborted, or ended by a stop string, which the host matches on the
  text.
- compact: each row cut to its first `keep` tokens, then its filled slots moved
  to the front (`KVCache.compact` of the window that holds them all).

Every program's shapes come from `ProgramSet`: rows R, admission rows A, chunk
lengths T and decode windows W (the cache's first slots a decode call reads,
enough for `end` + K), so `warmup` compiles all of them at start-up and no
sequence compiles anything later. All rows share the cache's `end` (each call
appends at it); the host compacts when a call would not fit, or when compacting
would halve the decode window. S = 2 M guarantees that after a compaction
(end <= M) any call fits.

Keys: a sequence's key is `fold_in(key(seed), index)` and its step t draws with
`fold_in(that, t)`, as `Sampler.generate` does with `streams.sequence_keys`; the
seed enters as two 32-bit words (the whole 64-bit seed; `jax.random.key` keeps
only the low 32 bits without x64), so a seeded request below 2**32 samples what
the Sampler samples with that seed.
"""
import dataclasses
import functools
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from pedrl.engine import compiler, distribution
from pedrl.engine.distribution import RowSampling
from pedrl.engine.sampling import next_token_logits
from pedrl.engine.shapes import left_padded
from pedrl.models.decoder import Decoder, KVCache

IMPL = "threefry2x32"  # Keys from seed words, whatever jax's default implementation.


def powers_of_two(lo: int, hi: int) -> tuple:
  """lo, 2 lo, 4 lo, ... below hi, then hi."""
  out, n = [], lo
  while n < hi:
    out.append(n)
    n *= 2
  return tuple(out) + (hi,)


@dataclasses.dataclass(frozen=True)
class ProgramSet:
  """The shapes a Slots decoder compiles, all of them at start-up.

  rows: R, sequences decoded at once (a server's --max_num_seqs).
  max_len: M, a sequence's prompt + sampled tokens at most; the cache has 2 M slots.
  steps: K, decode steps per call: a new sequence or a stop waits at most this
    many steps, and the host reads tokens after each call.
  """
  rows: int
  max_len: int
  steps: int = 8

  def __post_init__(self):
    if self.rows < 1 or self.max_len < 2 or self.steps < 1:
      raise ValueError(f"rows, max_len and steps must be positive (max_len >= 2), got {self}")

  @property
  def slots(self) -> int:
    return 2 * self.max_len

  @property
  def admit_rows(self) -> tuple:
    """A: 1, 4, 16, ... up to R / 8, then R. A prefill costs what its rows hold, but
    gathering A rows of the cache and scattering them back costs about what all R rows
    in place do once A nears R / 4 (XLA:CPU, `python -m pedrl.bench.serve`)."""
    out, n = [], 1
    while n * 8 <= self.rows:
      out.append(n)
      n *= 4
    return tuple(out) + (self.rows,)

  @property
  def chunks(self) -> tuple:
    """T: prompt chunk lengths, powers of two from 16 up to M."""
    return powers_of_two(min(16, self.max_len), self.max_len)

  @property
  def windows(self) -> tuple:
    """W: decode windows, powers of two from 64 up to the whole cache."""
    return powers_of_two(min(64, self.slots), self.slots)

  def fit(self, n: int, sizes: tuple) -> int:
    return next(s for s in sizes if s >= n)

  @property
  def count(self) -> int:
    """Programs `warmup` compiles (admit, decode and compact)."""
    return len(self.admit_rows) * len(self.chunks) + 2 * len(self.windows)


@struct.dataclass
class Slots:
  """R rows on one cache: each row's next-token logits, key words, sampling
  settings, tokens sampled so far, budget, and whether it is still decoding."""
  cache: KVCache
  logits: jax.Array  # [R, V] float32.
  key_words: jax.Array  # [R, 2] uint32: the row's sequence key (threefry data).
  sampling: RowSampling  # [R] each.
  count: jax.Array  # [R] int32: tokens the row has sampled.
  budget: jax.Array  # [R] int32: tokens it may sample.
  live: jax.Array  # [R] bool.


@dataclasses.dataclass
class Admission:
  """A sequence entering row `row`: it keeps the row's first `keep` cached tokens and
  appends `tokens`; its key is fold_in(key(seed), index)."""
  row: int
  keep: int
  tokens: list
  seed: int
  index: int
  temperature: float
  top_k: int
  top_p: float
  budget: int


def seed_words(seed: int) -> tuple[int, int]:
  """A 64-bit seed (negative ones modulo 2**64) as threefry's two key words."""
  seed %= 1 << 64
  return seed >> 32, seed & 0xFFFFFFFF


def _key(words, index):
  return jax.random.fold_in(jax.random.wrap_key_data(words, impl=IMPL), index)


@functools.partial(compiler.jit, static_argnums=(0,), donate_argnums=(2,))
def _admit(model: Decoder, params, slots: Slots, rows, new, keep, tokens, mask, words, index,
           sampling: RowSampling, budget):
  """Rows `rows` ([A]; repeats carry equal values) cut to their first `keep` tokens, then
  extended by tokens/mask [A, T]; their logits, keys and settings set. With A = R the
  rows are 0..R-1 in place and only those marked `new` change (no gather or scatter of
  the cache: on XLA:CPU they copy it)."""
  full = rows.shape[0] == slots.live.shape[0]
  part = slots.cache if full else slots.cache.take(rows)
  kept = part.mask & (jnp.cumsum(part.mask, axis=1) <= keep[:, None])
  part = part.replace(mask=kept, pos=jnp.where(new, keep, part.pos).astype(jnp.int32))
  logits, part = next_token_logits(model, params, tokens, mask, part)
  keys = jax.random.key_data(jax.vmap(_key)(words, index))
  if full:
    put = lambda a, b: jnp.where(new.reshape((-1,) + (1,) * (a.ndim - 1)), b, a)
  else:
    put = lambda a, b: a.at[rows].set(b)
  return Slots(
      cache=part if full else slots.cache.put(rows, part), logits=put(slots.logits, logits),
      key_words=put(slots.key_words, keys), sampling=jax.tree.map(put, slots.sampling, sampling),
      count=put(slots.count, jnp.zeros_like(rows)), budget=put(slots.budget, budget),
      live=put(slots.live, jnp.ones(rows.shape, bool)))


@functools.partial(compiler.jit, static_argnums=(0, 5, 6), donate_argnums=(2,))
def _decode(model: Decoder, params, slots: Slots, running, stop_ids, steps: int, window: int):
  """Up to `steps` decode steps of the live rows that are still `running`, on the
  cache's first `window` slots. Returns (slots, tokens [R, steps] with -1 where a row
  sampled nothing, steps run)."""
  rows = slots.live.shape[0]

  def step(carry):
    i, cache, logits, live, count, out = carry
    keys = jax.vmap(lambda w, t: jax.random.fold_in(
        jax.random.wrap_key_data(w, impl=IMPL), t))(slots.key_words, count)
    tok = distribution.sample_rows(logits, keys, slots.sampling)
    ends = jnp.isin(tok, stop_ids) | (count + 1 >= slots.budget)
    out = out.at[:, i].set(jnp.where(live, tok, -1))
    logits, cache = next_token_logits(model, params, tok[:, None], live[:, None], cache)
    return i + 1, cache, logits, live & ~ends, count + live, out

  carry = (jnp.int32(0), slots.cache.head(window), slots.logits, slots.live & running,
           slots.count, jnp.full((rows, steps), -1, jnp.int32))
  i, head, logits, live, count, out = jax.lax.while_loop(
      lambda c: (c[0] < steps) & jnp.any(c[3]), step, carry)
  slots = slots.replace(cache=slots.cache.with_head(head), logits=logits, live=live,
                        count=count)
  return slots, out, i


@functools.partial(compiler.jit, static_argnums=(2,), donate_argnums=(0,))
def _compact(slots: Slots, keep, window: int):
  """Each row cut to its first keep[r] tokens (and stopped if cut), then its tokens
  moved to the front of the first `window` slots (which hold all of them)."""
  cache = slots.cache
  mask = cache.mask & (jnp.cumsum(cache.mask, axis=1) <= keep[:, None])
  cut = jnp.sum(cache.mask, axis=1) > keep
  cache = cache.replace(mask=mask)
  return slots.replace(cache=cache.with_head(cache.head(window).compact()),
                       live=slots.live & ~cut)


class SlotDecoder:
  """A Slots batch on one device and the host's view of it: which rows are busy,
  where the shared `end` is and what each row's cache holds (its token history, for
  prefix reuse).

  The caller (a server's scheduler) decides which sequence enters which free row
  and when a row is released; this class runs the programs with shapes from
  `programs` only. A released row keeps its tokens for a later sequence that opens
  with them, until a compaction cuts it to what the busy rows already span.
  """

  def __init__(self, model: Decoder, params, programs: ProgramSet, stop_token_ids=()):
    cfg = model.cfg
    if programs.max_len > cfg.max_position_embeddings:
      raise ValueError(f"max_len={programs.max_len} exceeds the model's context of "
                       f"{cfg.max_position_embeddings}")
    self.model, self.params, self.programs = model, params, programs
    self.pad_id = cfg.pad_token_id or 0
    self.stop_ids = jnp.asarray(tuple(stop_token_ids) or (-1,), jnp.int32)
    r = programs.rows
    # Committed to the device, as every program's outputs are: the programs' first calls
    # then share the compiled versions of all later calls.
    self.slots = jax.device_put(Slots(
        cache=KVCache.zeros(cfg, r, programs.slots),
        logits=jnp.zeros((r, cfg.vocab_size), jnp.float32),
        key_words=jnp.zeros((r, 2), jnp.uint32),
        sampling=RowSampling.of(np.ones(r, np.float32), np.zeros(r, np.int32),
                                np.ones(r, np.float32)),
        count=jnp.zeros((r,), jnp.int32), budget=jnp.ones((r,), jnp.int32),
        live=jnp.zeros((r,), bool)), jax.local_devices()[0])
    self.end = 0
    self.busy = np.zeros(r, bool)
    self.history = [[] for _ in range(r)]  # Tokens each row's cache holds, in order.
    self.compactions = 0

  # -- Programs ----------------------------------------------------------------

  def admit(self, admissions: list[Admission]) -> None:
    """Starts sequences in free rows (distinct; each keeps at most its row's history,
    and keep + its tokens <= M), in as few calls as their chunk lengths allow."""
    p = self.programs
    by_chunk = {}
    for a in admissions:
      if self.busy[a.row] or a.keep > len(self.history[a.row]):
        raise ValueError(f"row {a.row} is busy or holds fewer than {a.keep} tokens")
      if not a.tokens or a.keep + len(a.tokens) > p.max_len:
        raise ValueError(f"row {a.row}: {a.keep} kept + {len(a.tokens)} new tokens must be "
                         f"1 to {p.max_len}")
      by_chunk.setdefault(p.fit(len(a.tokens), p.chunks), []).append(a)
    for t, group in sorted(by_chunk.items()):
      for lo in range(0, len(group), p.rows):
        self._admit(group[lo:lo + p.rows], t)

  def _admit(self, group: list[Admission], t: int) -> None:
    p = self.programs
    self.room(t)
    a = p.fit(len(group), p.admit_rows)
    new = np.ones(a, bool)
    if a == p.rows:  # Every row in place: the admitted ones marked new, the others kept.
      by_row = {x.row: x for x in group}
      new = np.array([r in by_row for r in range(a)])
      group = [by_row.get(r) or dataclasses.replace(group[0], row=r, keep=p.slots, tokens=[])
               for r in range(a)]
    else:  # Filler: the first again, with the same values.
      group = group + [group[0]] * (a - len(group))
    tokens, mask = left_padded([x.tokens for x in group], a, t, self.pad_id)
    field = lambda name, dtype: np.asarray([getattr(x, name) for x in group], dtype)
    self.slots = _admit(
        self.model, self.params, self.slots, field("row", np.int32), new,
        field("keep", np.int32), tokens, mask,
        np.asarray([seed_words(x.seed) for x in group], np.uint32), field("index", np.uint32),
        RowSampling.of(field("temperature", np.float32), field("top_k", np.int32),
                       field("top_p", np.float32)), field("budget", np.int32))
    self.end += t
    for x, is_new in zip(group, new):
      if is_new:
        self.history[x.row] = self.history[x.row][:x.keep] + list(x.tokens)
        self.busy[x.row] = True

  def release(self, rows: Sequence[int]) -> None:
    """Rows whose sequences ended (or were abandoned): they stop decoding and are free."""
    self.busy[list(rows)] = False

  def decode(self) -> np.ndarray:
    """Up to K steps of the busy rows still live on the device; returns the tokens
    [R, K] they sampled (-1: none), also appended to their histories."""
    p = self.programs
    self.room(p.steps)
    window = p.fit(self.end + p.steps, p.windows)
    if window >= 2 * p.fit(self._kept(self._keep()) + p.steps, p.windows):
      self.compact()  # Halves the slots every step reads.
      window = p.fit(self.end + p.steps, p.windows)
    self.slots, out, steps = _decode(self.model, self.params, self.slots, self.busy.copy(),
                                     self.stop_ids, p.steps, window)
    out, steps = np.asarray(out), int(steps)
    self.end += steps
    for r in np.flatnonzero((out >= 0).any(axis=1)):
      self.history[r] += [int(x) for x in out[r] if x >= 0]
    return out

  def _keep(self) -> np.ndarray:
    """Tokens each row keeps in a compaction: a busy row all; a free row as many as the
    longest busy row holds (its cached prefix never widens the window), or half a
    sequence's limit if that is more (a shared opening outlives an idle spell)."""
    lengths = np.array([len(h) for h in self.history])
    span = max(lengths[self.busy].max(initial=0), self.programs.max_len // 2)
    return np.where(self.busy, lengths, np.minimum(lengths, span))

  def _kept(self, keep) -> int:
    return int(np.max(keep, initial=0))

  def compact(self, keep: Sequence[int] | None = None) -> None:
    """Cuts row r to its first keep[r] cached tokens (default `_keep`) and moves every
    row's tokens to the front of the cache."""
    keep = self._keep() if keep is None else np.minimum(keep, [len(h) for h in self.history])
    self.slots = _compact(self.slots, np.asarray(keep, np.int32),
                          self.programs.fit(max(self.end, 1), self.programs.windows))
    self.history = [h[:k] for h, k in zip(self.history, keep)]
    self.end = self._kept(keep)
    self.compactions += 1

  def room(self, need: int) -> None:
    """Compacts when `need` more slots do not fit after `end` (after one they do:
    end <= M and need <= M)."""
    if self.end + need > self.programs.slots:
      self.compact()
    if self.end + need > self.programs.slots:
      raise RuntimeError(f"{need} slots do not fit after compacting: {self.end} of "
                         f"{self.programs.slots} hold rows' tokens")

  # -- Start-up ----------------------------------------------------------------

  def warmup(self, progress: Callable[[int, int, str], None] | None = None) -> float:
    """Compiles (or loads from the persistent cache) every program of the set by
    running it once on throw-away rows; leaves the batch empty. Returns seconds.
    `progress(done, total, what)` is called after each."""
    start, p = time.perf_counter(), self.programs
    done = 0

    def tick(what) -> None:
      nonlocal done
      done += 1
      if progress:
        progress(done, p.count, what)

    empty = np.zeros(p.rows, int)
    for t in p.chunks:
      for a in p.admit_rows:
        self.admit([Admission(row=r, keep=0, tokens=[self.pad_id] * t, seed=0, index=0,
                              temperature=1.0, top_k=0, top_p=1.0, budget=1)
                    for r in range(a)])
        self.release(range(a))
        self.compact(empty)
        tick(f"admit {a}x{t}")
    for w in p.windows:
      self.slots, out, _ = _decode(self.model, self.params, self.slots, self.busy.copy(),
                                   self.stop_ids, p.steps, w)
      np.asarray(out)
      tick(f"decode {p.rows}x{w}")
    for w in p.windows:
      self.slots = _compact(self.slots, empty.astype(np.int32), w)
      tick(f"compact {p.rows}x{w}")
    self.end, self.compactions = 0, 0
    return time.perf_counter() - start
