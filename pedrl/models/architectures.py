"""Public checkpoints' architectures by name: shapes for benchmarks and memory plans.

Random weights at these shapes (`hf_checkpoint.random_params`) time and size pedrl
at the papers' scales without downloading a checkpoint. The numbers are those of
each model's config.json on the Hugging Face hub (sources below); only the fields
that set shapes and costs are kept. `tiny` is a 2-layer model for CPU smoke runs.
"""
import dataclasses

from pedrl.models.config import ModelConfig


@dataclasses.dataclass(frozen=True)
class Architecture:
  """The shape fields of a decoder's config.json."""
  model_type: str
  vocab_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  intermediate_size: int
  max_position_embeddings: int
  head_dim: int | None = None  # None: hidden_size // num_heads.
  tie_embeddings: bool = False
  rope_theta: float = 1e6
  source: str = ""

  def hf_config(self, layers: int | None = None, **fields):
    """The transformers config of this shape (for models built with transformers);
    `fields` overrides or adds config.json fields."""
    import transformers
    kind = {"qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config,
            "llama": transformers.LlamaConfig}[self.model_type]
    extra = {} if self.head_dim is None else {"head_dim": self.head_dim}
    return kind(**{
        "vocab_size": self.vocab_size, "hidden_size": self.hidden_size,
        "num_hidden_layers": layers or self.num_layers, "num_attention_heads": self.num_heads,
        "num_key_value_heads": self.num_kv_heads, "intermediate_size": self.intermediate_size,
        "max_position_embeddings": self.max_position_embeddings,
        "tie_word_embeddings": self.tie_embeddings, "rope_theta": self.rope_theta,
        **extra, **fields})

  def config(self, layers: int | None = None, **runtime) -> ModelConfig:
    """A ModelConfig of this shape (`layers` trims the stack), e.g. dtype="bfloat16"."""
    qwen2 = self.model_type == "qwen2"
    return ModelConfig(
        model_type=self.model_type, task="causal_lm", vocab_size=self.vocab_size,
        hidden_size=self.hidden_size, num_layers=layers or self.num_layers,
        num_heads=self.num_heads, num_kv_heads=self.num_kv_heads,
        head_dim=self.head_dim or self.hidden_size // self.num_heads,
        intermediate_size=self.intermediate_size, norm_eps=1e-6,
        max_position_embeddings=self.max_position_embeddings, qkv_bias=qwen2,
        qk_norm=self.model_type == "qwen3", tie_embeddings=self.tie_embeddings,
        rope_theta=self.rope_theta, pad_token_id=0, **runtime)


_HUB = "config.json of huggingface.co/"
ARCHITECTURES = {
    "tiny": Architecture("qwen2", 1024, 64, 2, 4, 2, 176, 32768, source="pedrl's smoke size"),
    "qwen2.5-0.5b": Architecture("qwen2", 151936, 896, 24, 14, 2, 4864, 32768,
                                 tie_embeddings=True, source=_HUB + "Qwen/Qwen2.5-0.5B-Instruct"),
    "qwen2.5-1.5b": Architecture("qwen2", 151936, 1536, 28, 12, 2, 8960, 32768,
                                 tie_embeddings=True, source=_HUB + "Qwen/Qwen2.5-1.5B-Instruct"),
    "qwen2.5-7b": Architecture("qwen2", 152064, 3584, 28, 28, 4, 18944, 32768,
                               source=_HUB + "Qwen/Qwen2.5-7B-Instruct"),
    "qwen2.5-14b": Architecture("qwen2", 152064, 5120, 48, 40, 8, 13824, 32768,
                                source=_HUB + "Qwen/Qwen2.5-14B-Instruct"),
    # Llama 3.1's rope scaling changes no shape or cost; plain rope stands in for it.
    "llama-3.1-8b": Architecture("llama", 128256, 4096, 32, 32, 8, 14336, 131072,
                                 rope_theta=5e5, source=_HUB + "meta-llama/Llama-3.1-8B-Instruct"),
    "qwen3-8b": Architecture("qwen3", 151936, 4096, 36, 32, 8, 12288, 40960, head_dim=128,
                             source=_HUB + "Qwen/Qwen3-8B"),
}


def get(name: str) -> Architecture:
  """The architecture called `name`; a ValueError listing the known ones."""
  if name not in ARCHITECTURES:
    raise ValueError(f"unknown architecture {name!r}; known: {', '.join(ARCHITECTURES)}")
  return ARCHITECTURES[name]
