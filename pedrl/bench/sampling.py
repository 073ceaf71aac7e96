r"""pedrl's sampler against transformers' `generate`, same weights, same inputs, one process.

  python -m pedrl.bench.sampling                       # CPU: small and medium Qwen2, fp32
  python -m pedrl.bench.sampling --device_profile=gpu  # Qwen2.5-7B-shaped bf16 decode

The CPU profile builds random Qwen2 models with transformers, saves them as
safetensors and loads them into pedrl, then samples batch 16 x 128 new tokens
after a 64-token prompt with top-p 0.95 in both. A third case, `medium_cache`,
is what a dialogue turn looks like: a 320-token prompt in a cache of 4096
slots (pedrl's caches are allocated for the whole conversation;
transformers' grows with what it holds). Compilation is timed apart from
steady-state generation. The last line is `min_speedup_vs_transformers=`, over
every case.

The roofline column compares one decode step's time with the machine's limit
for it: max(matmul FLOPs / peak matmul FLOP/s, bytes read / memory bandwidth),
both peaks measured here with XLA (`pedrl.bench.roofline`).
"""
import os
import tempfile
from collections.abc import Callable, Sequence
from typing import Any
import time

from absl import app
from absl import flags
import jax
import numpy as np

from pedrl import cli
from pedrl import models
from pedrl.bench import profile, roofline, timing
from pedrl.engine import Sampler, SamplingParams, sequence_keys
from pedrl.models import architectures, costs
from pedrl.models.config import ModelConfig
from pedrl.models.decoder import Decoder, Params

FLAGS = flags.FLAGS
flags.DEFINE_enum("device_profile", "cpu", ["cpu", "gpu"], "cpu: vs transformers; gpu: 7B bf16 decode.")
flags.DEFINE_list("sizes", ["small", "medium", "medium_cache"], "CPU profile cases (CASES).")
flags.DEFINE_integer("batch", 16, "Sequences per call.")
flags.DEFINE_integer("prompt_len", 64, "Prompt tokens.")
flags.DEFINE_integer("new_tokens", 128, "Tokens to generate.")
flags.DEFINE_float("top_p", 0.95, "Nucleus sampling mass.")
timing.define_scan_layers(False)
timing.define_repeats("engine")
profile.define_flags()
flags.DEFINE_string("gpu_size", "qwen2.5-7b", "GPU profile: the model's shape "
                    "(pedrl.models.architectures; tiny to smoke-test).")
flags.DEFINE_integer("gpu_layers", 0, "GPU profile: the model's layers (0: the shape's own).")
flags.DEFINE_list("gpu_cache_slots", ["0", "4096"],
                  "GPU profile: pedrl cache slots per case (0: prompt + new tokens).")
flags.DEFINE_enum("qkv_matmul", "separate", ["separate", "fused"],
                  "GPU profile: the q, k and v projections' matmuls (ModelConfig.qkv_matmul).")
flags.DEFINE_enum("decode_attention", "xla", ["xla", "pallas"],
                  "GPU profile: a decode step's attention over the cache "
                  "(ModelConfig.decode_attention).")

SIZES = {  # Qwen2 architecture, fp32.
    "small": dict(num_hidden_layers=4, hidden_size=256, intermediate_size=1024,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=8192),
    "medium": dict(num_hidden_layers=12, hidden_size=768, intermediate_size=3072,
                   num_attention_heads=12, num_key_value_heads=6, vocab_size=32000),
}
# CPU cases: (model size, prompt tokens (None: --prompt_len), pedrl cache slots (0: prompt
# + new tokens)).
CASES = {"small": ("small", None, 0), "medium": ("medium", None, 0),
         "medium_cache": ("medium", 320, 4096)}


def step_cost(cfg: ModelConfig, batch: int, cache_len: int, dtype_bytes: int) -> tuple[int, int]:
  """(matmul FLOPs, bytes read) of one decode step of `batch` rows: the matmuls' weights
  (`costs.matmul_params`) once, and each row's keys and values."""
  weights = costs.matmul_params(cfg)
  cache = batch * cache_len * costs.kv_bytes_per_token(cfg, dtype_bytes)
  return 2 * batch * weights, weights * dtype_bytes + cache


def transformers_runner(path: str, prompts: Sequence[Sequence[int]],
                        top_p: float) -> Callable[[int], Any]:
  """run(n) sampling n tokens with transformers' generate (torch, float32)."""
  import torch
  import transformers
  model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
  # generate fills a call's unset fields from the checkpoint's generation_config.json: its
  # EOS ids stop rows as pedrl's sampler stops them; its other settings (a repetition
  # penalty, top-k) would change the sampling named below, so they are left out.
  model.generation_config = transformers.GenerationConfig(
      eos_token_id=model.generation_config.eos_token_id)
  ids = torch.tensor(prompts)

  def run(n):
    cfg = transformers.GenerationConfig(do_sample=True, top_p=top_p, top_k=0, temperature=1.0,
                                        max_new_tokens=n, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
      return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                            generation_config=cfg)
  return run


def pedrl_runner(model: Decoder, params: Params, prompts: Sequence[Sequence[int]], top_p: float,
                 cache_slots: int = 0) -> Callable[[int], Any]:
  """run(n) sampling n tokens with pedrl's Sampler, in a fresh cache of `cache_slots`
  slots (0: sized for the prompt and the n tokens)."""
  sampler = Sampler(model)
  rows = [list(p) for p in prompts]
  keys = sequence_keys(0, np.arange(len(rows)))

  def run(n):
    cache = sampler.new_cache(len(rows), cache_slots) if cache_slots else None
    gen, _ = sampler.generate(params, rows, keys, SamplingParams(n, top_p=top_p), cache=cache)
    assert gen.lengths.min() == n, gen.lengths
    return gen
  return run


def measure(runs: dict, new_tokens: int, repeats: int) -> dict:
  """Per engine: compile time (first call minus steady), best total and best 1-token time."""
  first = {}
  for name, run in runs.items():
    t = time.perf_counter()
    run(new_tokens)
    run(1)
    first[name] = time.perf_counter() - t
  total = timing.interleaved_best(runs, new_tokens, repeats)
  ttft = timing.interleaved_best(runs, 1, repeats)
  return {name: dict(total=total[name], ttft=ttft[name],
                     compile=max(0.0, first[name] - total[name] - ttft[name])) for name in runs}


def cpu_profile() -> None:
  import torch
  import transformers
  peak, bw = roofline.peak_matmul_flops(), roofline.memory_bandwidth()
  print(f"machine: {jax.local_devices()[0].device_kind}, {os.cpu_count()} cores, peak matmul "
        f"{peak / 1e9:.0f} GFLOP/s (fp32), memory read {bw / 1e9:.1f} GB/s")
  rng = np.random.default_rng(0)
  speedups, lines = [], []
  header = (f"{'case':<14}{'engine':<14}{'tok/s':>9}{'ratio':>8}{'ttft_s':>9}{'compile_s':>11}"
            f"{'step_ms':>9}{'roofline':>10}")
  for case in FLAGS.sizes:
    size, prompt_len, slots = CASES[case]
    prompt_len = prompt_len or FLAGS.prompt_len
    with tempfile.TemporaryDirectory() as path:
      hf_cfg = transformers.Qwen2Config(max_position_embeddings=4096, **SIZES[size])
      torch.manual_seed(0)
      transformers.Qwen2ForCausalLM(hf_cfg).save_pretrained(path)
      prompts = rng.integers(1, hf_cfg.vocab_size, (FLAGS.batch, prompt_len)).tolist()
      cfg, model, params = models.load(path, dtype="float32", scan_layers=FLAGS.scan_layers)
      result = measure({"transformers": transformers_runner(path, prompts, FLAGS.top_p),
                        "pedrl": pedrl_runner(model, params, prompts, FLAGS.top_p, slots)},
                       FLAGS.new_tokens, FLAGS.repeats)
    ref, ours = result["transformers"], result["pedrl"]
    # The roofline reads the filled slots only: what an engine needs to read.
    flops, nbytes = step_cost(cfg, FLAGS.batch, prompt_len + FLAGS.new_tokens // 2, 4)
    limit = max(flops / peak, nbytes / bw)
    for name, r in (("transformers", ref), ("pedrl", ours)):
      r["tok_s"] = FLAGS.batch * FLAGS.new_tokens / r["total"]
      r["step"] = (r["total"] - r["ttft"]) / (FLAGS.new_tokens - 1)
    speedups.append(ours["tok_s"] / ref["tok_s"])
    for name, r in (("transformers", ref), ("pedrl", ours)):
      lines.append(f"{case:<14}{name:<14}{r['tok_s']:>9.1f}{r['tok_s'] / ref['tok_s']:>8.2f}"
                   f"{r['ttft']:>9.3f}{r['compile']:>11.2f}{r['step'] * 1e3:>9.1f}"
                   f"{limit / r['step']:>10.0%}")
  print(f"batch {FLAGS.batch}, {FLAGS.new_tokens} new tokens, top-p {FLAGS.top_p}, fp32; "
        f"cases (model, prompt, pedrl cache slots): "
        f"{ {c: CASES[c] for c in FLAGS.sizes} }; transformers on {torch.get_num_threads()} "
        f"torch threads; best of {FLAGS.repeats} interleaved runs")
  print(header)
  print("\n".join(lines))
  print(f"min_speedup_vs_transformers={min(speedups):.2f}")


def gpu_profile() -> None:
  from pedrl.models.hf_checkpoint import random_params
  cfg = architectures.get(FLAGS.gpu_size).config(FLAGS.gpu_layers or None, dtype="bfloat16",
                                                 scan_layers=FLAGS.scan_layers,
                                                 qkv_matmul=FLAGS.qkv_matmul,
                                                 decode_attention=FLAGS.decode_attention)
  params = random_params(cfg)
  model = models.build_model(cfg)
  hbm = roofline.hbm_bandwidth() or roofline.memory_bandwidth()
  print(f"device: {jax.local_devices()[0].device_kind}; HBM {hbm / 1e12:.2f} TB/s "
        f"({'datasheet' if roofline.hbm_bandwidth() else 'measured'}); jax {jax.__version__}; "
        f"{FLAGS.gpu_size} shape ({cfg.num_layers} layers), bf16, {cfg.qkv_matmul} q/k/v matmuls, "
        f"{cfg.decode_attention} decode attention")
  print(f"{'batch':>6}{'slots':>7}{'decode tok/s':>14}{'step_ms':>9}{'HBM util':>10}{'ttft_s':>8}"
        f"{'compile_s':>11}{'mem_GiB':>9}")
  rng = np.random.default_rng(0)
  utilization, traced = {}, []
  for batch in (1, 16):
    prompts = rng.integers(1, cfg.vocab_size, (batch, FLAGS.prompt_len)).tolist()
    for slots in map(int, FLAGS.gpu_cache_slots):
      run = pedrl_runner(model, params, prompts, FLAGS.top_p, slots)
      r = measure({"pedrl": run}, FLAGS.new_tokens, FLAGS.repeats)["pedrl"]
      step = (r["total"] - r["ttft"]) / (FLAGS.new_tokens - 1)
      # The roofline reads the filled slots only, whatever the cache's allocated size.
      _, nbytes = step_cost(cfg, batch, FLAGS.prompt_len + FLAGS.new_tokens // 2, 2)
      stats = jax.local_devices()[0].memory_stats() or {}
      utilization.setdefault(batch, nbytes / step / hbm)  # The first cache size's.
      print(f"{batch:>6}{slots or FLAGS.prompt_len + FLAGS.new_tokens:>7}{batch / step:>14.1f}"
            f"{step * 1e3:>9.2f}{nbytes / step / hbm:>10.0%}{r['ttft']:>8.3f}{r['compile']:>11.1f}"
            f"{stats.get('peak_bytes_in_use', 0) / 2**30:>9.1f}")
      traced.append((f"decode_batch{batch}_slots{slots}", run))
  for name, run in traced:  # A prompt and --new_tokens decode steps, traced.
    profile.show(lambda: run(FLAGS.new_tokens).tokens, name, FLAGS.profile_top, FLAGS.trace_dir)
  for batch, u in utilization.items():
    print(f"decode_hbm_utilization_batch{batch}={u:.3f}")


def main(argv: list[str]) -> None:
  del argv
  if FLAGS.device_profile == "gpu":
    gpu_profile()
  elif FLAGS.profile_top:
    raise app.UsageError("--profile_top traces the gpu profile's decode (--device_profile=gpu); "
                         "the cpu profile compares engines and traces nothing")
  elif FLAGS.qkv_matmul != "separate" or FLAGS.decode_attention != "xla":
    raise app.UsageError("--qkv_matmul and --decode_attention set the gpu profile's model (--device_profile=gpu); "
                         "the cpu profile's models are transformers checkpoints")
  else:
    cli.require("bench.sampling's cpu profile (transformers on PyTorch beside pedrl)", "torch")
    cpu_profile()


if __name__ == "__main__":
  cli.run(main)
