"""What a decoder costs: parameters, model FLOPs per token and KV-cache bytes, from its shapes.

Model FLOPs follow Chowdhery et al. 2022 (PaLM), appendix B: a training token costs
6N + 12·L·H·Q·T and a forward (scoring) token 2N + 4·L·H·Q·T, where N counts the
weights of the matmuls a token passes through, L layers, H query heads of Q
dimensions and T the sequence length (attention over the whole sequence, causal
masking not discounted, as in PaLM). pedrl's N is every layer's q, k, v, o, gate, up
and down kernels plus the LM head (V·E, once, tied or not); an untied input
embedding is a lookup and not counted, nor are norms and biases. MFU divides
these FLOPs, not the ones a run executes (rematerialization adds some), by the
device's peak.
"""
from pedrl.models.config import ModelConfig


def layer_matmul_params(cfg: ModelConfig) -> int:
  """Weights of one decoder layer's seven projections."""
  e, d = cfg.hidden_size, cfg.head_dim
  return e * d * (2 * cfg.num_heads + 2 * cfg.num_kv_heads) + 3 * e * cfg.intermediate_size


def matmul_params(cfg: ModelConfig) -> int:
  """N of the FLOP counts: the layers' projections and the LM head."""
  return cfg.num_layers * layer_matmul_params(cfg) + cfg.hidden_size * cfg.vocab_size


def layer_params(cfg: ModelConfig) -> int:
  """Every parameter of one decoder layer (projections, norms, biases)."""
  e, d, h, kv = cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads
  layer = layer_matmul_params(cfg) + 2 * e  # Two norms.
  layer += (h + 2 * kv) * d * cfg.qkv_bias + e * cfg.o_bias + 2 * d * cfg.qk_norm
  return layer + (2 * cfg.intermediate_size + e) * cfg.mlp_bias


def param_count(cfg: ModelConfig) -> int:
  """Every parameter the decoder holds (embeddings, norms and biases included)."""
  e = cfg.hidden_size
  head = 0 if cfg.tie_embeddings else e * cfg.vocab_size
  return cfg.vocab_size * e + cfg.num_layers * layer_params(cfg) + e + head


def attention_flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
  """The forward pass's attention scores and weighted values: 4·L·H·Q·T (PaLM)."""
  return 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim * seq_len


def forward_flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
  """2N + 4·L·H·Q·T: scoring a token in a sequence of seq_len."""
  return 2 * matmul_params(cfg) + attention_flops_per_token(cfg, seq_len)


def train_flops_per_token(cfg: ModelConfig, seq_len: int) -> int:
  """6N + 12·L·H·Q·T: a forward and a backward pass (the backward costs two forwards)."""
  return 3 * forward_flops_per_token(cfg, seq_len)


def kv_bytes_per_token(cfg: ModelConfig, dtype_bytes: int) -> int:
  """Keys and values of one token in every layer."""
  return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * dtype_bytes
