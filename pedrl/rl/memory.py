"""Device memory of a GRPO run, estimated per device from the shapes, the mesh and the settings.

A training step goes through phases that hold different buffers besides the
resident ones (the tutor's weights, its AdamW moments, the frozen reference and
the student, all for the whole run):

  rollout   each side's KV cache over every dialogue of the step, and the speaking
            side's window copies (below)
  solve     the student's cache for its r_sol attempts (prompts_per_call × k rows)
  score     the reference's forward over one chunk of the batch (logits, attention)
  update    the gradient accumulator, one micro-batch's gradient and activations

The step needs the largest phase. Decisions, as pedrl's trainer runs today:
the tutor computes, caches and is trained in its `param_dtype` (float32 by
default: AdamW updates at the papers' learning rates vanish in bfloat16), the
reference is a copy of it, the moments take the weights' dtype (optax's
default), caches hold whole dialogues (`rollout.cache_slots`: the worst case;
a typical step's caches grow to its longest live dialogue), and parameters are
sharded by `pedrl.sharding`'s rules, KV caches over the batch axes (and the
tensor axis where the KV heads divide).

Activations, per token of a micro-batch (compute dtype of b bytes): without
rematerialization each layer keeps its inputs and outputs for the backward pass,
b·(4E + 2(H + KV)·Q + 3F) bytes of projections' inputs and outputs plus 12·H·T of
float32 attention scores, masked scores and probabilities (the decoder's
attention materializes them: [T, T] per head; a fused attention, cuDNN's on a GPU
(`ModelConfig.full_attention`, RunShape.fused_attention), keeps 4·H of float32
softmax statistics instead); with `remat` a layer keeps only
its input (b·E) and one layer's set is rebuilt at a time. The loss head adds 3
float32 [T, V] buffers per row (logits, their softmax and its gradient), or [C, V]
with the head run C positions at a time (`rl.logits_chunk`, C = 1024 by default; its
backward recomputes each chunk's logits and sums the head weight's float32 gradient
over the chunks: one more [E, V]). The reference's forward holds 2 such buffers
and one layer's 4·H·T attention probabilities per token (none when fused). When
the mesh splits the weights, each device also holds, while it computes, the
vocabulary matrix and one layer's weights gathered whole (FSDP). These
are estimates: against XLA's accounting of the compiled programs on CPU
(`pedrl.bench.train_step` prints both) they were within ±20% at 1-4 layers of the
tiny and 0.5B shapes, 256-512 tokens, whole or in 64-256-position chunks, except the
chunked scoring pass (30% above at 0.5B with 4 layers; 2026-11-26).

Caches are allocated at bucketed sizes (pedrl.engine.shapes.bucket: 10,496 slots
become 11,264). A sampling call works on the window of slots it can reach, cut out of
the cache and written back: while the window is shorter than the cache, XLA holds
about two window-sized copies beside the donated cache (XLA's accounting of the
compiled call on CPU, a 1-layer model, 8 rows, a 4096-slot cache of 8 MiB: 1.4 MiB of
temporaries at a 4096-slot window, 5.4 / 9.4 / 13.5 MiB at 1024 / 2048 / 3072;
2026-11-29). The rollout phase counts two copies of the larger side's widest window
short of its whole cache (6,144 of 8,192 slots).
"""
import dataclasses
import math

import jax
import numpy as np

from pedrl import sharding
from pedrl.engine import shapes
from pedrl.models import costs
from pedrl.models.config import ModelConfig
from pedrl.models.hf_checkpoint import abstract_params

GIB = 1 << 30
LOGITS_COPIES = 3  # Float32 [rows, T, V] buffers of the loss head (see the docstring).
SCORE_LOGITS_COPIES = 2  # And of a forward pass's log-probs.


@dataclasses.dataclass(frozen=True)
class MeshShape:
  """Sizes of the (data, fsdp, tensor) axes, without devices (duck-types a Mesh for
  `sharding.spec_for`)."""
  data: int = 1
  fsdp: int = 1
  tensor: int = 1

  @property
  def shape(self) -> dict:
    return dict(data=self.data, fsdp=self.fsdp, tensor=self.tensor)

  @property
  def devices(self) -> int:
    return self.data * self.fsdp * self.tensor

  @property
  def batch_shards(self) -> int:
    return self.data * self.fsdp


def dtype_bytes(dtype: str) -> int:
  return np.dtype(jax.numpy.dtype(dtype)).itemsize


def param_bytes(cfg: ModelConfig, dtype: str, mesh: MeshShape = MeshShape()) -> int:
  """Bytes of the params on the device that holds the most of them: each leaf split
  as `sharding.spec_for` splits it (replicated where an axis does not divide)."""
  total = 0
  leaves = jax.tree_util.tree_leaves_with_path(abstract_params(cfg.replace(dtype=dtype)))
  for path, leaf in leaves:
    name = "/".join(str(getattr(k, "key", k)) for k in path)
    spec = sharding.spec_for(name, leaf.shape, mesh)
    split = math.prod(mesh.shape[a] for a in spec if a)
    total += -(-leaf.size // split) * leaf.dtype.itemsize
  return total


def kv_cache_bytes(cfg: ModelConfig, rows: int, slots: int, dtype: str,
                   mesh: MeshShape = MeshShape()) -> int:
  """A KV cache of `rows` × `slots` on one device: rows over the batch shards, KV
  heads over the tensor axis where they divide (`engine.kv_cache.shardings`)."""
  rows = -(-rows // mesh.batch_shards)
  heads = mesh.tensor if cfg.num_kv_heads % mesh.tensor == 0 else 1
  return rows * slots * costs.kv_bytes_per_token(cfg, dtype_bytes(dtype)) // heads


def layer_activation_bytes(cfg: ModelConfig, seq_len: int, dtype: str,
                           fused: bool = False) -> int:
  """What one layer keeps for its backward pass, per token (see the docstring)."""
  b, e, q = dtype_bytes(dtype), cfg.hidden_size, cfg.head_dim
  dense = b * (4 * e + 2 * (cfg.num_heads + cfg.num_kv_heads) * q + 3 * cfg.intermediate_size)
  return dense + (4 * cfg.num_heads if fused else 12 * cfg.num_heads * seq_len)


def gathered_bytes(cfg: ModelConfig, dtype: str, mesh: MeshShape = MeshShape()) -> int:
  """What a device gathers at once when the mesh splits the weights (FSDP): the
  vocabulary matrix and one layer's weights, whole; 0 when nothing is split."""
  if param_bytes(cfg, dtype, mesh) == param_bytes(cfg, dtype):
    return 0
  return (cfg.vocab_size * cfg.hidden_size + costs.layer_params(cfg)) * dtype_bytes(dtype)


def head_positions(seq_len: int, logits_chunk: int) -> int:
  """Positions whose logits the loss head holds at once (ModelConfig.logits_chunk)."""
  return logits_chunk if 0 < logits_chunk < seq_len - 1 else seq_len


def activation_bytes(cfg: ModelConfig, rows: int, seq_len: int, dtype: str, remat: bool,
                     fused: bool = False, logits_chunk: int = 0) -> int:
  """A micro-batch's activations and loss-head buffers on one device (rows already split)."""
  tokens = rows * seq_len
  layer = layer_activation_bytes(cfg, seq_len, dtype, fused) * tokens
  kept = (cfg.num_layers * tokens * cfg.hidden_size * dtype_bytes(dtype) + layer if remat
          else cfg.num_layers * layer)
  head = head_positions(seq_len, logits_chunk)
  # In chunks, the head weight's float32 gradient is summed over them: one more [E, V].
  summed = cfg.hidden_size * cfg.vocab_size * 4 if head < seq_len else 0
  return kept + LOGITS_COPIES * rows * head * cfg.vocab_size * 4 + summed


def scoring_bytes(cfg: ModelConfig, rows: int, seq_len: int, fused: bool = False,
                  logits_chunk: int = 0) -> int:
  """A forward log-prob pass's buffers on one device (rows already split)."""
  attention = 0 if fused else 4 * cfg.num_heads * seq_len
  head = rows * head_positions(seq_len, logits_chunk)
  return head * SCORE_LOGITS_COPIES * cfg.vocab_size * 4 + rows * seq_len * attention


@dataclasses.dataclass(frozen=True)
class RunShape:
  """What sizes a step's buffers: defaults are paper 003's (section 5.1, appendix A and
  the reference code, as pedrl's configs set them)."""
  dialogues: int = 16 * 8  # batch_problems × group_size.
  cache_slots: int = 8192 + 1024 + 1024 + 256  # rollout.cache_slots before bucketing.
  update_seq_len: int = 8192  # The tutor's side of a dialogue, padded.
  micro_batch: int = 8
  solve_rows: int = 16 * 8  # prompts_per_call × k.
  solve_slots: int = 8192 + 3900  # A dialogue as the attempt's prompt, and the attempt.
  param_dtype: str = "float32"  # The tutor's weights, compute and cache (TrainSettings).
  student_dtype: str = "bfloat16"  # A checkpoint's own dtype.
  remat: bool = False
  # Whole-sequence attention through cuDNN's fused kernel (ModelConfig.full_attention
  # "auto" for bfloat16/float16 compute on a GPU). Float32 compute attends by einsum, and
  # jax's XLA form of the fused call ("xla") holds the [T, T] probabilities as that does.
  fused_attention: bool = False
  logits_chunk: int = 1024  # The loss head's positions per pass (rl.logits_chunk; 0: all).


@dataclasses.dataclass(frozen=True)
class Plan:
  """Bytes per device of each part and each phase, and the device's memory."""
  parts: dict
  phases: dict
  device_bytes: float

  @property
  def peak(self) -> tuple[str, int]:
    name = max(self.phases, key=self.phases.get)
    return name, self.phases[name]

  @property
  def fits(self) -> bool:
    return self.peak[1] <= self.device_bytes


def plan(tutor: ModelConfig, student: ModelConfig, mesh: MeshShape, run: RunShape,
         device_bytes: float) -> Plan:
  """Every part's bytes on one device, and each phase's sum (resident parts included)."""
  tutor_params = param_bytes(tutor, run.param_dtype, mesh)
  micro_rows = -(-run.micro_batch // mesh.batch_shards)
  slots, solve_slots = shapes.bucket(run.cache_slots), shapes.bucket(run.solve_slots)
  tutor_cache = kv_cache_bytes(tutor, run.dialogues, slots, run.param_dtype, mesh)
  student_cache = kv_cache_bytes(student, run.dialogues, slots, run.student_dtype, mesh)
  parts = {
      "tutor params": tutor_params,
      "AdamW moments": 2 * tutor_params,
      "reference": tutor_params,
      "student params": param_bytes(student, run.student_dtype, mesh),
      "tutor KV cache": tutor_cache,
      "student KV cache": student_cache,
      # Two copies of the widest window short of the whole cache (6144 of 8192 slots).
      "window copies": 2 * max(tutor_cache, student_cache) * shapes.bucket_below(slots - 1)
                       // slots,
      "solve KV cache": kv_cache_bytes(student, run.solve_rows, solve_slots,
                                       run.student_dtype, mesh),
      "scoring": scoring_bytes(tutor, micro_rows, run.update_seq_len, run.fused_attention,
                               run.logits_chunk),
      "gradients": 2 * tutor_params,  # The accumulator and one micro-batch's.
      "gathered weights": gathered_bytes(tutor, run.param_dtype, mesh),
      "activations": activation_bytes(tutor, micro_rows, run.update_seq_len, run.param_dtype,
                                      run.remat, run.fused_attention, run.logits_chunk),
  }
  resident = sum(parts[k] for k in ("tutor params", "AdamW moments", "reference",
                                    "student params"))
  phases = {"rollout": (resident + parts["tutor KV cache"] + parts["student KV cache"]
                       + parts["window copies"]),
            "solve": resident + parts["solve KV cache"],
            "score": resident + parts["scoring"] + parts["gathered weights"],
            "update": (resident + parts["gradients"] + parts["activations"]
                       + parts["gathered weights"])}
  return Plan(parts, phases, device_bytes)
