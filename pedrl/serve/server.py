"""Loading a server's model (a checkpoint directory or a training run's tutor): its
engine, scheduler and warm-up, and the API over them. `python -m pedrl.serve` runs it;
`start` and `serve` (from `sockets`) run an app."""
import dataclasses
import json
import os
import time
from collections.abc import Callable
from typing import Any

from absl import logging
import fastapi
import jax

from pedrl import models, runs
from pedrl.engine import slots as slots_lib
from pedrl.env import chat as chat_lib
try:
  from pedrl.serve import app as app_lib
except ImportError as e:  # FastAPI is an extra.
  raise ImportError(f"pedrl.serve needs {e.name}: pip install 'pedrl[serve]'") from e
from pedrl.serve import middleware, prometheus
from pedrl.serve.encoder import Encoder
from pedrl.serve.prometheus import Metrics
from pedrl.serve.scheduler import Engine, Scheduler
from pedrl.serve.sockets import serve, start  # noqa: F401 (run an app; also from here)
from pedrl.serve.startup import Served, Startup
from pedrl.tokenizer import load_tokenizer

ENCODER_TYPES = ("bert", "xlm-roberta")
DEFAULT_MAX_LEN = 4096  # A 32k context's cache for 32 rows would not fit a GPU's memory.


@dataclasses.dataclass
class Options:
  """How a server runs its model (the flags of `python -m pedrl.serve`)."""
  max_num_seqs: int = 32  # Rows decoded at once.
  # Prompt + sampled tokens per sequence; default: the model's context, at most
  # DEFAULT_MAX_LEN (every row's cache holds twice this many tokens).
  max_model_len: int | None = None
  decode_steps: int = 8  # Decode steps between two looks at the queue and the clients.
  max_queue: int = 256  # Sequences waiting for a row; more: 503 + Retry-After.
  prefix_caching: bool = True  # Rows reuse a cached prompt opening.
  warmup: bool = True  # Compile every program before serving.


def is_encoder(model_dir: str) -> bool:
  with open(os.path.join(model_dir, "config.json")) as f:
    return json.load(f).get("model_type") in ENCODER_TYPES


def load(model_dir: str | None = None, workdir: str | None = None, step: int | None = None,
         dtype: str | None = None, scan_layers: bool = False, options: Options | None = None,
         progress: Callable[[int, int, str], None] | None = None, metrics: Metrics | None = None,
         startup: Startup | None = None) -> Served:
  """A checkpoint directory's model or a training run's tutor, its engine and scheduler
  (or encoder), warmed up: every program compiled or read from the persistent caches.
  `progress(done, total, what)` follows the warm-up; `startup` learns the context and
  the warm-up's progress as they come."""
  options, metrics = options or Options(), metrics or Metrics()
  prometheus.listen()
  start = time.perf_counter()
  runtime = {"dtype": dtype} if dtype else {}

  def tick(done, total, what) -> None:
    if startup:
      startup.progress(done, total, what)
    if progress:
      progress(done, total, what)

  if model_dir and is_encoder(model_dir):
    backend = Encoder(model_dir)
    served = Served(backend, backend.tokenizer, None, generates=False, context=None,
                    vocab=backend.embedder.cfg.vocab_size)
    if options.warmup:
      backend.warmup(tick)
  else:
    if workdir:
      tutor = runs.trained_tutor(workdir, step, scan_layers, **runtime)
      model_dir, model, params = tutor.base, models.build_model(tutor.cfg), tutor.params
      logging.info("serving %s step %d (base %s)", workdir, tutor.step, model_dir)
    else:
      _, model, params = models.load(model_dir, scan_layers=scan_layers, **runtime)
    tokenizer = load_tokenizer(model_dir)
    chat = (chat_lib.ChatFormat(tokenizer) if getattr(tokenizer, "chat_template", None)
            else None)
    logging.info("weights and tokenizer read in %.1f s", time.perf_counter() - start)
    context = model.cfg.max_position_embeddings
    if options.max_model_len and options.max_model_len > context:
      raise ValueError(f"--max_model_len={options.max_model_len} exceeds the model's context "
                       f"of {context} tokens")
    programs = slots_lib.ProgramSet(rows=options.max_num_seqs,
                                    max_len=options.max_model_len or min(context, DEFAULT_MAX_LEN),
                                    steps=options.decode_steps)
    if startup:
      startup.context = programs.max_len
    engine = Engine(model, params, tokenizer, programs)
    cache = sum(x.nbytes for x in jax.tree.leaves(engine.decoder.slots.cache))
    logging.info("KV cache: %d rows x %d slots (%.2f GiB); sequences of up to %d tokens",
                 programs.rows, programs.slots, cache / 2**30, programs.max_len)
    if options.warmup:
      seconds = engine.warmup(tick)
      logging.info("warm-up: %d programs in %.1f s", programs.count + len(engine.score_widths),
                   seconds)
    backend = Scheduler(engine, options.max_queue, options.prefix_caching, metrics)
    served = Served(backend, tokenizer, chat, generates=True, context=engine.context,
                    vocab=model.cfg.vocab_size)
  metrics.warm_at = prometheus.programs_compiled()
  return served


def build(model_dir: str | None = None, workdir: str | None = None, step: int | None = None,
          dtype: str | None = None, scan_layers: bool = False, options: Options | None = None,
          api_key_env: str | None = None, progress: Callable[[int, int, str], None] | None = None,
          **settings: Any) -> tuple[fastapi.FastAPI, Scheduler | Encoder]:
  """(ASGI app, backend) for a checkpoint directory or a training run's tutor, loaded and
  warmed up before it returns (tests, benchmarks, notebooks; `python -m pedrl.serve`
  loads in the background instead, `startup`). The backend is a Scheduler (a decoder)
  or an Encoder (/v1/embeddings only); `settings` are app.ServeSettings fields;
  `progress(done, total, what)` follows the warm-up."""
  settings["api_key"] = middleware.api_key(api_key_env)
  settings.setdefault("served_name", os.path.basename(os.path.normpath(workdir or model_dir)))
  metrics = Metrics()
  served = load(model_dir, workdir, step, dtype, scan_layers, options, progress, metrics)
  app = app_lib.make_app(Startup.loaded(served), app_lib.ServeSettings(**settings), metrics)
  return app, served.backend
