"""Public checkpoints' architectures by name: shapes for benchmarks and memory plans.

Random weights at these shapes (`hf_checkpoint.random_params`) time and size pedrl
at the papers' scales without downloading a checkpoint. The numbers are those of
each model's config.json on the Hugging Face hub (sources below); only the fields
that set shapes and costs are kept. `tiny` is a 2-layer model for CPU smoke runs.
"""
import dataclasses
import typing
from typing import Any

from pedrl.models.config import ModelConfig

if typing.TYPE_CHECKING:  # Annotations only: transformers loads in hf_config.
  import transformers


@dataclasses.dataclass(frozen=True)
class Architecture:
  """A decoder's shape, as the ModelConfig a checkpoint's config.json would make (with
  the default runtime choices), and where its numbers come from."""
  shape: ModelConfig
  source: str = ""

  def hf_config(self, layers: int | None = None, **fields: Any) -> "transformers.PretrainedConfig":
    """The transformers config of this shape (for models built with transformers);
    `fields` overrides or adds config.json fields."""
    import transformers
    c = self.shape
    kind = {"qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config,
            "llama": transformers.LlamaConfig}[c.model_type]
    extra = {} if c.head_dim == c.hidden_size // c.num_heads else {"head_dim": c.head_dim}
    return kind(**{
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size,
        "num_hidden_layers": layers or c.num_layers, "num_attention_heads": c.num_heads,
        "num_key_value_heads": c.num_kv_heads, "intermediate_size": c.intermediate_size,
        "max_position_embeddings": c.max_position_embeddings,
        "tie_word_embeddings": c.tie_embeddings, "rope_theta": c.rope_theta,
        **extra, **fields})

  def config(self, layers: int | None = None, **runtime: Any) -> ModelConfig:
    """A ModelConfig of this shape (`layers` trims the stack), e.g. dtype="bfloat16"."""
    return self.shape.replace(num_layers=layers or self.shape.num_layers, **runtime)


def decoder(model_type: str, vocab_size: int, hidden_size: int, num_layers: int,
            num_heads: int, num_kv_heads: int, intermediate_size: int,
            max_position_embeddings: int, head_dim: int | None = None,
            tie_embeddings: bool = False, rope_theta: float = 1e6,
            source: str = "") -> Architecture:
  """A decoder's Architecture from its config.json's shape fields (head_dim None:
  hidden_size // num_heads); the family's switches (Qwen2's q/k/v biases, Qwen3's q/k
  norm) as pedrl.models.config reads them."""
  return Architecture(ModelConfig(
      model_type=model_type, task="causal_lm", vocab_size=vocab_size, hidden_size=hidden_size,
      num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
      head_dim=head_dim or hidden_size // num_heads, intermediate_size=intermediate_size,
      norm_eps=1e-6, max_position_embeddings=max_position_embeddings,
      qkv_bias=model_type == "qwen2", qk_norm=model_type == "qwen3",
      tie_embeddings=tie_embeddings, rope_theta=rope_theta, pad_token_id=0), source)


_HUB = "config.json of huggingface.co/"
ARCHITECTURES = {
    "tiny": decoder("qwen2", 1024, 64, 2, 4, 2, 176, 32768, source="pedrl's smoke size"),
    "qwen2.5-0.5b": decoder("qwen2", 151936, 896, 24, 14, 2, 4864, 32768,
                            tie_embeddings=True, source=_HUB + "Qwen/Qwen2.5-0.5B-Instruct"),
    "qwen2.5-1.5b": decoder("qwen2", 151936, 1536, 28, 12, 2, 8960, 32768,
                            tie_embeddings=True, source=_HUB + "Qwen/Qwen2.5-1.5B-Instruct"),
    "qwen2.5-7b": decoder("qwen2", 152064, 3584, 28, 28, 4, 18944, 32768,
                          source=_HUB + "Qwen/Qwen2.5-7B-Instruct"),
    "qwen2.5-14b": decoder("qwen2", 152064, 5120, 48, 40, 8, 13824, 32768,
                           source=_HUB + "Qwen/Qwen2.5-14B-Instruct"),
    # Llama 3.1's rope scaling changes no shape or cost; plain rope stands in for it.
    "llama-3.1-8b": decoder("llama", 128256, 4096, 32, 32, 8, 14336, 131072,
                            rope_theta=5e5, source=_HUB + "meta-llama/Llama-3.1-8B-Instruct"),
    "qwen3-8b": decoder("qwen3", 151936, 4096, 36, 32, 8, 12288, 40960, head_dim=128,
                        source=_HUB + "Qwen/Qwen3-8B"),
}


def get(name: str) -> Architecture:
  """The architecture called `name`; a ValueError listing the known ones."""
  if name not in ARCHITECTURES:
    raise ValueError(f"unknown architecture {name!r}; known: {', '.join(ARCHITECTURES)}")
  return ARCHITECTURES[name]
