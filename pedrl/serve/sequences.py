"""A request's sequences as the engine thread and the request's coroutine share them
(no JAX here: the HTTP side imports this before the model loads)."""
import dataclasses
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # Names for annotations only: importing them would import JAX.
  from pedrl.engine.scoring import Alternatives


@dataclasses.dataclass(eq=False)
class Sequence:
  """One choice of one prompt: n of these per prompt. The engine thread fills in the
  outputs; the request's coroutine reads them when notified."""
  prompt: tuple  # Token ids.
  max_tokens: int  # 0: echo only (scored, never decoded).
  temperature: float = 1.0
  top_p: float = 1.0
  top_k: int = 0
  stop: tuple = ()
  seed: int = 0
  index: int = 0  # Choice number: its key is fold_in(key(seed), index).
  logprobs: int | None = None  # Alternatives per token; None: no log-probs.
  echo: bool = False
  skip_special_tokens: bool = True  # The text leaves special tokens out (vLLM's default).
  # Outputs.
  sampled: list = dataclasses.field(default_factory=list)  # Every token, a stop token too.
  # The completion's tokens as the API reports them: those behind `text`, then the stop
  # token that ended it, if one did (not in the text, but counted in usage and given a
  # log-prob, as vLLM does: echo with max_tokens=1 then always has prompt + 1 entries).
  tokens: list = dataclasses.field(default_factory=list)
  ended_by_token: bool = False  # The last of `tokens` is the stop token that ended it.
  # Tokens generated up to the end: `tokens`, and where a stop string ended it, up to the
  # token that completed it (the usage vLLM reports; the text ends before the stop).
  used: int = 0
  text: str = ""
  finish_reason: str | None = None  # "stop" or "length" once it ended.
  alternatives: "Alternatives | None" = None  # Of prompt + tokens (top log-probs).
  streamed: int = 0  # Characters of text that may be streamed (no stop string can start there).

  @property
  def holdback(self) -> int:
    """Characters at the end of the text a stop string may still begin in."""
    return max(map(len, self.stop), default=1) - 1


@dataclasses.dataclass(eq=False)
class Job:
  """One request's sequences and how the engine thread tells its coroutine about them:
  `notify(sequences)` with those that changed (called on the engine thread), or
  `fail(error)` once."""
  sequences: list
  notify: Callable[[list], None]
  fail: Callable[[Exception], None]
  cancelled: bool = False
