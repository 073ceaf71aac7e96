"""A model taking one side of a dialogue (tutor or student), or scoring, judging, solving.

A local model is a `Party` (sampler, params, chat format, sampling); a side
that answers whole conversations is a `Replier`: an OpenAI-compatible endpoint
(`EndpointParty` over a `ChatClient`) or an agent (pedrl.agents.tutor.AgentTutor).
"""
import dataclasses
from typing import Any, NamedTuple, Protocol, Sequence

import jax

from pedrl import models
from pedrl.clients.openai_compat import Chat, EndpointError, Reply
from pedrl.engine import Sampler
from pedrl.engine.distribution import SamplingParams
from pedrl.env import chat
from pedrl.tokenizer import load_tokenizer
# Re-exported: defined there, importable without JAX.
from pedrl.env.settings import PartySettings, EndpointSettings


class ChatClient(Protocol):
  """An OpenAI-compatible chat endpoint's client (pedrl.clients.openai_compat.OpenAIBackend):
  per conversation a Reply, or the exception that ended its retries."""
  max_tokens: int  # Per reply.

  def chat(self, conversations: Sequence[Chat]) -> list[Reply | Exception]: ...


class DialogueTurn(NamedTuple):
  """Which dialogue a conversation is and which of the side's turns the reply will be.
  A local side's draws are a function of the run's seed and the dialogue's uid; a
  Replier that draws its own (an agent on a local backbone) keys them by these, so a
  dialogue draws the same whatever its batch, and in a resumed run."""
  uid: int  # The dialogue's uid (pedrl.env.dialogue.Dialogue.uid), distinct within a run.
  turn: int  # The side's replies in the dialogue before this one (0: its first).


class Replier(Protocol):
  """A side that answers whole conversations, each turn given the side's whole view:
  `EndpointParty` or an agent (pedrl.agents.tutor.AgentTutor). pedrl.env.rollout
  drives it turn by turn."""

  @property
  def max_new_tokens(self) -> int:
    """The most tokens a reply may have (the other side's cache keeps room for it; 0:
    not known)."""

  def replies(self, conversations: Sequence[Chat], what: str,
              turns: Sequence[DialogueTurn] | None = None) -> list[Reply]:
    """A reply per conversation; `what` names the turn in errors ("a tutor turn");
    `turns`, per conversation its dialogue and turn (a rollout's turns pass them; an
    attempt or a solve, which belong to no dialogue turn, do not). A side that samples
    on its own (an endpoint) may ignore them."""


@dataclasses.dataclass
class EndpointParty:
  """A side played by an OpenAI-compatible chat endpoint (a tutor under test such as
  GPT-4o, or an API student), a `Replier`. Thinking the endpoint returns inside
  <think> tags is hidden from the other side as for local models."""
  client: ChatClient
  name: str  # "tutor" or "student", for messages.

  @property
  def max_new_tokens(self) -> int:
    """The most tokens a reply may have (the other side's cache keeps room for it)."""
    return int(self.client.max_tokens or 0)

  def replies(self, conversations: Sequence[Chat], what: str,
              turns: Sequence[DialogueTurn] | None = None) -> list[Reply]:
    """The client's replies; EndpointError naming the first failure."""
    del turns  # The endpoint samples with its own randomness.
    out = self.client.chat(conversations)
    for r in out:
      if isinstance(r, Exception):
        raise EndpointError(f"the {self.name} endpoint failed {what} after its retries "
                            f"({type(r).__name__}: {r})")
    return out


Params = Any  # A model's weights: a pytree of arrays (pedrl.models).


@dataclasses.dataclass
class Party:
  """A model taking one side: its sampler, current params, chat format, sampling."""
  sampler: Sampler  # With its tokenizer.
  params: Params
  chat: chat.ChatFormat
  sampling: SamplingParams


def fit_context(party: "Party", ids: list, max_new_tokens: int, truncate: bool,
                what: str = "a prompt") -> tuple[list, bool]:
  """(ids, cut): `ids` leaving max_new_tokens of the party's context free, as they are
  or, with `truncate` (tiny models), cut at their start; else a ValueError."""
  context = party.sampler.cfg.max_position_embeddings
  room = context - max_new_tokens
  if len(ids) <= room:
    return ids, False
  if not truncate:
    raise ValueError(f"{what} of {len(ids)} tokens + max_new_tokens={max_new_tokens} exceeds "
                     f"the model's context of {context} (truncate_prompts cuts its start: "
                     "tiny models only)")
  return ids[len(ids) - room:], True


def load(path: str, sampling: SamplingParams, *, mesh: jax.sharding.Mesh | None = None,
         scan_layers: bool = True, template_kwargs: dict | None = None,
         stop_strings: Sequence[str] = (), params: Any = None, compact: bool = True,
         **runtime: Any) -> Party:
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
      `pedrl.runs.trained_tutor`); None reads them from `path`.
    compact: finished rows leave the decode batch (engine.Sampler's `compact`).
    **runtime: ModelConfig runtime fields, e.g. dtype="bfloat16", remat=True.
  """
  if params is None:
    _, model, params = models.load(path, shardings=mesh, scan_layers=scan_layers, **runtime)
  else:
    model = models.build_model(models.from_hf(path, scan_layers=scan_layers, **runtime))
  tokenizer = load_tokenizer(path, require_chat_template=True)
  sampler = Sampler(model, tokenizer, stop_strings=stop_strings, mesh=mesh, compact=compact)
  return Party(sampler, params, chat.ChatFormat(tokenizer, dict(template_kwargs or {})),
               sampler.with_stops(sampling))
