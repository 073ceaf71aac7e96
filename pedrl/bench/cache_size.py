r"""Does a decode step cost follow the filled slots, not the allocated ones?

  python -m pedrl.bench.cache_size                          # bench.rollout's 26M model, CPU
  python -m pedrl.bench.cache_size --layers=28 --hidden=3584 --heads=28 --kv_heads=4 \
      --intermediate=18944 --vocab=152064 --dtype=bfloat16  # Qwen2.5-7B shape, for a GPU

One random Qwen2-shaped model; per allocated cache size (--slots), the same
work: prefill --filled tokens per row into an empty cache of that size, then
decode --new_tokens tokens (one `Sampler.generate` call, whose window is the
bucket of what it can reach). Each row of the table is the best of --repeats:
prefill seconds (the extend call alone), decode ms per step (the 1-token call's time subtracted, so the
extend of the last prompt token and the host's work drop out), and how many
cache-sized `copy` ops the compiled decode loop's body holds. The last line is
`max_step_ratio_vs_smallest=`: the slowest step over the step at the smallest
size (1.0: allocation costs nothing).
"""
import time

from absl import flags
import jax
import numpy as np

from pedrl import cli
from pedrl.bench import hlo, timing
from pedrl.engine import Sampler, SamplingParams, sequence_keys
from pedrl.models.architectures import decoder
from pedrl.models.hf_checkpoint import build_model, random_params

FLAGS = flags.FLAGS
flags.DEFINE_list("slots", ["560", "1024", "2048", "4096"], "Allocated cache slots per row.")
flags.DEFINE_integer("filled", 512, "Prompt tokens per row before decoding.")
flags.DEFINE_integer("new_tokens", 64, "Tokens decoded per row.")
flags.DEFINE_integer("batch", 8, "Rows.")
flags.DEFINE_integer("layers", 8, "Decoder layers.")
flags.DEFINE_integer("hidden", 512, "Hidden size.")
flags.DEFINE_integer("heads", 8, "Query heads.")
flags.DEFINE_integer("kv_heads", 4, "Key/value heads.")
flags.DEFINE_integer("intermediate", 1536, "MLP size.")
flags.DEFINE_integer("vocab", 1024, "Vocabulary size.")
flags.DEFINE_string("dtype", "float32", "Parameter and cache dtype.")
timing.define_scan_layers(True)
timing.define_repeats("size")


def main(argv: list[str]) -> None:
  del argv
  shape = decoder("qwen2", FLAGS.vocab, FLAGS.hidden, FLAGS.layers, FLAGS.heads,
                  FLAGS.kv_heads, FLAGS.intermediate, 32768)
  cfg = shape.config(dtype=FLAGS.dtype, scan_layers=FLAGS.scan_layers)
  model, params = build_model(cfg), random_params(cfg)
  sampler = Sampler(model)
  rng = np.random.default_rng(0)
  prompts = rng.integers(1, cfg.vocab_size, (FLAGS.batch, FLAGS.filled + 1)).tolist()
  keys = sequence_keys(0, np.arange(FLAGS.batch))
  one_layer = FLAGS.batch * cfg.num_kv_heads * cfg.head_dim  # Elements per slot of one layer.

  def prefilled(slots, timed: bool = False):
    cache = jax.block_until_ready(sampler.new_cache(FLAGS.batch, slots))
    t = time.perf_counter()
    cache = jax.block_until_ready(sampler.extend(params, cache, [p[:-1] for p in prompts]))
    return (cache, time.perf_counter() - t) if timed else cache

  def decode(slots, n):
    cache = prefilled(slots)
    t = time.perf_counter()
    gen, _ = sampler.generate(params, [p[-1:] for p in prompts], keys, SamplingParams(n), cache)
    assert gen.lengths.min() == n
    return time.perf_counter() - t

  print(f"device: {jax.local_devices()[0].device_kind}; {cfg.num_layers} layers, hidden "
        f"{cfg.hidden_size}, {cfg.num_kv_heads} KV heads x {cfg.head_dim}, {cfg.dtype}; batch "
        f"{FLAGS.batch}, {FLAGS.filled} slots filled, {FLAGS.new_tokens} decoded; best of "
        f"{FLAGS.repeats}")
  print(f"{'slots':>7}{'window':>8}{'prefill_s':>11}{'step_ms':>9}{'loop copies':>13}")
  steps = []
  for slots in map(int, FLAGS.slots):
    decode(slots, FLAGS.new_tokens), decode(slots, 1)  # Compile both programs.
    prefill = step = float("inf")
    for _ in range(FLAGS.repeats):
      prefill = min(prefill, prefilled(slots, timed=True)[1])
      step = min(step, (decode(slots, FLAGS.new_tokens) - decode(slots, 1))
                 / (FLAGS.new_tokens - 1))
    text, window = hlo.decode_hlo(sampler, params, prefilled(slots), [p[-1:] for p in prompts],
                                  SamplingParams(FLAGS.new_tokens))
    copies = hlo.loop_copies(text, one_layer * min(slots, window))
    steps.append(step)
    print(f"{slots:>7}{window:>8}{prefill:>11.3f}{step * 1e3:>9.2f}{len(copies):>13}")
  print(f"max_step_ratio_vs_smallest={max(steps) / steps[0]:.2f}")


if __name__ == "__main__":
  cli.run(main)
