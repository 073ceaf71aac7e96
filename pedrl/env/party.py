"""A model taking one side of a dialogue (tutor or student), or scoring, judging, solving."""
import dataclasses

from pedrl import models
from pedrl.engine import Sampler
from pedrl.engine.distribution import SamplingParams
from pedrl.env import chat
from pedrl.tokenizer import load_tokenizer


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


def load(path: str, sampling: SamplingParams, *, mesh=None, scan_layers: bool = True,
         template_kwargs=None, stop_strings=(), params=None, **runtime) -> Party:
  """A party from a Hugging Face checkpoint directory (config, safetensors and a
  tokenizer with a chat template).

  Args:
    path: the checkpoint directory.
    sampling: how each turn samples; stop_token_ids None (the default) stops at
      the model's end-of-sequence ids, () at none (a logged warning).
    mesh: shard params, caches and rows over this mesh; None: one device.
    scan_layers: scanned layers (fast compiles) or unrolled (faster decoding on CPU).
    template_kwargs: passed to the chat template (e.g. {"enable_thinking": True}).
    stop_strings: strings that also end a turn.
    params: the model's params, already placed (e.g. a training run's tutor,
      `pedrl.rl.checkpoint.trained_tutor`); None reads them from `path`.
    **runtime: ModelConfig runtime fields, e.g. dtype="bfloat16", remat=True.
  """
  if params is None:
    _, model, params = models.load(path, shardings=mesh, scan_layers=scan_layers, **runtime)
  else:
    model = models.build_model(models.from_hf(path, scan_layers=scan_layers, **runtime))
  tokenizer = load_tokenizer(path, require_chat_template=True)
  sampler = Sampler(model, tokenizer, stop_strings=stop_strings, mesh=mesh)
  return Party(sampler, params, chat.ChatFormat(tokenizer, dict(template_kwargs or {})),
               sampler.with_stops(sampling))
