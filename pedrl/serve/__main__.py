r"""Serves one model over the OpenAI API.

  python -m pedrl.serve --model=/models/Qwen2.5-14B-Instruct --served_name=qwen-judge
  python -m pedrl.serve --workdir=/runs/ped --step=150 --port=8001   # a training run's tutor
  python -m pedrl.serve --model=/models/bge-m3                      # an encoder: /v1/embeddings

Bound to 127.0.0.1 unless --host says otherwise; --api_key_env=VAR asks every
request but /health for `Authorization: Bearer $VAR`. The flags, the model or run
directory, the key variable and the port are checked before JAX is imported (a
mistake is one `error: …` line within a second). The port then answers at once:
`/health` says `loading` while the model loads and every program it can run compiles
in the background, then `ready`, when stdout gets `serving NAME at
http://HOST:PORT/v1`; a failed load is an `error: …` line on stderr and a `failed`
/health, and the server stays up to say so.
"""
import json
import os
import sys

from absl import flags

from pedrl import cli
from pedrl.serve import middleware, sockets

flags.DEFINE_string("model", None, "A Hugging Face checkpoint directory.")
flags.DEFINE_string("workdir", None, "A training run's workdir (its tutor is served).")
flags.DEFINE_integer("step", None, "With --workdir: the checkpoint step (default: the latest).")
flags.DEFINE_string("host", "127.0.0.1", "Address to bind.")
flags.DEFINE_integer("port", 8000, "Port.", lower_bound=0, upper_bound=65535)
flags.DEFINE_string("served_name", None, "The model's id in the API (default: the directory name).")
flags.DEFINE_string("api_key_env", None, "Environment variable holding the API key to require.")
flags.DEFINE_integer("max_num_seqs", 32, "Sequences decoded at once (rows of the batch).",
                     lower_bound=1)
flags.DEFINE_integer("max_model_len", None, "Prompt + sampled tokens of a sequence at most "
                     "(default: the model's context, at most 4096); the KV cache holds 2x "
                     "this per row.", lower_bound=2)
flags.DEFINE_integer("decode_steps", 8, "Decode steps per engine call: how often new requests "
                     "join and finished or abandoned rows leave.", lower_bound=1)
flags.DEFINE_integer("max_queue", 256, "Sequences waiting for a row at most; more get 503 + "
                     "Retry-After.", lower_bound=1)
flags.DEFINE_bool("prefix_caching", True, "Reuse a row's cached prompt opening (a shared "
                  "system prompt is computed once per row).")
flags.DEFINE_bool("warmup", True, "Compile every program before serving (off: each compiles "
                  "on first use, stalling that request).")
flags.DEFINE_float("loading_wait_s", 30.0, "A request that comes while the model loads waits "
                   "this long for it, then gets 503 + Retry-After.", lower_bound=0.0)
flags.DEFINE_integer("max_tokens", 1024, "A chat request's token limit when it gives none.",
                     lower_bound=1)
flags.DEFINE_float("max_body_mb", 8.0, "Largest request body, in MiB (larger: 413).",
                   lower_bound=0.001)
flags.DEFINE_bool("access_log", True, "One log line per request.")
flags.DEFINE_enum("reasoning", "keep", ["keep", "split"],
                  "<think> content left in the reply, or split into reasoning_content.")
flags.DEFINE_string("dtype", None, "Compute dtype (e.g. bfloat16); default: the checkpoint's.")
flags.DEFINE_bool("scan_layers", False, "Scanned layers (faster compiles, slower decoding on CPU).")


def _model_problem(model: str | None, workdir: str | None) -> str | None:
  """What is wrong with --model / --workdir, read from disk without JAX."""
  if bool(model) == bool(workdir):
    return "give --model=DIR or --workdir=RUN (one of them)"
  if model:
    config = os.path.join(model, "config.json")
    if not os.path.isdir(model):
      return f"--model={model} is not a directory"
    if not os.path.isfile(config):
      return f"--model={model} has no config.json (not a Hugging Face checkpoint directory)"
    try:
      with open(config) as f:
        json.load(f)
    except (OSError, ValueError) as e:
      return f"--model={model}: its config.json does not parse ({e})"
    return None
  if not os.path.isdir(workdir):
    return f"--workdir={workdir} is not a directory"
  if not os.path.isfile(os.path.join(workdir, "config.json")):
    return f"--workdir={workdir} has no config.json (not a training run's workdir)"
  if not os.path.isdir(os.path.join(workdir, "checkpoints")):
    return f"--workdir={workdir} has no checkpoints/ (the run saved none yet)"
  return None


def main(argv: list[str]) -> None:
  del argv
  f = flags.FLAGS
  # Found as config paths are (the current directory, then pedrl's repository).
  f.model, f.workdir = cli.input_path("model", f.model), cli.input_path("workdir", f.workdir)
  try:
    problem = _model_problem(f.model, f.workdir)
    if problem:
      raise ValueError(problem)
    key = middleware.api_key(f.api_key_env)
    sock = sockets.bind(f.host, f.port)
  except (OSError, ValueError) as e:
    cli.fail(str(e))
  # The HTTP side first, without JAX: the port answers (/health: loading) at once.
  try:
    from pedrl.serve import app as app_lib, prometheus, startup as startup_lib
  except ImportError as e:  # FastAPI, uvicorn, prometheus_client are an extra.
    sock.close()
    cli.fail(f"pedrl.serve needs {e.name}: pip install 'pedrl[serve]'")
  name = f.served_name or os.path.basename(os.path.normpath(f.workdir or f.model))
  settings = app_lib.ServeSettings(served_name=name, api_key=key, max_tokens=f.max_tokens,
                                   reasoning=f.reasoning, max_body=int(f.max_body_mb * (1 << 20)),
                                   access_log=f.access_log)
  metrics, startup = prometheus.Metrics(), startup_lib.Startup(wait_s=f.loading_wait_s)
  api = app_lib.make_app(startup, settings, metrics)
  url = sockets.url_of(sock)

  def load(startup):
    from pedrl.serve import server  # JAX from here on.
    options = server.Options(max_num_seqs=f.max_num_seqs, max_model_len=f.max_model_len,
                             decode_steps=f.decode_steps, max_queue=f.max_queue,
                             prefix_caching=f.prefix_caching, warmup=f.warmup)
    return server.load(f.model, f.workdir, f.step, f.dtype, f.scan_layers, options,
                       _progress_bar(), metrics, startup)

  def started() -> None:
    print(f"answering at {url} while {name} loads (GET /health says when it is ready)",
          file=sys.stderr, flush=True)
    startup.run(load, on_ready=lambda: print(f"serving {name} at {url}", flush=True),
                on_failure=lambda error: print(f"error: the model failed to load: {error} "
                                               "(the server stays up to say so on /health)",
                                               file=sys.stderr, flush=True))

  sockets.serve(api, sock, on_started=started)


def _progress_bar():
  """progress(done, total, what) drawing the warm-up's bar on stderr."""
  from tqdm import tqdm
  bar = None

  def progress(done, total, what) -> None:
    nonlocal bar
    bar = bar or tqdm(total=total, desc="compiling the server's programs", unit="program")
    bar.set_postfix_str(what)
    bar.update(done - bar.n)
    if done == total:
      bar.close()
  return progress


if __name__ == "__main__":
  cli.run(main)
