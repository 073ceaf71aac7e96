r"""pedrl's OpenAI-compatible server: concurrent clients against one-at-a-time, and
transformers' `generate` on the same model and requests, one process.

  python -m pedrl.bench.serve                       # 32 requests, ~26M random Qwen2, CPU
  python -m pedrl.bench.serve --requests=8 --size=tiny

A random Qwen2 model (bench.rollout's, fp32, its end-of-sequence row zeroed so
that no row stops early) is served by `pedrl.serve` on a local port. The same
--requests completions (random --prompt_tokens-token prompts, --new_tokens each,
temperature 1, top-k 50, one seed per request) are sent three ways:

- pedrl_concurrent: all at once from as many client threads (the server gathers
  them into a few engine calls);
- pedrl_sequential: one after another;
- transformers: `generate` per request, one after another, on the same weights.

Each way runs once untimed (compiling), then --repeats times; the best is
reported. The last line is `serve_batching_speedup=`: concurrent over
sequential tokens per second.
"""
import concurrent.futures
import logging
import os
import tempfile
import time

from absl import flags
import numpy as np

from pedrl import cli
from pedrl.bench import rollout as bench_rollout  # Also defines --size and --repeats.

FLAGS = flags.FLAGS
flags.DEFINE_integer("requests", 32, "Completions per measurement.")
flags.DEFINE_integer("prompt_tokens", 64, "Tokens per prompt.")
flags.DEFINE_integer("new_tokens", 64, "Tokens sampled per request.")
flags.DEFINE_bool("transformers", True, "Also time transformers' generate.")


def serve(path: str):
  """(base URL, batcher, stop) of a pedrl server for `path` on a free local port."""
  from pedrl.serve import server
  api, batcher = server.build(path, served_name="bench", window_s=0.02, max_rows=FLAGS.requests)
  url, stop = server.start(api)
  return url, batcher, stop


def main(argv):
  del argv
  for name in ("httpx", "httpx2"):  # One INFO line per request otherwise.
    logging.getLogger(name).setLevel(logging.WARNING)
  import openai
  import torch
  import transformers
  rng = np.random.default_rng(0)
  with tempfile.TemporaryDirectory() as tmp:
    paths, n_params = bench_rollout.save_models(tmp, bench_rollout.SIZES[FLAGS.size])
    path = paths[bench_rollout.TUTOR]
    prompts = rng.integers(10, 800, (FLAGS.requests, FLAGS.prompt_tokens)).tolist()
    url, batcher, stop = serve(path)
    client = openai.OpenAI(base_url=url, api_key="bench", max_retries=0, timeout=3600)

    def ask(i):
      r = client.completions.create(model="bench", prompt=prompts[i], max_tokens=FLAGS.new_tokens,
                                    temperature=1.0, extra_body={"top_k": 50}, seed=i)
      return r.usage.completion_tokens

    def concurrent_run():
      with concurrent.futures.ThreadPoolExecutor(FLAGS.requests) as pool:
        return sum(pool.map(ask, range(FLAGS.requests)))

    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()

    def transformers_run():
      cfg = transformers.GenerationConfig(do_sample=True, top_k=50, temperature=1.0,
                                          max_new_tokens=FLAGS.new_tokens, eos_token_id=None,
                                          pad_token_id=0)
      total = 0
      with torch.no_grad():
        for p in prompts:
          ids = torch.tensor([p])
          total += hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                               generation_config=cfg).shape[1] - len(p)
      return total

    ways = {"pedrl_concurrent": concurrent_run,
            "pedrl_sequential": lambda: sum(map(ask, range(FLAGS.requests)))}
    if FLAGS.transformers:
      ways["transformers"] = transformers_run
    rows = {}
    try:
      for name, run in ways.items():
        calls = batcher.engine.calls
        start = time.perf_counter()
        run()
        warmup = time.perf_counter() - start
        best, tokens = float("inf"), 0
        for _ in range(FLAGS.repeats):
          calls = batcher.engine.calls
          start = time.perf_counter()
          tokens = run()
          best = min(best, time.perf_counter() - start)
        rows[name] = (tokens, best, warmup,
                      batcher.engine.calls - calls if name.startswith("pedrl") else None)
    finally:
      stop()
  print(f"model: random Qwen2, {n_params / 1e6:.1f}M parameters, fp32, CPU "
        f"({os.cpu_count()} cores); {FLAGS.requests} requests x {FLAGS.prompt_tokens} prompt "
        f"+ {FLAGS.new_tokens} new tokens")
  print(f"{'way':18s} {'req/s':>7s} {'tok/s':>8s} {'seconds':>8s} {'warmup_s':>8s} "
        f"{'engine_calls':>12s}")
  for name, (tokens, seconds, warmup, calls) in rows.items():
    print(f"{name:18s} {FLAGS.requests / seconds:7.2f} {tokens / seconds:8.1f} {seconds:8.2f} "
          f"{warmup:8.2f} {'' if calls is None else calls:>12}")
  rate = lambda name: rows[name][0] / rows[name][1]
  if "transformers" in rows:
    print(f"serve_speedup_vs_transformers={rate('pedrl_concurrent') / rate('transformers'):.2f}")
  print(f"serve_batching_speedup={rate('pedrl_concurrent') / rate('pedrl_sequential'):.2f}")


if __name__ == "__main__":
  cli.run(main)
