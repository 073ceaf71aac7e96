"""Requests gathered into engine calls, on one thread that owns the model.

Requests wait in a bounded queue (full: the caller answers 503). The engine
thread takes the first, gathers more for up to `window_s` or until `max_rows`
sampled rows, and groups them by stop strings (a sampler's stop table); each
group is one `Sampler.generate` call whose rows keep their own prompts, seeds,
temperature, top-k, top-p (`RowSampling`, traced, so any mix shares a program)
and token limits (the call decodes to the group's largest limit, bucketed to a
power of two, and each row is cut at its own). The batch is padded to a power
of two, so a long-running server compiles a handful of programs. Log-probs
(`logprobs`, `echo`) come from one teacher-forced pass over prompt and
completion (`scoring.token_alternatives`).
"""
import concurrent.futures
import dataclasses
import queue
import threading
import time

from absl import logging
import jax.numpy as jnp
import numpy as np

from pedrl import streams
from pedrl.engine import RowSampling, Sampler, SamplingParams, scoring, stops as stops_lib


@dataclasses.dataclass(frozen=True)
class Ask:
  """One prompt's request: n samples of up to max_tokens (0: echo only)."""
  prompt: tuple  # Token ids.
  max_tokens: int
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  stop: tuple = ()
  seed: int = 0
  n: int = 1
  logprobs: int | None = None  # Alternatives per token; None: no log-probs.
  echo: bool = False

  @property
  def group(self) -> tuple:
    return self.stop


@dataclasses.dataclass
class Sample:
  tokens: list  # Sampled ids behind the returned text (no stop token or stop string).
  text: str
  finish_reason: str  # "stop" or "length".
  logprobs: scoring.Alternatives | None = None  # Of prompt + tokens.


@dataclasses.dataclass
class Job:
  ask: Ask
  future: concurrent.futures.Future = dataclasses.field(default_factory=concurrent.futures.Future)


def _pow2(n: int) -> int:
  return 1 << (max(n, 1) - 1).bit_length()


class Engine:
  """One model's sampling and scoring, with a sampler per stop-string set."""

  def __init__(self, model, params, tokenizer, mesh=None, max_samplers: int = 16):
    self.model, self.params, self.tokenizer, self.mesh = model, params, tokenizer, mesh
    self.context = model.cfg.max_position_embeddings
    self.max_samplers = max_samplers
    self._samplers = {}
    self.calls = 0  # Engine calls (sampling and scoring), for tests and the benchmark.

  def sampler(self, stop: tuple) -> Sampler:
    if stop not in self._samplers:
      if len(self._samplers) >= self.max_samplers:  # Oldest first: dicts keep order.
        self._samplers.pop(next(iter(self._samplers)))
      self._samplers[stop] = Sampler(self.model, self.tokenizer, stop_strings=stop, mesh=self.mesh)
    return self._samplers[stop]

  def sample(self, asks: list[Ask]) -> list[list[Sample]]:
    """One call for asks of one group; per ask, its n samples."""
    first = asks[0]
    rows = [list(a.prompt) for a in asks for _ in range(a.n)]
    keys = jnp.concatenate([streams.sequence_keys(a.seed, np.arange(a.n)) for a in asks])
    longest = max(map(len, rows))
    limit = max(a.max_tokens for a in asks)
    budget = _pow2(max(limit, 16))
    new = budget if longest + budget <= self.context else limit
    padded = _pow2(len(rows))
    rows += [rows[0]] * (padded - len(rows))
    keys = jnp.concatenate([keys, jnp.repeat(keys[:1], padded - len(keys), axis=0)])
    per_row = lambda field: [getattr(a, field) for a in asks for _ in range(a.n)]
    rows_sampling = RowSampling.of(
        *(np.resize(per_row(f), padded) for f in ("temperature", "top_k", "top_p")))
    rows_sampling = rows_sampling.replace(top_k=jnp.maximum(rows_sampling.top_k, 0))
    sp = SamplingParams(new)  # Its temperature (1) is the one the log-probs would use.
    sampler = self.sampler(first.stop)
    gen, _ = sampler.generate(self.params, rows, keys, sp, rows_sampling=rows_sampling)
    self.calls += 1
    out, i, sp = [], 0, sampler.with_stops(sp)
    for a in asks:
      out.append([self._cut(gen, i + j, a, sp) for j in range(a.n)])
      i += a.n
    return out

  def _cut(self, gen, i: int, ask: Ask, sp: SamplingParams) -> Sample:
    """Row i as the OpenAI API returns it: cut at the ask's own token limit, the text
    ending before a stop string, and the tokens behind that text."""
    ids = gen.row_tokens(i).tolist()
    by_string = False
    if len(ids) > ask.max_tokens:
      ids, reason = ids[:ask.max_tokens], "length"
      text = self.tokenizer.decode(ids)
      cut, which = stops_lib.find_stop(text, ask.stop)
      if which is not None:
        text, reason, by_string = text[:cut], "stop", True
    else:
      text, reason = gen.texts[i], gen.finish_reasons[i]
      if gen.stopped[i] and ids and ids[-1] in sp.stop_token_ids:
        ids = ids[:-1]
      else:
        by_string = bool(gen.stopped[i])
    if by_string:  # Keep the tokens up to the one that completes the returned text.
      # The stop string ends within the last few tokens: search from the end.
      while ids and len(self.tokenizer.decode(ids[:-1])) >= len(text):
        ids = ids[:-1]
    return Sample(ids, text, reason)

  def alternatives(self, rows: list[list[int]], k: int) -> list:
    self.calls += 1
    return scoring.token_alternatives(self.model, self.params, rows, k=max(k, 1))


class Batcher:
  """A bounded queue of jobs and the engine thread that answers them."""

  def __init__(self, engine: Engine, max_rows: int = 32, window_s: float = 0.01,
               max_queue: int = 256):
    self.engine, self.max_rows, self.window_s = engine, max_rows, window_s
    self.jobs = queue.Queue(maxsize=max_queue)
    self.batches = 0
    self._thread = threading.Thread(target=self._loop, name="pedrl-engine", daemon=True)
    self._thread.start()

  def submit(self, ask: Ask) -> concurrent.futures.Future:
    """Queues an ask; raises queue.Full when the queue is at its limit."""
    job = Job(ask)
    self.jobs.put_nowait(job)
    return job.future

  def _gather(self) -> list[Job]:
    jobs = [self.jobs.get()]
    deadline = time.monotonic() + self.window_s
    while sum(j.ask.n for j in jobs) < self.max_rows:
      left = deadline - time.monotonic()
      if left <= 0:
        break
      try:
        jobs.append(self.jobs.get(timeout=left))
      except queue.Empty:
        break
    return jobs

  def _loop(self):
    while True:
      jobs = [j for j in self._gather() if j.future.set_running_or_notify_cancel()]
      self.batches += 1
      groups = {}
      for j in jobs:
        groups.setdefault(j.ask.group if j.ask.max_tokens else "echo", []).append(j)
      for key, group in groups.items():
        try:
          results = self._answer(group, sample=key != "echo")
        except Exception as e:  # The server answers 500 for these jobs and keeps serving.
          logging.exception("engine call failed")
          for j in group:
            j.future.set_exception(e)
          continue
        for j, r in zip(group, results):
          j.future.set_result(r)

  def _answer(self, jobs: list[Job], sample: bool) -> list[list[Sample]]:
    asks = [j.ask for j in jobs]
    if sample:
      results = []
      for lo in range(0, len(asks), self.max_rows):  # Rows beyond max_rows: another call.
        results += self.engine.sample(asks[lo:lo + self.max_rows])
    else:
      results = [[Sample([], "", "length")] for _ in asks]
    wanted = [(a, s) for a, r in zip(asks, results) for s in r if a.logprobs is not None]
    if wanted:
      rows = [list(a.prompt) + s.tokens for a, s in wanted]
      k = max(a.logprobs for a, _ in wanted)
      for (_, s), lp in zip(wanted, self.engine.alternatives(rows, k)):
        s.logprobs = lp
    return results
