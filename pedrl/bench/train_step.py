r"""One GRPO update at a named model shape: step time, tokens/s, MFU and memory.

  python -m pedrl.bench.train_step --size=qwen2.5-1.5b --seq_len=2048 --micro_batch=4
  python -m pedrl.bench.train_step --size=qwen2.5-7b --layers=4   # a 7B's layers, trimmed
  python -m pedrl.bench.train_step --size=tiny --seq_len=64 --rows=4 --repeats=1
  XLA_FLAGS=--xla_force_host_platform_device_count=8 python -m pedrl.bench.train_step \
      --size=qwen2.5-0.5b --layers=1 --seq_len=1024 --rows=16 --micro_batch=16 --mesh=1,8,1

Random weights (`hf_checkpoint.random_params`) in --param_dtype (the trained tutor's
weights and AdamW moments, `TrainSettings.param_dtype` by default), computed in
--compute_dtype (flax casts each weight to it at use). A synthetic mini-batch of
--rows full-length sequences of --seq_len tokens, each token a tutor token with a
random advantage, goes through what a training step runs:

- score: the frozen reference's log-probs (`update.logprobs_in_chunks`, chunks of
  --micro_batch rows). A training step runs this pass twice by default (the
  reference's and the old policy's, rl.old_logprobs=trainer), once with
  rl.old_logprobs=sampler;
- update: `update.train_step` (micro-batched gradients, clipping, AdamW);
- step: what a training step spends on both, the scoring pass counted as often as
  --old_logprobs makes a step run it (twice for "trainer", the default; once for
  "sampler") and the update --passes times (μ, rl.passes: 2 by default, paper 003's);
  its time is the sum of the measured passes', not a run of its own.

Each is run once to compile, then timed (best of --repeats); `programs` counts
the XLA programs all those calls made (1: only the first compiled). MFU: model FLOPs
(`pedrl.models.costs`: 6N + 12·L·H·Q·T per trained token, 2N + 4·L·H·Q·T per
scored token, PaLM's convention) over the time and the device's datasheet peak
(`roofline.PEAK_FLOPS`; n/a on devices it does not list). Memory: XLA's
accounting of each compiled program (arguments + outputs − donated + temporaries),
the device's peak in use where it reports one (GPUs), and `pedrl.rl.memory`'s
estimate of the same buffers. Also counted: the programs each pass compiled.
With --mesh (data,fsdp,tensor sizes) the weights, moments and rows are split over the
devices as a training run splits them (`pedrl.sharding`), and the memory figures are
per device, XLA's against the plan's for that mesh: on CPU, simulate the devices
with XLA_FLAGS=--xla_force_host_platform_device_count=N.
"""
import dataclasses
from collections.abc import Callable, Sequence
import time

from absl import app, flags
import jax
import numpy as np

from pedrl import cli, sharding
from pedrl.bench import compiles, profile, roofline, timing
from pedrl.models import architectures, costs
from pedrl.models.config import ModelConfig
from pedrl.models.decoder import full_attention
from pedrl.models.hf_checkpoint import build_model, random_params
from pedrl.rl import batch as batch_lib, memory, update
from pedrl.rl.settings import OLD_LOGPROBS
from pedrl.rl.trainer import TrainSettings

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The command's flags, defined when it runs (other benchmarks define --size and
  --repeats too, and tests import several of them into one process)."""
  flags.DEFINE_enum("size", "tiny", list(architectures.ARCHITECTURES), "Model shape.")
  flags.DEFINE_integer("layers", 0, "Decoder layers (0: the shape's own).")
  flags.DEFINE_integer("seq_len", 1024, "Tokens per sequence.")
  flags.DEFINE_integer("rows", 16, "Sequences in the mini-batch of one update.")
  flags.DEFINE_integer("micro_batch", update.GRPOSettings.micro_batch,
                       "Rows per gradient computation (and per scoring chunk).")
  flags.DEFINE_string("param_dtype", TrainSettings.param_dtype, "Weights and AdamW moments.")
  flags.DEFINE_string("compute_dtype", "bfloat16", "Activations and matmuls.")
  flags.DEFINE_bool("remat", TrainSettings.remat, "Recompute layer activations in the backward.")
  flags.DEFINE_enum("full_attention", "auto", ["auto", "einsum", "cudnn", "xla"],
                    "How whole sequences attend (ModelConfig.full_attention; auto: cuDNN's "
                    "fused attention on a GPU in bfloat16/float16).")
  flags.DEFINE_list("mesh", [], "data,fsdp,tensor sizes of a mesh over the devices "
                    "(default: one device).")
  flags.DEFINE_integer("logits_chunk", TrainSettings.logits_chunk,
                       "Positions per pass of the float32 loss head (ModelConfig.logits_chunk, "
                       "the trainer's rl.logits_chunk; 0: the whole sequence at once).",
                       lower_bound=0)
  flags.DEFINE_enum("old_logprobs", update.GRPOSettings.old_logprobs, list(OLD_LOGPROBS),
                    "The ratio's old log-probs (rl.old_logprobs): the step row counts two "
                    "scoring passes for 'trainer', one for 'sampler'.")
  flags.DEFINE_integer("passes", TrainSettings.passes, "Updates a training step makes on its "
                       "batch (μ, rl.passes): the step row counts the update this many times.",
                       lower_bound=1)
  timing.define_repeats("pass")
  timing.define_scan_layers(True)
  profile.define_flags()


@dataclasses.dataclass(frozen=True)
class Pass:
  """One measured pass: its seconds, tokens, model FLOPs, memory and compiled programs."""
  name: str
  seconds: float
  tokens: int
  flops: float  # Model FLOPs (pedrl.models.costs).
  xla_bytes: int  # XLA's memory analysis of the compiled program.
  estimate_bytes: int  # pedrl.rl.memory's.
  programs: int
  device_peak: int | None  # The device's peak bytes in use after this pass (GPU).

  def mfu(self, peak: float | None) -> float | None:
    return None if peak is None else self.flops / self.seconds / peak


def program_bytes(compiled: jax.stages.Compiled) -> int:
  """Bytes a compiled program holds while it runs: arguments and outputs (donated
  buffers counted once) and temporaries (XLA's memory analysis)."""
  m = compiled.memory_analysis()
  return (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
          + m.temp_size_in_bytes)


def device_peak() -> int | None:
  stats = jax.local_devices()[0].memory_stats() or {}
  return stats.get("peak_bytes_in_use")


def check_fits(size: str, needed: int, seq_len: int, micro_batch: int, remat: bool) -> None:
  """A UsageError before compiling when the plan's estimate of the update (with the
  reference beside it) is over what the device can allocate: XLA would fail only after
  minutes of compiling and autotuning. Devices that report no limit (CPU) pass."""
  limit = (jax.local_devices()[0].memory_stats() or {}).get("bytes_limit")
  if limit and needed > limit:
    hint = "a smaller --micro_batch" + ("" if remat else " or --remat")
    raise app.UsageError(
        f"{size} at {seq_len} tokens x micro-batch {micro_batch} (remat {remat}) needs about "
        f"{needed / 2**30:.1f} GiB by pedrl.rl.memory's plan; the device can allocate "
        f"{limit / 2**30:.1f} GiB: try {hint}")


def synthetic_batch(cfg: ModelConfig, rows: int, seq_len: int,
                    seed: int = 0) -> batch_lib.TrainBatch:
  """Full-length random sequences, every token after the first a tutor token with a
  row's random advantage; log-probs filled in by the scoring pass."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(0, cfg.vocab_size, (rows, seq_len)).astype(np.int32)
  full = np.ones((rows, seq_len), bool)
  loss = full.copy()
  loss[:, 0] = False
  advantages = np.repeat(rng.standard_normal((rows, 1)).astype(np.float32), seq_len, axis=1)
  zeros = np.zeros((rows, seq_len), np.float32)
  return batch_lib.TrainBatch(tokens, full, loss, advantages, zeros, zeros)


def best_seconds(fn: Callable[[], object], repeats: int) -> float:
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    fn()
    best = min(best, time.perf_counter() - t)
  return best


def measure(size: str, layers: int, seq_len: int, rows: int, micro_batch: int,
            param_dtype: str, compute_dtype: str, remat: bool, repeats: int,
            attention: str = "auto", logits_chunk: int = TrainSettings.logits_chunk,
            mesh: jax.sharding.Mesh | None = None, profile_top: int = 0, trace_dir: str = "",
            scan_layers: bool = True) -> dict:
  """The scoring pass and the update at one shape, on one device or over `mesh` (memory
  per device); Pass by name. profile_top > 0: then one more call of each traced, its
  longest ops printed (`pedrl.bench.profile`)."""
  arch = architectures.get(size)
  cfg = arch.config(layers or None, dtype=compute_dtype, remat=remat, full_attention=attention,
                    logits_chunk=logits_chunk, scan_layers=scan_layers)
  run = memory.RunShape(update_seq_len=seq_len, micro_batch=micro_batch, param_dtype=param_dtype,
                        remat=remat, fused_attention=full_attention(cfg) == "cudnn",
                        logits_chunk=logits_chunk)
  # What each program holds, by the plan: the scoring pass the reference and its logits, the
  # update the weights, moments, gradients and activations.
  shape = memory.MeshShape(**mesh.shape) if mesh is not None else memory.MeshShape()
  parts = memory.plan(cfg, cfg, shape, run, float("inf")).parts
  estimate = {"score": parts["reference"] + parts["scoring"] + parts["gathered weights"],
              "update": sum(parts[k] for k in ("tutor params", "AdamW moments", "gradients",
                                               "activations", "gathered weights"))}
  check_fits(size, parts["reference"] + estimate["update"], seq_len, micro_batch, remat)
  model = build_model(cfg)
  # Committed to the device, as loaded checkpoints are: the update returns committed arrays,
  # and jit would compile the step again for the second call if its inputs were not.
  params = random_params(cfg.replace(dtype=param_dtype))
  params = jax.device_put(params, jax.local_devices()[0] if mesh is None else
                          sharding.param_shardings(params, mesh))
  reference = jax.tree.map(lambda x: x.copy(), params)  # The trainer's frozen copy.
  # Paper 003's tutor samples at T = 1.0: its log-probs are of the logits as they are.
  settings = update.GRPOObjective(update.GRPOSettings(micro_batch=micro_batch), temperature=1.0)
  optimizer = update.OptimizerSettings().optimizer(total_updates=2 + repeats)
  opt_state = update.init_optimizer(optimizer, params)
  batch = synthetic_batch(cfg, rows, seq_len)
  out = {}

  score = lambda: update.logprobs_in_chunks(model, reference, batch.tokens, batch.attn_mask,
                                            settings.temperature, micro_batch, mesh)
  with compiles.compilations() as compiled:  # Those of the timed calls too (none, or a bug).
    ref_logp = score()
    seconds = best_seconds(score, repeats)
  program = update.logprobs_program(model, reference, batch.tokens, batch.attn_mask,
                                    settings.temperature, micro_batch, mesh)
  tokens = rows * seq_len
  out["score"] = Pass("score", seconds, tokens,
                      tokens * costs.forward_flops_per_token(cfg, seq_len), program_bytes(program),
                      estimate["score"], len(compiled), device_peak())
  batch = batch.replace(old_logp=ref_logp, ref_logp=ref_logp)  # First pass: ratio 1.

  state = [params, opt_state]

  def step():
    state[0], state[1], metrics = update.train_step(model, *state, optimizer, batch, settings,
                                                    mesh)
    if not np.isfinite(metrics.objective.loss):
      raise FloatingPointError(f"the update's loss is {metrics.objective.loss}")

  with compiles.compilations() as compiled:
    step()
    seconds = best_seconds(step, repeats)
  program = update.train_step_program(model, *state, optimizer, batch, settings, mesh)
  out["update"] = Pass("update", seconds, tokens,
                       tokens * costs.train_flops_per_token(cfg, seq_len), program_bytes(program),
                       estimate["update"], len(compiled), device_peak())
  name = (f"{size}_{cfg.num_layers}layers{'' if scan_layers else '_unrolled'}_{rows}x{seq_len}"
          f"_mb{micro_batch}")
  profile.show(score, f"score_{name}", profile_top, trace_dir)
  profile.show(lambda: step() or state[0], f"update_{name}", profile_top, trace_dir)
  return out


def report(size: str, layers: int, seq_len: int, rows: int, micro_batch: int,
           param_dtype: str, compute_dtype: str, remat: bool, repeats: int,
           attention: str = "auto", logits_chunk: int = TrainSettings.logits_chunk,
           mesh_sizes: Sequence[int] = (), profile_top: int = 0, trace_dir: str = "",
           scan_layers: bool = True, old_logprobs: str = update.GRPOSettings.old_logprobs,
           updates: int = TrainSettings.passes) -> dict:
  """Measures and prints the table (on a mesh of `mesh_sizes`, data,fsdp,tensor, if
  given); the passes by name, with the step's sum of them (`step_total`)."""
  mesh = None
  if mesh_sizes:
    if len(mesh_sizes) != 3:
      raise app.UsageError(f"--mesh needs three sizes (data,fsdp,tensor), got {mesh_sizes}")
    try:
      mesh = sharding.make_mesh(*map(int, mesh_sizes))
    except ValueError as e:
      raise app.UsageError(f"--mesh={','.join(map(str, mesh_sizes))}: {e} (on CPU, "
                           "XLA_FLAGS=--xla_force_host_platform_device_count=N simulates N)")
  passes = measure(size, layers, seq_len, rows, micro_batch, param_dtype, compute_dtype, remat,
                   repeats, attention, logits_chunk, mesh, profile_top, trace_dir, scan_layers)
  passes["step"] = step_total(passes, old_logprobs, updates)
  devices = 1 if mesh is None else mesh.size
  cfg = architectures.get(size).config(layers or None, dtype=compute_dtype,
                                       full_attention=attention)
  peak = roofline.peak_flops(compute_dtype)
  device = jax.local_devices()[0]
  mib = lambda b: "n/a" if b is None else f"{b / 2**20:.1f}"
  print(f"device: {device.device_kind} ({device.platform}), jax {jax.__version__}; peak "
        f"{'n/a' if peak is None else f'{peak / 1e12:.0f} TFLOP/s'} ({compute_dtype})")
  layout = "scanned" if scan_layers else "unrolled"
  print(f"{size}: {cfg.num_layers} {layout} layers, {costs.param_count(cfg) / 1e6:.1f}M parameters "
        f"(N = {costs.matmul_params(cfg) / 1e6:.1f}M in matmuls); weights and moments "
        f"{param_dtype}, compute {compute_dtype}, remat {remat}, attention "
        f"{full_attention(cfg)}, loss head {memory.head_positions(seq_len, logits_chunk)} "
        f"positions a pass; {rows} rows x {seq_len} tokens, "
        f"micro-batch {micro_batch}; best of {repeats}"
        + ("" if mesh is None else f"; mesh {dict(mesh.shape)}, memory per device, MFU "
           f"over {devices} devices"))
  print(f"{'pass':<8}{'seconds':>9}{'tok/s':>10}{'TFLOP/s':>9}{'MFU':>7}{'xla_MiB':>11}"
        f"{'estimate_MiB':>14}{'peak_MiB':>11}{'programs':>10}")
  peak = None if peak is None else peak * devices
  for p in passes.values():
    mfu = p.mfu(peak)
    print(f"{p.name:<8}{p.seconds:>9.3f}{p.tokens / p.seconds:>10.0f}"
          f"{p.flops / p.seconds / 1e12:>9.2f}{'n/a' if mfu is None else f'{mfu:.0%}':>7}"
          f"{mib(p.xla_bytes):>11}{mib(p.estimate_bytes):>14}{mib(p.device_peak):>11}"
          f"{p.programs:>10}")
  print(f"step: {scoring_passes(old_logprobs)} x score + {updates} x update (rl.old_logprobs="
        f"{old_logprobs}, rl.passes={updates}); seconds summed, memory the larger program's")
  show = lambda m: "n/a" if m is None else f"{m:.3f}"
  print(f"step_mfu={show(passes['step'].mfu(peak))}")
  print(f"train_step_mfu={show(passes['update'].mfu(peak))}")
  return passes


def scoring_passes(old_logprobs: str) -> int:
  """Scoring passes a training step runs: the frozen reference's, and the old policy's
  when the trainer scores it (rl.old_logprobs=trainer) rather than the sampler."""
  return {"trainer": 2, "sampler": 1}[old_logprobs]


def step_total(passes: dict, old_logprobs: str, updates: int = TrainSettings.passes) -> Pass:
  """What a training step after its rollouts costs, from the measured passes: the
  scoring pass as many times as the step runs it, then `updates` updates (μ). Memory is
  the larger program's (they run one after the other); the tokens are the batch's (its
  tok/s, batch tokens per second of the step)."""
  score, upd = passes["score"], passes["update"]
  n = scoring_passes(old_logprobs)
  return Pass("step", n * score.seconds + updates * upd.seconds, upd.tokens,
              n * score.flops + updates * upd.flops, max(score.xla_bytes, upd.xla_bytes),
              max(score.estimate_bytes, upd.estimate_bytes), score.programs + upd.programs,
              upd.device_peak)


def main(argv: list[str]) -> None:
  del argv
  report(FLAGS.size, FLAGS.layers, FLAGS.seq_len, FLAGS.rows, FLAGS.micro_batch,
         FLAGS.param_dtype, FLAGS.compute_dtype, FLAGS.remat, FLAGS.repeats,
         FLAGS.full_attention, FLAGS.logits_chunk, FLAGS.mesh, FLAGS.profile_top,
         FLAGS.trace_dir, FLAGS.scan_layers, FLAGS.old_logprobs, FLAGS.passes)


if __name__ == "__main__":
  define_flags()
  cli.run(main)
