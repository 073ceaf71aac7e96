"""Stages that answer in JSON: a declared pydantic schema, lenient parsing, re-asking.

A stage's reply is read as the first-to-last-brace object (markdown fences,
single quotes and Python literals tolerated, keys lowercased), then validated
against the stage's schema in pydantic's lax mode (numbers where strings are
expected are converted, unknown keys ignored). A reply that does not validate
is asked again with a short note naming the keys, through the same
`pedrl.rewards.asking.ask` rounds the judges use; what is still unread after
the rounds comes back as None, for the agent's explicit fallback, and is
counted (`AskStats`: parse_failures, reasks, api_errors).
"""
import json
from collections.abc import Sequence
from typing import Any, Protocol

import pydantic

from pedrl import files
from pedrl.env import prompts
from pedrl.rewards import asking


class Schema(pydantic.BaseModel):
  """A stage's reply: lax, unknown keys ignored, numbers accepted as strings."""
  model_config = pydantic.ConfigDict(extra="ignore", coerce_numbers_to_str=True)


class Backbone(Protocol):
  """The model an agent's stages ask (pedrl.agents.backbone: a local model or an endpoint):
  per conversation its reply text; `uids` and `steps` seed a local model's samples."""

  def chat(self, conversations: Sequence[list[dict]], stage: str, uids: Sequence[int],
           steps: Sequence[int]) -> list[str]: ...


class AgentError(RuntimeError):
  """A backbone that cannot answer at all (an endpoint down, a wrong reply count)."""


def user_turn(prompt: str, **variables: Any) -> list[dict]:
  """A stage's conversation: one user message, the prompt `prompt` (pedrl.env.prompts)."""
  return [{"role": "user", "content": prompts.render(prompt, **variables)}]


def parse(text: str, schema: type[Schema]) -> Schema | None:
  """`schema` read from `text`, or None."""
  obj = files.json_object(text or "")
  if obj is None:
    return None
  try:
    return schema.model_validate(obj)
  except pydantic.ValidationError:
    return None


def keys_note(schema: type[Schema]) -> str:
  """The re-ask note: the reply could not be read, and the keys it must have."""
  keys = ", ".join(json.dumps(k) for k in schema.model_fields)
  return (f"Your reply could not be read. Answer again with one JSON object only, "
          f"with the keys {keys}.")


def ask(backbone: Backbone, conversations: Sequence[list[dict]], schema: type[Schema], stage: str,
        uids: Sequence[int], steps: Sequence[int], rounds: int,
        stats: asking.AskStats) -> tuple[list, list]:
  """(per conversation its reply read as `schema` or None after `rounds` rounds, and
  its last reply's raw text: what a fallback may keep).

  `steps[i]` numbers conversation i's call for its instance (the local backbone's
  random stream); round r adds r * 1000 so a re-ask draws afresh."""
  raw = [""] * len(conversations)

  def complete(idx, round_):
    convs = [conversations[i] if not round_ else
             conversations[i] + [{"role": "user", "content": keys_note(schema)}] for i in idx]
    out = backbone.chat(convs, stage, [uids[i] for i in idx],
                        [steps[i] + 1000 * round_ for i in idx])
    for i, text in zip(idx, out):
      raw[i] = text if isinstance(text, str) else raw[i]
    return out

  got = asking.ask(list(range(len(conversations))), complete,
                   lambda _, text: parse(text, schema), rounds, stats, who=f"agent {stage}",
                   error=AgentError)
  return got.answers, raw
