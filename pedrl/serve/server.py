"""Building a server: a model (a checkpoint directory or a training run's tutor), its
engine, scheduler and warm-up, and the API over them; binding and running it.
`python -m pedrl.serve` runs it."""
import dataclasses
import json
import os
import socket
import threading
import time

from absl import logging
import jax

from pedrl import models, runs
from pedrl.engine import slots as slots_lib
from pedrl.env import chat as chat_lib
try:
  from pedrl.serve import app as app_lib
except ImportError as e:  # FastAPI is an extra.
  raise ImportError(f"pedrl.serve needs {e.name}: pip install 'pedrl[serve]'") from e
from pedrl.serve import middleware
from pedrl.serve.encoder import Encoder
from pedrl.serve.metrics import Metrics, programs_compiled
from pedrl.serve.scheduler import Engine, Scheduler
from pedrl.serve.sockets import bind, url_of
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


def build(model_dir=None, workdir=None, step=None, dtype=None, scan_layers=False,
          options: Options | None = None, api_key_env: str | None = None, progress=None,
          **settings):
  """(ASGI app, backend) for a checkpoint directory or a training run's tutor. The
  backend is a Scheduler (a decoder) or an Encoder (/v1/embeddings only); `settings`
  are app.ServeSettings fields; `progress(done, total, what)` follows the warm-up."""
  options = options or Options()
  settings["api_key"] = middleware.api_key(api_key_env)
  runtime = {"dtype": dtype} if dtype else {}
  settings.setdefault("served_name", os.path.basename(os.path.normpath(workdir or model_dir)))
  metrics = Metrics()
  if model_dir and is_encoder(model_dir):
    backend = Encoder(model_dir)
    tokenizer, chat = backend.tokenizer, None
    if options.warmup:
      backend.warmup(progress)
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
    context = model.cfg.max_position_embeddings
    if options.max_model_len and options.max_model_len > context:
      raise ValueError(f"--max_model_len={options.max_model_len} exceeds the model's context "
                       f"of {context} tokens")
    programs = slots_lib.ProgramSet(rows=options.max_num_seqs,
                                    max_len=options.max_model_len or min(context, DEFAULT_MAX_LEN),
                                    steps=options.decode_steps)
    engine = Engine(model, params, tokenizer, programs)
    cache = sum(x.nbytes for x in jax.tree.leaves(engine.decoder.slots.cache))
    logging.info("KV cache: %d rows x %d slots (%.2f GiB); sequences of up to %d tokens",
                 programs.rows, programs.slots, cache / 2**30, programs.max_len)
    if options.warmup:
      seconds = engine.warmup(progress)
      logging.info("warm-up: %d programs in %.1f s", programs.count + len(engine.score_widths),
                   seconds)
    backend = Scheduler(engine, options.max_queue, options.prefix_caching, metrics)
  metrics.warm_at = programs_compiled()
  app = app_lib.make_app(backend, tokenizer, app_lib.ServeSettings(**settings), chat, metrics)
  return app, backend


def _server(api, sock, on_ready=None, log_level: str = "error"):
  import uvicorn

  class Server(uvicorn.Server):
    async def startup(self, sockets=None):
      await super().startup(sockets)
      if self.started and on_ready:
        on_ready()

  return Server(uvicorn.Config(api, log_level=log_level, timeout_graceful_shutdown=5))


def serve(api, sock: socket.socket, on_ready=None):
  """Serves `api` on `sock` in this thread until Ctrl-C or SIGTERM; `on_ready()` is
  called once it accepts requests."""
  _server(api, sock, on_ready, log_level="warning").run(sockets=[sock])


def start(api, host: str = "127.0.0.1", port: int = 0) -> tuple[str, object]:
  """Serves `api` from a background thread (tests, benchmarks, notebooks); port 0 picks
  a free one. Returns (base URL ending in /v1, stop())."""
  sock = bind(host, port)
  server = _server(api, sock)
  thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
  thread.start()
  while not server.started:
    if not thread.is_alive():
      raise RuntimeError(f"the server did not start on {host}:{port}")
    time.sleep(0.02)

  def stop():
    server.should_exit = True
    thread.join(10)
    sock.close()
  return url_of(sock), stop
