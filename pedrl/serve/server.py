"""Building a server: a model (a checkpoint directory or a training run's tutor), its
engine and batcher, and the API over them. `python -m pedrl.serve` runs it."""
import os
import socket
import threading
import time

from absl import logging

from pedrl import models
from pedrl.env import chat as chat_lib
from pedrl.rl import checkpoint
try:
  from pedrl.serve import app as app_lib
except ImportError as e:  # FastAPI is an extra.
  raise ImportError(f"pedrl.serve needs {e.name}: pip install 'pedrl[serve]'") from e
from pedrl.serve.batcher import Batcher, Engine
from pedrl.tokenizer import load_tokenizer


def build(model_dir=None, workdir=None, step=None, dtype=None, scan_layers=False, **settings):
  """(FastAPI app, Batcher) for a checkpoint directory or a training run's tutor."""
  runtime = {"dtype": dtype} if dtype else {}
  batching = {k: settings.pop(k) for k in ("max_rows", "window_s", "max_queue") if k in settings}
  if workdir:
    model_dir, cfg, params, step = checkpoint.trained_tutor(workdir, step, scan_layers, **runtime)
    model = models.build_model(cfg)
    logging.info("serving %s step %d (base %s)", workdir, step, model_dir)
  else:
    _, model, params = models.load(model_dir, scan_layers=scan_layers, **runtime)
  tokenizer = load_tokenizer(model_dir)
  chat = (chat_lib.ChatFormat(tokenizer) if getattr(tokenizer, "chat_template", None) else None)
  settings.setdefault("served_name", os.path.basename(os.path.normpath(workdir or model_dir)))
  batcher = Batcher(Engine(model, params, tokenizer), **batching)
  return app_lib.make_app(batcher, tokenizer, app_lib.ServeSettings(**settings), chat), batcher


def start(api, host: str = "127.0.0.1", port: int = 0) -> tuple[str, object]:
  """Serves `api` from a background thread (tests, benchmarks, notebooks); port 0 picks
  a free one. Returns (base URL ending in /v1, stop())."""
  import uvicorn
  if not port:
    with socket.socket() as s:
      s.bind((host, 0))
      port = s.getsockname()[1]
  server = uvicorn.Server(uvicorn.Config(api, host=host, port=port, log_level="error"))
  thread = threading.Thread(target=server.run, daemon=True)
  thread.start()
  while not server.started:
    if not thread.is_alive():
      raise RuntimeError(f"the server did not start on {host}:{port}")
    time.sleep(0.02)

  def stop():
    server.should_exit = True
    thread.join(10)
  return f"http://{host}:{port}/v1", stop
