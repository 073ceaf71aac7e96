"""The random Qwen2-shaped models the engine benchmarks time, and their layout flag.

A shape is a dict in transformers' `Qwen2Config` names, so one dict builds the
transformers model a benchmark compares against and pedrl's own config.
"""
from absl import flags

from pedrl.models.config import ModelConfig

QWEN25_7B = dict(num_hidden_layers=28, hidden_size=3584, intermediate_size=18944,
                 num_attention_heads=28, num_key_value_heads=4, vocab_size=152064)


def config(shape: dict, dtype: str, scan_layers: bool) -> ModelConfig:
  """pedrl's config of a Qwen2 of `shape`, with Qwen2.5's switches (q/k/v biases, rope
  theta 1e6, norm eps 1e-6, 32768 positions) and pad id 0."""
  return ModelConfig(
      "qwen2", "causal_lm", shape["vocab_size"], shape["hidden_size"],
      shape["num_hidden_layers"], shape["num_attention_heads"], shape["num_key_value_heads"],
      shape["hidden_size"] // shape["num_attention_heads"], shape["intermediate_size"], 1e-6,
      32768, qkv_bias=True, rope_theta=1e6, dtype=dtype, scan_layers=scan_layers,
      pad_token_id=0)


def define_scan_layers(default: bool) -> None:
  """--scan_layers; each benchmark picks the layout it measures by default."""
  flags.DEFINE_bool("scan_layers", default, "Scanned layers: one compiled layer body (the "
                    "engine's default); off: unrolled, which decodes faster on XLA:CPU and GPU "
                    "(ModelConfig.scan_layers).")
