"""A server's Prometheus metrics (`GET /metrics`), and the count of programs JAX compiled.

One registry per server (tests run several in one process). The names:

  pedrl_requests_total{path, status}     HTTP requests answered
  pedrl_request_seconds{path}            their latency (histogram)
  pedrl_waiting_sequences                sequences queued for a row
  pedrl_running_sequences                rows decoding
  pedrl_prompt_tokens_total              prompt tokens of admitted sequences
  pedrl_prefix_cached_tokens_total       of those, read from a row's cached prefix
  pedrl_generation_tokens_total          tokens sampled
  pedrl_tokens_per_second                sampled tokens per second of the last engine call
  pedrl_decode_steps_total               decode steps run
  pedrl_compactions_total                KV cache compactions
  pedrl_aborted_sequences_total          sequences dropped because their client left
  pedrl_engine_failures_total            engine calls that raised (their requests got 500)
  pedrl_programs_compiled                programs JAX compiled or loaded in this process
  pedrl_programs_compiled_after_warmup   of those, after the server's warm-up (0 expected)
"""
import threading

import prometheus_client as prom

prom.disable_created_metrics()  # No `_created` twin per counter.

# JAX reports every program it compiles or loads from its persistent cache (a
# process-wide event: counted once, read by every server in the process).
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
_compiled = 0
_lock = threading.Lock()
_listening = False


def _on_event(event: str, duration: float, **kwargs) -> None:
  del duration, kwargs
  global _compiled
  if event == _COMPILE_EVENT:
    with _lock:
      _compiled += 1


def programs_compiled() -> int:
  """Programs JAX has compiled (or loaded) in this process since `listen()`."""
  return _compiled


def listen() -> None:
  """Starts counting JAX's compilations (once per process; the loader calls it before
  the model loads, so the HTTP side can answer before JAX is imported)."""
  global _listening
  with _lock:
    if not _listening:
      import jax
      jax.monitoring.register_event_duration_secs_listener(_on_event)
      _listening = True


class Metrics:
  """The registry and its metrics; the scheduler and the HTTP middleware update them."""

  def __init__(self) -> None:
    self.registry = r = prom.CollectorRegistry()
    self.requests = prom.Counter("pedrl_requests", "HTTP requests answered",
                                 ["path", "status"], registry=r)
    self.latency = prom.Histogram("pedrl_request_seconds", "HTTP request latency", ["path"],
                                  registry=r, buckets=(.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30,
                                                       60, 120))
    self.waiting = prom.Gauge("pedrl_waiting_sequences", "sequences queued for a row",
                              registry=r)
    self.running = prom.Gauge("pedrl_running_sequences", "rows decoding", registry=r)
    self.prompt_tokens = prom.Counter("pedrl_prompt_tokens", "prompt tokens admitted",
                                      registry=r)
    self.cached_tokens = prom.Counter("pedrl_prefix_cached_tokens",
                                      "prompt tokens read from a row's cached prefix", registry=r)
    self.generated = prom.Counter("pedrl_generation_tokens", "tokens sampled", registry=r)
    self.rate = prom.Gauge("pedrl_tokens_per_second",
                           "sampled tokens per second of the last engine call", registry=r)
    self.steps = prom.Counter("pedrl_decode_steps", "decode steps run", registry=r)
    self.compactions = prom.Counter("pedrl_compactions", "KV cache compactions", registry=r)
    self.aborted = prom.Counter("pedrl_aborted_sequences",
                                "sequences dropped because their client left", registry=r)
    self.failures = prom.Counter("pedrl_engine_failures", "engine calls that raised",
                                 registry=r)
    prom.Gauge("pedrl_programs_compiled", "programs JAX compiled or loaded in this process",
               registry=r).set_function(programs_compiled)
    self.warm_at = None  # programs_compiled() when the warm-up ended.
    prom.Gauge("pedrl_programs_compiled_after_warmup",
               "programs compiled after the server's warm-up", registry=r).set_function(
                   self.compiled_after_warmup)

  def compiled_after_warmup(self) -> int:
    """0 until the warm-up ends (its own compiles are not after it)."""
    return 0 if self.warm_at is None else programs_compiled() - self.warm_at

  def text(self) -> bytes:
    return prom.generate_latest(self.registry)
