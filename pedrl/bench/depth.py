r"""Compile seconds against depth: the sampling and prefill programs, scanned and unrolled.

  python -m pedrl.bench.depth                          # SmolLM2-135M's shape, 2, 8, 30 layers
  python -m pedrl.bench.depth --model=PATH --layers=2,16,32   # a checkpoint's shape

Random weights of a model's shape (SmolLM2-135M-Instruct's by default: hidden 576, 9
heads / 3 KV heads, MLP 1536, vocabulary 49,152, tied embeddings; --model reads a
checkpoint's config.json instead) in float32, its stack cut to each of --layers. For
each depth and layout, jax's in-memory caches are cleared and no persistent cache is
used, then the prefill program (`Sampler.extend`: --rows prompts of --prompt tokens in
a --slots cache) and the sampling program (`Sampler.generate`: the last token of each
and --new_tokens more, top-k 50) are made by running them once; the table gives the
seconds jax spent tracing, lowering and compiling each. With scanned layers
(`scan_layers=True`) one layer body is compiled whatever the depth; unrolled, each
layer is its own copy in the program. The last lines are
`compile_growth_scanned=` and `compile_growth_unrolled=`: the sampling program's
compile seconds at the deepest over the shallowest depth.
"""
import time

from absl import flags
import jax
import numpy as np

from pedrl import cli
from pedrl.bench import compiles
from pedrl.engine import Sampler, SamplingParams, programs, sequence_keys
from pedrl.models import config as config_lib
from pedrl.models.config import ModelConfig
from pedrl.models.hf_checkpoint import build_model, random_params

flags.DEFINE_list("layers", ["2", "8", "30"], "Depths to compile at.")
flags.DEFINE_string("model", None, "A checkpoint directory whose shape to use (its config.json).")
flags.DEFINE_integer("rows", 4, "Prompts in the batch.")
flags.DEFINE_integer("prompt", 200, "Prompt tokens.")
flags.DEFINE_integer("new_tokens", 48, "Tokens to sample.")
flags.DEFINE_integer("slots", 512, "KV cache slots.")
FLAGS = flags.FLAGS

# SmolLM2-135M-Instruct's config.json (Llama architecture).
SMOLLM2 = ModelConfig("llama", "causal_lm", 49152, 576, 30, 9, 3, 64, 1536, 1e-5, 8192,
                      rope_theta=100000.0, tie_embeddings=True, pad_token_id=2)


def shape() -> ModelConfig:
  if FLAGS.model:
    return config_lib.from_hf(FLAGS.model)
  return SMOLLM2


def made(block: compiles.Programs) -> tuple[float, float, float]:
  """Seconds tracing, lowering and compiling what `block()` runs."""
  with compiles.compilations() as c:
    block()
  return c.traced, c.lowered, sum(c.seconds)


def measure(cfg: ModelConfig) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
  """(prefill, sampling) seconds (trace, lower, compile) of a fresh process's first calls."""
  jax.clear_caches()
  sampler = Sampler(build_model(cfg))
  params = random_params(cfg)
  rng = np.random.default_rng(0)
  rows = rng.integers(3, min(cfg.vocab_size, 32000), (FLAGS.rows, FLAGS.prompt)).tolist()
  cache = None

  def prefill() -> None:
    nonlocal cache
    cache = sampler.extend(params, sampler.new_cache(FLAGS.rows, FLAGS.slots),
                           [r[:-1] for r in rows])
    jax.block_until_ready(cache)

  def sample() -> None:
    sampler.generate(params, [r[-1:] for r in rows], sequence_keys(0, np.arange(FLAGS.rows)),
                     SamplingParams(FLAGS.new_tokens, top_k=50, stop_token_ids=()), cache=cache)
  return made(prefill), made(sample)


def main(argv: list[str]) -> None:
  del argv
  # Every program compiled afresh: no persistent cache, no program store.
  jax.config.update("jax_enable_compilation_cache", False)
  programs.use(None)
  depths = sorted(int(x) for x in FLAGS.layers)
  base = shape()
  print(f"{base.model_type} shape: hidden {base.hidden_size}, {base.num_heads} heads / "
        f"{base.num_kv_heads} KV, MLP {base.intermediate_size}, vocabulary {base.vocab_size}; "
        f"float32; {FLAGS.rows} rows of {FLAGS.prompt} tokens, {FLAGS.slots} slots, "
        f"{FLAGS.new_tokens} new tokens; jax {jax.__version__} on {jax.default_backend()}")
  print(f"{'layers':>6}{'layout':>10}{'prefill trace+lower+compile s':>32}"
        f"{'sampling trace+lower+compile s':>33}{'wall_s':>8}", flush=True)
  compile_s = {}
  for scan in (True, False):
    for n in depths:
      start = time.perf_counter()
      pre, sam = measure(base.replace(num_layers=n, scan_layers=scan, dtype="float32"))
      compile_s[scan, n] = sam[2]
      show = lambda t: f"{t[0]:.1f} + {t[1]:.1f} + {t[2]:.1f}"
      print(f"{n:>6}{'scanned' if scan else 'unrolled':>10}{show(pre):>32}{show(sam):>33}"
            f"{time.perf_counter() - start:>8.1f}", flush=True)
  for scan in (True, False):
    growth = compile_s[scan, depths[-1]] / compile_s[scan, depths[0]]
    print(f"compile_growth_{'scanned' if scan else 'unrolled'}={growth:.2f}")


if __name__ == "__main__":
  cli.run(main)
