"""A server's start: the port answers at once while the model loads and its programs
compile on a background thread (from the persistent caches when they hold them).

The states, as `GET /health` reports them:

  loading  503 {"status": "loading", "warmup": {"done", "total"}}, Retry-After
  ready    200 {"status": "ready"}: every program is compiled, requests are served
  failed   500 {"status": "failed", "error": "…"}: loading or the warm-up raised

A request that needs the model and comes while it loads waits for it, at most
`wait_s` seconds (then 503 with Retry-After, an answer the openai package retries);
after a failure it gets a 500 naming the error at once. Nothing here imports JAX:
the HTTP side runs before the loader imports it.
"""
import asyncio
import dataclasses
import threading
import time
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # Names for annotations only: importing them would import JAX.
  from transformers import PreTrainedTokenizerBase
  from pedrl.env.chat import ChatFormat
  from pedrl.serve.encoder import Encoder
  from pedrl.serve.scheduler import Scheduler

from absl import logging

from pedrl.serve.openai_types import APIError

LOADING, READY, FAILED = "loading", "ready", "failed"
RETRY_AFTER_S = 5  # What a client told to come back while the model loads waits.


@dataclasses.dataclass
class Served:
  """A loaded model, what the routes serve."""
  backend: "Scheduler | Encoder"  # A decoder's scheduler, or an encoder.
  tokenizer: "PreTrainedTokenizerBase"
  chat: "ChatFormat | None"  # None: no chat template.
  generates: bool  # A decoder (completions, chat); else an encoder (embeddings).
  context: int | None  # Prompt + sampled tokens of a sequence at most (decoders).
  vocab: int


class Startup:
  """The loading state a server's routes read; a loader thread settles it once."""

  def __init__(self, wait_s: float = 30.0) -> None:
    self.wait_s = wait_s
    self.state = LOADING
    self.served: Served | None = None
    self.error: str | None = None
    self.context: int | None = None  # Known once the model's program set is (/v1/models).
    self.warmup: tuple[int, int] | None = None  # (programs done, total).
    self.began = time.monotonic()
    self.ready_s: float | None = None  # Seconds from `began` to ready.
    self._lock = threading.Lock()
    self._waiters = []  # (event loop, future) of requests waiting for the model.

  @classmethod
  def loaded(cls, served: Served) -> "Startup":
    """A start that is over (a server built synchronously)."""
    startup = cls()
    startup.ready(served)
    return startup

  def progress(self, done: int, total: int, what: str) -> None:
    del what
    self.warmup = (done, total)

  def ready(self, served: Served) -> None:
    self.served, self.context = served, served.context
    self._settle(READY)

  def fail(self, error: str) -> None:
    self.error = error
    self._settle(FAILED)

  def _settle(self, state: str) -> None:
    with self._lock:
      self.state, self.ready_s = state, time.monotonic() - self.began
      waiters, self._waiters = self._waiters, []
    for loop, future in waiters:
      try:
        loop.call_soon_threadsafe(lambda f=future: f.done() or f.set_result(None))
      except RuntimeError:  # That loop has closed.
        pass

  def run(self, load: Callable[["Startup"], Served], on_ready: Callable[[], None] | None = None,
          on_failure: Callable[[str], None] | None = None) -> threading.Thread:
    """Runs `load(self)` on a daemon thread; `on_ready()` or `on_failure(error)` after."""
    def body() -> None:
      try:
        served = load(self)
      except Exception as e:  # noqa: BLE001 — reported by /health and every request.
        if not isinstance(e, (OSError, ValueError)):  # Not a checkpoint or setting refused.
          logging.exception("loading the model failed")
        self.fail(f"{type(e).__name__}: {e}")
        if on_failure:
          on_failure(self.error)
        return
      self.ready(served)
      logging.info("ready %.1f s after the port opened", self.ready_s)
      if on_ready:
        on_ready()
    thread = threading.Thread(target=body, name="pedrl-loader", daemon=True)
    thread.start()
    return thread

  async def model(self) -> Served:
    """The loaded model; while it loads, waits up to `wait_s`. Raises the APIError a
    request answers when there is none: 503 + Retry-After, or 500 after a failure."""
    if self.state == LOADING:
      loop = asyncio.get_running_loop()
      future = loop.create_future()
      with self._lock:
        waiting = self.state == LOADING
        if waiting:
          self._waiters.append((loop, future))
      if waiting:
        try:
          await asyncio.wait_for(future, self.wait_s)
        except asyncio.TimeoutError:
          pass
    if self.state == READY:
      return self.served
    if self.state == FAILED:
      raise APIError(500, f"the model failed to load: {self.error}", type="server_error",
                     code="model_load_failed")
    raise APIError(503, f"the model is still loading ({self._done()}); retry later",
                   type="server_error", code="model_loading",
                   headers={"Retry-After": str(RETRY_AFTER_S)})

  def _done(self) -> str:
    if self.warmup is None:
      return "reading the checkpoint"
    return f"warm-up: {self.warmup[0]} of {self.warmup[1]} programs compiled"

  def health(self) -> tuple[int, dict, dict]:
    """(status code, body, headers) of GET /health."""
    if self.state == READY:
      return 200, {"status": READY}, {}
    if self.state == FAILED:
      return 500, {"status": FAILED, "error": self.error}, {}
    body = {"status": LOADING}
    if self.warmup:
      body["warmup"] = {"done": self.warmup[0], "total": self.warmup[1]}
    return 503, body, {"Retry-After": str(RETRY_AFTER_S)}
