"""Model configuration, read from a Hugging Face `config.json`.

One frozen dataclass covers every architecture pedrl ports. Decoder families
differ only by switches (biases, q/k norm, rope scaling, tied embeddings), so
there is one decoder implementation rather than a copy per family.
"""
import dataclasses
import json
import os
from typing import Any

from absl import logging

DECODER_TYPES = ("qwen2", "qwen3", "llama")
ENCODER_TYPES = ("bert", "xlm-roberta")
SUPPORTED_TYPES = DECODER_TYPES + ENCODER_TYPES
TASKS = ("causal_lm", "seq_cls", "embed")
ROPE_TYPES = ("default", "linear", "llama3", "yarn")


class ConfigError(ValueError):
  """A checkpoint's config.json describes something pedrl cannot run."""


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Architecture plus the runtime choices (dtype, remat) of one model."""
  model_type: str
  task: str
  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  intermediate_size: int
  norm_eps: float
  max_position_embeddings: int
  # Decoder switches.
  qkv_bias: bool = False
  o_bias: bool = False
  mlp_bias: bool = False
  qk_norm: bool = False
  tie_embeddings: bool = False
  rope_theta: float = 10000.0
  # Sorted (key, value) pairs of the rope scaling dict; () for plain rope.
  rope_scaling: tuple = ()
  # seq_cls head width (Ped-RM has 1 label).
  num_labels: int = 0
  # Encoder (BERT, XLM-RoBERTa) fields.
  type_vocab_size: int = 0
  hidden_act: str = "silu"
  # XLM-R (fairseq) numbers real tokens from pad_token_id + 1 and gives padding
  # pad_token_id, so the table's first position_offset rows never hold a real token.
  position_offset: int = 0
  # Token ids, used by samplers and the sequence-classification head.
  pad_token_id: int | None = None
  bos_token_id: int | None = None
  eos_token_ids: tuple = ()
  # Runtime choices, not architecture.
  dtype: str = "float32"
  remat: bool = False
  # Scanned layers keep one compiled layer body: compile time does not grow with
  # depth. Unrolled layers (params layers_0, layers_1, ...) let decoding read each
  # layer's weights and KV cache in place: XLA:CPU and :GPU copy the slice of a
  # stacked array that a scan step reads (a CPU decode step 14-32% slower at
  # SmolLM2-135M's shape, its sampling program 2.3x longer to compile at 30 layers
  # than at 2 unrolled; docs/performance.md, "Compile time and depth").
  scan_layers: bool = True
  # Attention of a multi-token chunk on a KV cache (prefill, a dialogue turn) in
  # blocks of this many queries and keys (layers.blocked_attention); 0: the whole
  # score matrix at once; None: 256 on CPU, 0 on accelerators (the blocked loops
  # are measured on XLA:CPU only).
  attention_block: int | None = None
  # Attention of a whole sequence without a KV cache (training, teacher-forced
  # scoring): "einsum" (layers.dot_attention: float32 [T, T] scores and probabilities,
  # kept for the backward pass), "cudnn" (cuDNN's flash attention through
  # jax.nn.dot_product_attention: nothing of size [T, T] in memory; bfloat16 or
  # float16 models on a GPU), "xla" (the same call in XLA's own ops), or "auto":
  # cudnn on a GPU for bfloat16/float16 models, einsum elsewhere. The last two read
  # each row's mask as one run of real tokens (left-, right- or both-side padded); a
  # row with a hole gets NaN hidden states (see decoder.Decoder).
  full_attention: str = "auto"
  # The q, k and v projections as "separate" matmuls, or "fused": one matmul over the
  # three kernels put side by side (the params stay q, k and v; under tensor parallelism
  # the kernels, each split on its outputs, are regathered for it at every call: meant
  # for one device). A 16-row decode step at the Qwen2.5-7B shape on an H100 had XLA
  # merge the three itself (one Triton GEMM reading the kernels in place); a one-row step
  # gives it vectors, and it turned the k and v products into a multiply and a reduction
  # instead (19 us a layer, docs/performance.md). Whether "fused" is faster there is not
  # measured yet.
  qkv_matmul: str = "separate"
  # A one-token decode step's attention over the KV cache: "xla" (layers.dot_attention)
  # or "pallas" (models.decode_attention: a flash-decoding kernel, one program per row,
  # KV head and block of cache slots; Pallas's interpret mode on a CPU, for tests).
  # Windows whose size no power-of-two block from 16 to 128 divides use "xla".
  decode_attention: str = "xla"
  # Teacher-forced log-probs (training, scoring) through the vocabulary head this many
  # positions at a time: float32 [B, chunk, V] logits instead of [B, T, V], recomputed in
  # the backward pass rather than kept (engine.scoring.sequence_logprobs); 0: all at once.
  logits_chunk: int = 0
  # The checkpoint's own config.json, kept to write it back on export.
  hf_config_json: str = dataclasses.field(default="{}", compare=False, repr=False)

  @property
  def is_decoder(self) -> bool:
    return self.model_type in DECODER_TYPES

  @property
  def max_tokens(self) -> int:
    """Longest input the position table covers (514 XLM-R rows hold 512 tokens)."""
    return self.max_position_embeddings - self.position_offset

  @property
  def rope_scaling_dict(self) -> dict[str, Any]:
    return dict(self.rope_scaling)

  def replace(self, **kw: Any) -> "ModelConfig":
    return dataclasses.replace(self, **kw)


def _task_from_architectures(archs: list[str], model_type: str) -> str:
  if model_type in ENCODER_TYPES:
    return "embed"
  if any(a.endswith("ForSequenceClassification") for a in archs):
    return "seq_cls"
  return "causal_lm"


def _rope_settings(hf, path: str) -> tuple[float, tuple]:
  """Returns (theta, scaling items) from a v5 `rope_parameters` or v4 fields."""
  params = getattr(hf, "rope_parameters", None)
  if params is None:  # transformers < 5
    params = dict(getattr(hf, "rope_scaling", None) or {})
    params["rope_theta"] = getattr(hf, "rope_theta", 10000.0)
  params = dict(params)
  rope_type = params.pop("rope_type", params.pop("type", "default"))
  theta = float(params.pop("rope_theta", 10000.0))
  if rope_type not in ROPE_TYPES:
    raise ConfigError(
        f"{path}: rope type {rope_type!r} is not supported (pedrl has "
        f"{', '.join(ROPE_TYPES)}).")
  if getattr(hf, "partial_rotary_factor", 1.0) not in (None, 1.0):
    raise ConfigError(f"{path}: partial_rotary_factor != 1 is not supported.")
  if rope_type == "default":
    return theta, ()
  if rope_type == "yarn":
    return theta, _yarn_settings(params, hf, path)
  keep = {"linear": ("factor",),
          "llama3": ("factor", "low_freq_factor", "high_freq_factor",
                     "original_max_position_embeddings")}[rope_type]
  missing = [k for k in keep if params.get(k) is None]
  if missing:
    raise ConfigError(f"{path}: rope type {rope_type!r} needs {missing}.")
  items = tuple(sorted((k, float(params[k])) for k in keep))
  return theta, (("rope_type", rope_type),) + items


def _yarn_settings(params: dict, hf, path: str) -> tuple:
  """YaRN settings resolved the way transformers resolves them."""
  from pedrl.models import rope
  original = params.get("original_max_position_embeddings")
  if original is None:
    raise ConfigError(f"{path}: rope type 'yarn' needs original_max_position_embeddings.")
  factor = params.get("factor") or hf.max_position_embeddings / original
  attention = params.get("attention_factor")
  if attention is None:
    attention = rope.yarn_attention_factor(factor, params.get("mscale"), params.get("mscale_all_dim"))
  if params.get("attn_factor") is not None:
    # DeepSeek-R1-0528-Qwen3-8B ships `attn_factor`; vLLM multiplies it in, transformers
    # ignores the key. pedrl follows transformers, the reference its parity is checked on.
    logging.warning("%s: rope 'attn_factor'=%s is ignored, as transformers ignores it "
                    "(vLLM would scale cos/sin by it).", path, params["attn_factor"])
  items = dict(factor=factor, original_max_position_embeddings=original,
               attention_factor=attention, beta_fast=params.get("beta_fast") or 32,
               beta_slow=params.get("beta_slow") or 1,
               truncate=float(params.get("truncate", True) is not False))
  return (("rope_type", "yarn"),) + tuple(sorted((k, float(v)) for k, v in items.items()))


def _stored_dtype(raw: dict) -> str:
  """The checkpoint's own dtype: bfloat16 for half-precision weights, else float32."""
  stored = str(raw.get("dtype") or raw.get("torch_dtype") or "float32")
  return "bfloat16" if stored in ("bfloat16", "float16") else "float32"


def _eos_ids(value) -> tuple:
  if value is None:
    return ()
  return tuple(value) if isinstance(value, (list, tuple)) else (int(value),)


def _all_eos_ids(ckpt_dir: str, hf) -> tuple:
  """EOS ids of config.json plus generation_config.json (where -Instruct models list more)."""
  ids = list(_eos_ids(getattr(hf, "eos_token_id", None)))
  gen = os.path.join(ckpt_dir, "generation_config.json")
  if os.path.isfile(gen):
    try:
      with open(gen) as f:
        ids += [i for i in _eos_ids(json.load(f).get("eos_token_id")) if i not in ids]
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise ConfigError(f"{gen}: not valid JSON ({e}).") from e
  return tuple(ids)


def _encoder_config(hf, path: str, common: dict) -> ModelConfig:
  """BERT and XLM-RoBERTa: the same blocks; XLM-R offsets its positions past the pad id."""
  if getattr(hf, "position_embedding_type", "absolute") != "absolute":
    raise ConfigError(f"{path}: only absolute encoder position embeddings are supported.")
  if getattr(hf, "is_decoder", False):
    # transformers then masks attention causally; pedrl's encoder is bidirectional only.
    raise ConfigError(f"{path}: is_decoder=true (causal attention) is not supported for encoders.")
  offset = 0
  if common["model_type"] == "xlm-roberta":
    if hf.pad_token_id is None:
      raise ConfigError(f"{path}: XLM-RoBERTa needs pad_token_id (positions start past it).")
    offset = hf.pad_token_id + 1
    if hf.max_position_embeddings <= offset:
      raise ConfigError(f"{path}: max_position_embeddings={hf.max_position_embeddings} leaves "
                        f"no positions past the offset {offset} (pad_token_id + 1).")
  return ModelConfig(
      num_kv_heads=hf.num_attention_heads, head_dim=hf.hidden_size // hf.num_attention_heads,
      norm_eps=hf.layer_norm_eps, type_vocab_size=hf.type_vocab_size, position_offset=offset,
      qkv_bias=True, o_bias=True, mlp_bias=True, **common)


def from_hf(ckpt_dir: str, task: str | None = None, **runtime: Any) -> ModelConfig:
  """Reads `ckpt_dir/config.json` into a ModelConfig.

  Args:
    ckpt_dir: a Hugging Face checkpoint directory.
    task: 'causal_lm', 'seq_cls' or 'embed'; by default from `architectures`.
    **runtime: runtime fields such as dtype='float32' or remat=True. The dtype
      defaults to the checkpoint's own: bfloat16 for bf16/fp16 weights (real
      models), float32 for float32 ones (the testdata models).
  """
  path = os.path.join(ckpt_dir, "config.json")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path}: no config.json in the checkpoint directory.")
  try:
    with open(path) as f:
      raw = json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ConfigError(f"{path}: not valid JSON ({e}).") from e
  model_type = raw.get("model_type")
  if model_type not in SUPPORTED_TYPES:
    raise ConfigError(
        f"{path}: model_type {model_type!r} is not supported; pedrl ports "
        f"{', '.join(SUPPORTED_TYPES)}.")
  import transformers  # Slow import; only needed here.
  # AutoConfig fills family defaults exactly as transformers does.
  hf = transformers.AutoConfig.from_pretrained(ckpt_dir, local_files_only=True)
  runtime.setdefault("dtype", _stored_dtype(raw))
  task = task or _task_from_architectures(raw.get("architectures") or [], model_type)
  if task not in TASKS:
    raise ConfigError(f"task {task!r} is not one of {TASKS}.")
  if (model_type in ENCODER_TYPES) != (task == "embed"):
    raise ConfigError(f"{path}: task {task!r} does not fit model_type {model_type!r}.")

  common = dict(
      model_type=model_type, task=task, vocab_size=hf.vocab_size,
      hidden_size=hf.hidden_size, num_layers=hf.num_hidden_layers,
      num_heads=hf.num_attention_heads, intermediate_size=hf.intermediate_size,
      max_position_embeddings=hf.max_position_embeddings,
      hidden_act=hf.hidden_act, pad_token_id=hf.pad_token_id,
      bos_token_id=getattr(hf, "bos_token_id", None),
      eos_token_ids=_all_eos_ids(ckpt_dir, hf),
      hf_config_json=json.dumps(raw), **runtime)
  if model_type in ENCODER_TYPES:
    return _encoder_config(hf, path, common)

  if hf.hidden_act != "silu":
    raise ConfigError(f"{path}: decoder hidden_act {hf.hidden_act!r}; pedrl expects 'silu'.")
  if getattr(hf, "use_sliding_window", False):
    raise ConfigError(f"{path}: sliding-window attention is not supported.")
  theta, scaling = _rope_settings(hf, path)
  head_dim = getattr(hf, "head_dim", None) or hf.hidden_size // hf.num_attention_heads
  attention_bias = bool(getattr(hf, "attention_bias", False))
  return ModelConfig(
      num_kv_heads=hf.num_key_value_heads, head_dim=head_dim,
      norm_eps=hf.rms_norm_eps,
      # Qwen2 always has q/k/v biases and none on o; Llama and Qwen3 use one flag.
      qkv_bias=True if model_type == "qwen2" else attention_bias,
      o_bias=False if model_type == "qwen2" else attention_bias,
      mlp_bias=bool(getattr(hf, "mlp_bias", False)),
      qk_norm=model_type == "qwen3",
      tie_embeddings=bool(getattr(hf, "tie_word_embeddings", False)),
      rope_theta=theta, rope_scaling=scaling,
      num_labels=hf.num_labels if task == "seq_cls" else 0, **common)
