"""A model taking one side of a dialogue (tutor or student), or scoring, judging, solving."""
import dataclasses

from pedrl.engine.distribution import SamplingParams
from pedrl.env import chat


@dataclasses.dataclass(frozen=True)
class PartySettings:
  """A model by path and how it samples (the config's tutor, student, local_judge)."""
  path: str | None  # A Hugging Face checkpoint directory.
  temperature: float
  top_k: int
  top_p: float
  max_new_tokens: int  # Per turn (per reply, for a judge).


@dataclasses.dataclass
class Party:
  """A model taking one side: its sampler, current params, chat format, sampling."""
  sampler: object  # pedrl.engine.Sampler (with its tokenizer).
  params: object
  chat: chat.ChatFormat
  sampling: SamplingParams
