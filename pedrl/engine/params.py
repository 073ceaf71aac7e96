"""The static controls of a sampling call, importable without JAX: config files and the
settings that build them (pedrl.jobs.settings) read them before a job loads JAX."""
import dataclasses


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """Static controls of one sampling call (hashable: part of the compiled program).

  temperature 0 means greedy. top_k 0 and top_p 1.0 disable those filters.
  Log-probs are reported under softmax(logits / temperature) before top-k /
  top-p filtering (temperature 1 when greedy): the distribution GRPO's ratio
  and KL are computed on. stop_token_ids None means the model's end-of-sequence
  ids (the Sampler fills them in, `Sampler.with_stops`); () means none.
  """
  max_new_tokens: int
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  stop_token_ids: tuple | None = None

  def __post_init__(self):
    if self.max_new_tokens <= 0:
      raise ValueError(f"max_new_tokens must be positive, got {self.max_new_tokens}")
    if not self.temperature >= 0:
      raise ValueError(f"temperature must be >= 0, got {self.temperature}")
    if not 0 < self.top_p <= 1:
      raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
    if self.top_k < 0:
      raise ValueError(f"top_k must be >= 0, got {self.top_k}")
    if self.stop_token_ids is not None:
      object.__setattr__(self, "stop_token_ids", tuple(int(i) for i in self.stop_token_ids))

  @property
  def greedy(self) -> bool:
    return self.temperature == 0

  @property
  def logprob_temperature(self) -> float:
    return 1.0 if self.greedy else self.temperature
