"""Model ports: Qwen2/2.5, Qwen3 and Llama 3.x decoders, and BERT / XLM-RoBERTa encoders."""
from typing import Any

from pedrl.models.config import ModelConfig, from_hf
from pedrl.models.hf_checkpoint import build_model, load_params, save_params


def load(ckpt_dir: str, task: str | None = None, shardings: Any = None,
         **runtime: Any) -> tuple[ModelConfig, Any, Any]:
  """(config, module, params) for a Hugging Face checkpoint directory.

  `runtime` sets ModelConfig runtime fields, e.g. dtype="bfloat16", remat=True.
  `shardings` is passed to `load_params`.
  """
  cfg = from_hf(ckpt_dir, task=task, **runtime)
  return cfg, build_model(cfg), load_params(ckpt_dir, cfg, shardings)
