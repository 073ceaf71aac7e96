"""Sequences scheduled onto the rows of a continuous batch, on the one thread that owns
the model.

A request becomes sequences (one per prompt and choice). They wait in a bounded
queue (a request that does not fit whole is refused whole: the caller answers 503)
and enter free rows at the next decode call's boundary (`engine.slots`): a short
request never waits behind a long one, only for a free row. Each sequence takes
the free row whose cached tokens share the longest opening with its prompt
(prefix caching), so a system prompt shared by every dialogue is computed once
per row, not per request.

After every decode call the thread reads each row's new tokens and, on the host,
ends a sequence at its end-of-sequence token, its token limit or a stop string
(matched on the decoded text, so a stop string costs nothing on the device and
never compiles a program), then releases its row. A sequence whose client has
left is dropped at the next boundary. Log-probs (`logprobs`, `echo`) come from one
teacher-forced pass over prompt and completion after the sequence ends
(`scoring.token_alternatives`, fixed rows per call and length buckets).

Anything that raises inside an engine call fails the requests of that call alone
(their callers answer 500); the thread keeps serving the others.
"""
import collections
from collections.abc import Callable
import queue
import threading
import time

from absl import logging
import numpy as np

from pedrl.engine import scoring, slots as slots_lib, stops as stops_lib
from pedrl.serve.prometheus import Metrics
from pedrl.serve.sequences import Job, Sequence  # noqa: F401 (also imported from here)
from pedrl import tokenizer as tokenizer_lib

SCORE_ROWS = 4  # Rows per log-prob call: one compiled program per length bucket.


class Engine:
  """One model's continuous batch and log-prob scorer, with its fixed program set."""

  def __init__(self, model, params, tokenizer, programs: slots_lib.ProgramSet) -> None:
    self.model, self.params, self.tokenizer, self.programs = model, params, tokenizer, programs
    self.context = programs.max_len
    self.stop_ids = frozenset(model.cfg.eos_token_ids)
    self.decoder = slots_lib.SlotDecoder(model, params, programs, model.cfg.eos_token_ids)
    self.score_widths = slots_lib.powers_of_two(min(16, programs.max_len), programs.max_len)

  def text(self, ids: list[int], skip_special_tokens: bool = True) -> str:
    """A completion's text: its tokens decoded, special ones left out if asked
    (`pedrl.tokenizer.skipped_ids`)."""
    return tokenizer_lib.decode(self.tokenizer, ids, skip_special_tokens)

  def alternatives(self, rows: list[list[int]]) -> list[scoring.Alternatives]:
    return scoring.token_alternatives(self.model, self.params, rows, k=5,
                                      buckets=self.score_widths, rows_per_call=SCORE_ROWS)

  def warmup(self, progress: Callable[[int, int, str], None] | None = None) -> float:
    """Every program the server runs, compiled (or loaded from the persistent cache)."""
    start = time.perf_counter()
    total = self.programs.count + len(self.score_widths)
    self.decoder.warmup(lambda i, n, what: progress and progress(i, total, what))
    for i, w in enumerate(self.score_widths):
      self.alternatives([[0] * w])
      if progress:
        progress(self.programs.count + i + 1, total, f"logprobs {SCORE_ROWS}x{w}")
    return time.perf_counter() - start

  def reset(self) -> None:
    """A fresh batch, after an engine call that raised may have consumed the old one."""
    self.decoder = slots_lib.SlotDecoder(self.model, self.params, self.programs,
                                         self.model.cfg.eos_token_ids)


class Scheduler:
  """The bounded queue of sequences and the engine thread that serves them."""

  def __init__(self, engine: Engine, max_queue: int = 256, prefix_caching: bool = True,
               metrics: Metrics | None = None) -> None:
    self.engine, self.max_queue, self.prefix_caching = engine, max_queue, prefix_caching
    self.metrics = metrics or Metrics()
    self._inbox = queue.SimpleQueue()  # ("submit" | "abort", job)
    self._lock = threading.Lock()
    self._queued = 0  # Sequences submitted and not yet in a row (the queue's length).
    self.waiting = collections.deque()  # (job, sequence), in arrival order.
    self.rows = [None] * engine.programs.rows  # (job, sequence) per busy row.
    self.scoring = []  # (job, sequence) ended, waiting for their log-probs.
    self._compactions = 0  # The decoder's count at the last look (for the metric).
    self._thread = threading.Thread(target=self._loop, name="pedrl-engine", daemon=True)
    self._thread.start()

  # -- Called from the event loop ----------------------------------------------

  def submit(self, job: Job) -> None:
    """Queues a job's sequences, all or none: raises queue.Full past `max_queue`, and
    RuntimeError once closed."""
    if not self._thread.is_alive():
      raise RuntimeError("the engine thread has ended (Scheduler.close)")
    with self._lock:
      if self._queued + len(job.sequences) > self.max_queue:
        raise queue.Full
      self._queued += len(job.sequences)
      self.metrics.waiting.set(self._queued)
    self._inbox.put(("submit", job))

  def abort(self, job: Job) -> None:
    """Drops a job whose client left (its rows stop at the next step boundary)."""
    job.cancelled = True
    self._inbox.put(("abort", job))

  def close(self, timeout: float = 30.0) -> None:
    """Ends the engine thread at its next step boundary; the jobs it still holds fail.
    An in-process server (tests, notebooks) calls it once stopped: the thread holds the
    engine's weights and caches for as long as it runs."""
    self._inbox.put(("close", None))
    self._thread.join(timeout)

  # -- The engine thread ----------------------------------------------------------

  def _loop(self) -> None:
    while True:
      idle = not self.waiting and not self.scoring and not any(self.rows)
      if self._receive(block=idle):
        self._fail_all(RuntimeError("the server is shutting down"))
        return
      self._admit()
      if any(self.rows):
        self._guarded(self._decode, [r for r in self.rows if r], decoding=True)
      if self.scoring:
        self._guarded(self._score, self.scoring, decoding=False)

  def _receive(self, block: bool):
    try:
      messages = [self._inbox.get()] if block else []
      while True:
        messages.append(self._inbox.get_nowait())
    except queue.Empty:
      pass
    closing = False
    for kind, job in messages:
      if kind == "close":
        closing = True
      elif kind == "submit" and not job.cancelled:
        self.waiting.extend((job, s) for s in job.sequences)
      elif kind == "submit":
        self._dequeued(len(job.sequences))
      else:
        self._drop(job, aborted=True)
    return closing

  def _fail_all(self, error: Exception) -> None:
    jobs = {id(j): j for j, _ in [*self.waiting, *filter(None, self.rows), *self.scoring]}
    for job in jobs.values():
      self._drop(job)
      job.fail(error)

  def _dequeued(self, n: int) -> None:
    with self._lock:
      self._queued -= n
      self.metrics.waiting.set(self._queued)

  def _drop(self, job: Job, aborted: bool = False) -> None:
    """Removes a job's sequences wherever they are; their rows are freed."""
    waiting = [x for x in self.waiting if x[0] is job]
    if waiting:
      self.waiting = collections.deque(x for x in self.waiting if x[0] is not job)
      self._dequeued(len(waiting))
    rows = [r for r, x in enumerate(self.rows) if x and x[0] is job]
    for r in rows:
      self.rows[r] = None
    self.engine.decoder.release(rows)
    self.scoring = [x for x in self.scoring if x[0] is not job]
    if aborted:
      self.metrics.aborted.inc(len(waiting) + len(rows))
    self.metrics.running.set(sum(map(bool, self.rows)))

  def _admit(self) -> None:
    """Waiting sequences into free rows, in arrival order."""
    free = [r for r, x in enumerate(self.rows) if x is None]
    chosen = []
    while self.waiting and (free or self.waiting[0][1].max_tokens == 0):
      job, seq = self.waiting.popleft()
      self._dequeued(1)
      if seq.max_tokens == 0:  # Echo only: nothing to decode.
        seq.finish_reason = "length"
        self._ended(job, seq)
        continue
      row, keep = self._row_for(seq.prompt, free)
      free.remove(row)
      chosen.append((job, seq, slots_lib.Admission(
          row=row, keep=keep, tokens=list(seq.prompt[keep:]), seed=seq.seed, index=seq.index,
          temperature=seq.temperature, top_k=max(seq.top_k, 0), top_p=seq.top_p,
          budget=seq.max_tokens)))
    if not chosen:
      return
    for job, seq, a in chosen:
      self.rows[a.row] = (job, seq)
    if self._guarded(lambda: self.engine.decoder.admit([a for _, _, a in chosen]),
                     [(j, s) for j, s, _ in chosen], decoding=False):
      self.metrics.prompt_tokens.inc(sum(len(s.prompt) for _, s, _ in chosen))
      self.metrics.cached_tokens.inc(sum(a.keep for _, _, a in chosen))
    self.metrics.running.set(sum(map(bool, self.rows)))

  def _row_for(self, prompt: tuple, free: list) -> tuple[int, int]:
    """(row, tokens kept): the free row whose cache opens with the longest part of the
    prompt (at most all but its last token, which must be run for its logits)."""
    history = self.engine.decoder.history
    if not self.prefix_caching:
      return free[0], 0
    p = np.asarray(prompt[:-1])
    best, keep = free[0], -1
    for r in free:
      h = np.asarray(history[r][:len(p)])
      differ = np.flatnonzero(h != p[:len(h)])
      shared = int(differ[0]) if differ.size else len(h)
      if shared > keep or (shared == keep and len(history[r]) < len(history[best])):
        best, keep = r, shared  # Ties: the row with least cached, losing the least.
    return best, keep

  def _decode(self) -> None:
    start = time.perf_counter()
    out = self.engine.decoder.decode()
    new = (out >= 0).sum()
    self.metrics.steps.inc(int((out >= 0).any(axis=0).sum()))
    self.metrics.generated.inc(int(new))
    self.metrics.rate.set(new / max(time.perf_counter() - start, 1e-9))
    self.metrics.compactions.inc(max(self.engine.decoder.compactions - self._compactions, 0))
    self._compactions = self.engine.decoder.compactions
    changed = collections.defaultdict(list)
    for r in np.flatnonzero((out >= 0).any(axis=1)):
      job, seq = self.rows[r]
      self._extend(seq, [int(t) for t in out[r] if t >= 0])
      if seq.finish_reason:
        self.rows[r] = None
        self.engine.decoder.release([r])
        self._ended(job, seq, notify=False)
      if not job.cancelled:
        changed[job].append(seq)
    self.metrics.running.set(sum(map(bool, self.rows)))
    for job, seqs in changed.items():
      job.notify(seqs)

  def _extend(self, seq: Sequence, new: list[int]) -> None:
    """Appends a row's new tokens; ends the sequence at a stop token, its limit or a
    stop string, and sets its text (as the OpenAI API returns it: ending before the
    stop) and the tokens behind that text."""
    finish = None
    for t in new:
      seq.sampled.append(t)
      if t in self.engine.stop_ids:
        finish = "stop"
        break
      if len(seq.sampled) >= seq.max_tokens:
        finish = "length"
        break
    stop_token = seq.sampled[-1:] if seq.sampled[-1] in self.engine.stop_ids else []
    ids = seq.sampled[:len(seq.sampled) - len(stop_token)]
    decode = lambda ids: self.engine.text(ids, seq.skip_special_tokens)
    text = decode(ids)
    cut, which = stops_lib.find_stop(text, seq.stop)
    used = None
    if which is not None:
      # Generated: up to the token that completes the stop string (a decode call runs
      # several steps, and the tokens after it were never the completion's).
      used = len(ids)
      while used > 1 and stops_lib.find_stop(decode(ids[:used - 1]), seq.stop)[1] is not None:
        used -= 1
      text, finish, stop_token = text[:cut], "stop", []
      # Keep the tokens up to the one that completes the returned text; the stop string
      # ends within the last few tokens, so search from the end.
      while ids and len(decode(ids[:-1])) >= len(text):
        ids = ids[:-1]
    seq.text, seq.tokens, seq.ended_by_token = text, ids + stop_token, bool(stop_token)
    seq.used = len(seq.tokens) if used is None else used
    if finish:
      seq.streamed = len(text)
    else:  # Neither a stop string's possible start nor an unfinished character.
      stable = text[:len(text) - seq.holdback].rstrip("\ufffd")
      seq.streamed = max(seq.streamed, len(stable))
    # Last: a stream that reads finish_reason, then streamed, then text on the event loop
    # finds the final text, or a settled prefix at least `streamed` long.
    seq.finish_reason = finish

  def _ended(self, job: Job, seq: Sequence, notify: bool = True) -> None:
    """A sequence that sampled its last token: scored if it asked for log-probs, else
    done; the job is notified (by the caller when `notify` is False)."""
    if seq.logprobs is not None and seq.alternatives is None:
      self.scoring.append((job, seq))
    elif notify and not job.cancelled:
      job.notify([seq])

  def _score(self) -> None:
    batch, self.scoring = self.scoring, []
    rows = [list(s.prompt) + s.tokens for _, s in batch]
    for (job, seq), alternatives in zip(batch, self.engine.alternatives(rows)):
      seq.alternatives = alternatives
      self._ended(job, seq)

  def _guarded(self, call, involved: list, decoding: bool) -> bool:
    """Runs an engine call; if it raises, the jobs of `involved` ((job, sequence) pairs)
    fail with the error and lose their rows, the others go on. A call that consumed
    the batch (donated buffers) resets it: every row's job fails then."""
    try:
      call()
      return True
    except Exception as e:  # Each failing request answers 500; the server keeps serving.
      logging.exception("engine call failed")
      self.metrics.failures.inc()
      jobs = {job for job, _ in involved}
      if decoding or self.engine.decoder.slots.live.is_deleted():
        jobs |= {x[0] for x in self.rows if x}
        self.engine.reset()
        self.rows = [None] * len(self.rows)
      for job in jobs:
        self._drop(job)
        job.fail(e)
      return False
