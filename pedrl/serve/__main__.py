r"""Serves one model over the OpenAI API.

  python -m pedrl.serve --model=/models/Qwen2.5-14B-Instruct --served_name=qwen-judge
  python -m pedrl.serve --workdir=/runs/ped --step=150 --port=8001   # a training run's tutor

Bound to 127.0.0.1 unless --host says otherwise; --api_key_env=VAR asks every
/v1 request for `Authorization: Bearer $VAR`.
"""
from absl import app, flags

from pedrl import cli
from pedrl.serve import server

flags.DEFINE_string("model", None, "A Hugging Face checkpoint directory.")
flags.DEFINE_string("workdir", None, "A training run's workdir (its tutor is served).")
flags.DEFINE_integer("step", None, "With --workdir: the checkpoint step (default: the latest).")
flags.DEFINE_string("host", "127.0.0.1", "Address to bind.")
flags.DEFINE_integer("port", 8000, "Port.")
flags.DEFINE_string("served_name", None, "The model's id in the API (default: the directory name).")
flags.DEFINE_string("api_key_env", None, "Environment variable holding the API key to require.")
flags.DEFINE_integer("max_batch_rows", 32, "Sampled rows gathered into one engine call.")
flags.DEFINE_float("batch_window_ms", 10.0, "How long the first request waits for others.")
flags.DEFINE_integer("max_queue", 256, "Requests waiting at most; more get 503 + Retry-After.")
flags.DEFINE_integer("max_tokens", 1024, "A chat request's token limit when it gives none.")
flags.DEFINE_enum("reasoning", "keep", ["keep", "split"],
                  "<think> content left in the reply, or split into reasoning_content.")
flags.DEFINE_string("dtype", None, "Compute dtype (e.g. bfloat16); default: the checkpoint's.")
flags.DEFINE_bool("scan_layers", False, "Scanned layers (faster compiles, slower decoding on CPU).")


def main(argv):
  del argv
  import uvicorn
  f = flags.FLAGS
  if bool(f.model) == bool(f.workdir):
    raise app.UsageError("give --model=DIR or --workdir=RUN (not both)")
  settings = dict(api_key_env=f.api_key_env, max_tokens=f.max_tokens, reasoning=f.reasoning,
                  max_rows=f.max_batch_rows, window_s=f.batch_window_ms / 1000,
                  max_queue=f.max_queue)
  if f.served_name:
    settings["served_name"] = f.served_name
  api, _ = server.build(f.model, f.workdir, f.step, f.dtype, f.scan_layers, **settings)
  uvicorn.run(api, host=f.host, port=f.port, log_level="warning")


if __name__ == "__main__":
  cli.run(main)
