"""The server's SSE chunks from a scripted sequence (no model): text sent once, in order,
and with --reasoning=split each part of a <think> reply streamed to its own field."""
import asyncio
import json

import pytest

pytest.importorskip("fastapi")

from pedrl.serve import app as app_lib
from pedrl.serve.scheduler import Job, Sequence


class Scripted:
  """A channel whose engine side is a list of (text, streamable chars, finish_reason)."""

  def __init__(self, states):
    self.seq, self.states = Sequence(prompt=(1, 2), max_tokens=64), list(states)
    self.job = Job([self.seq], notify=None, fail=None)

  @property
  def complete(self):
    return self.seq.finish_reason is not None

  async def next(self):
    self.seq.text, self.seq.streamed, self.seq.finish_reason = self.states.pop(0)
    return [self.seq]


async def _frames(events) -> list:
  return [json.loads(f[6:]) for f in [f async for f in events] if f != "data: [DONE]\n\n"]


def _chat(states, reasoning: str) -> list[dict]:
  settings = app_lib.ServeSettings(served_name="m", reasoning=reasoning)
  events = app_lib._chat_events(Scripted(states), None, settings, include_usage=True)
  return [c["choices"][0]["delta"] if c["choices"] else c["usage"]
          for c in asyncio.run(_frames(events))]


STATES = [("<thi", 0, None), ("<think>I add", 12, None), ("<think>I add.</think> Sev", 20, None),
          ("<think>I add.</think> Seven.", 28, "stop")]


def test_chat_stream_sends_the_text_once_in_order():
  deltas = _chat(STATES, "keep")
  assert deltas[0] == {"role": "assistant", "content": ""}
  assert "".join(d.get("content") or "" for d in deltas[1:-1]) == STATES[-1][0]
  assert deltas[-1] == {"completion_tokens": 0, "prompt_tokens": 2, "total_tokens": 2}


def test_split_reasoning_streams_each_part_to_its_field():
  deltas = _chat(STATES, "split")
  content = "".join(d.get("content") or "" for d in deltas[1:-1])
  thinking = "".join(d.get("reasoning_content") or "" for d in deltas[1:-1])
  assert (content, thinking) == (" Seven.", "I add.")
  assert not any("<" in (d.get("content") or "") for d in deltas)  # No half-written tag.


class Ahead(Scripted):
  """The engine thread a step ahead of the events: every look at the channel finds the
  sequence one state further on (the race a loaded server has)."""

  def __init__(self, states):
    super().__init__(states)
    self._advance()

  def _advance(self):
    if self.states:
      self.seq.text, self.seq.streamed, self.seq.finish_reason = self.states.pop(0)

  @property
  def complete(self):
    self._advance()
    return self.seq.finish_reason is not None

  async def next(self):
    self._advance()
    return [self.seq]


@pytest.mark.parametrize("states", [STATES, STATES[-2:], [("4", 0, None), ("42.", 3, "length")]])
def test_a_stream_sends_the_final_text_when_the_engine_runs_ahead(states):
  settings = app_lib.ServeSettings(served_name="m")
  events = app_lib._completion_events(Ahead(states), None, settings, echo=[""],
                                      include_usage=False)
  choices = [c["choices"][0] for c in asyncio.run(_frames(events))]
  assert "".join(c["text"] for c in choices) == states[-1][0]
  assert [c.get("finish_reason") for c in choices][-1] == states[-1][2]


def test_a_stream_read_between_the_engines_writes_loses_no_text():
  """The event loop can read a sequence's `streamed` after the engine raised it and its
  text from before (the engine writes text, then streamed): only the text read counts
  as sent."""
  states = [("ab", 5, None), ("abcde", 5, "stop")]
  settings = app_lib.ServeSettings(served_name="m")
  events = app_lib._completion_events(Scripted(states), None, settings, echo=[""],
                                      include_usage=False)
  assert "".join(c["choices"][0]["text"] for c in asyncio.run(_frames(events))) == "abcde"


# A template that opens <think> in its generation prompt (DeepSeek-R1 distills, QwQ): the
# reply starts inside the thinking, with no tag of its own until </think>.
OPENED = [("I add 3", 7, None), ("I add 3 and 4.</think>", 22, None),
          ("I add 3 and 4.</think>\n\nSeven.", 30, "stop")]


def test_a_reply_begun_as_thinking_by_its_prompt_streams_it_as_reasoning():
  settings = app_lib.ServeSettings(served_name="m", reasoning="split")
  events = app_lib._chat_events(Scripted(OPENED), None, settings, include_usage=False,
                                opened=True)
  deltas = [c["choices"][0]["delta"] for c in asyncio.run(_frames(events))]
  content = "".join(d.get("content") or "" for d in deltas[1:])
  thinking = "".join(d.get("reasoning_content") or "" for d in deltas[1:])
  # As the whole reply splits (the non-streamed answer): the answer is not lost.
  assert (content, thinking) == ("\n\nSeven.", "I add 3 and 4.")
  assert app_lib._split(OPENED[-1][0], opened=True) == (content, thinking)


@pytest.mark.parametrize("prompt, opened", [
    ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n", True),
    ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", False),
    # Qwen3 with thinking off: an empty block, closed in the prompt.
    ("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", False),
    ("<|im_start|>assistant\n<think>a</think>b<|im_end|>\n<|im_start|>assistant\n", False),
    # A message that mentions the tag opens nothing.
    ("<|im_start|>user\nBegin with <think><|im_end|>\n<|im_start|>assistant\n", False),
])
def test_a_prompt_opens_thinking_when_its_last_think_tag_is_an_opening(prompt, opened):
  from pedrl.env import chat
  assert chat.opens_thinking(prompt) is opened


def test_a_lone_closing_tag_after_streamed_content_loses_none_of_the_reply():
  """A model that closes thinking its template did not open: its first words went out as
  content before the `</think>` showed them to be thinking. They cannot be taken back, so
  the rest streams as written: the reply arrives whole, the answer included (the re-split
  no longer extended what was sent, and nothing more was sent)."""
  deltas = [d for d in _chat(OPENED, "split")[1:-1]]
  assert "".join(d.get("content") or "" for d in deltas) == OPENED[-1][0]
  assert not any(d.get("reasoning_content") for d in deltas)


def test_top_logprobs_keep_the_most_likely_of_tokens_that_read_alike():
  """Alternatives are keyed by text: of two byte tokens that both read "\ufffd", the more
  likely one's entry stands, and the chosen token is always there (OpenAI's up to
  logprobs + 1 entries)."""
  import types
  import numpy as np
  texts = {5: "\ufffd", 6: "\ufffd", 7: "a", 9: "b"}

  class Tokenizer:  # What the server asks of one; no special tokens.
    all_special_ids = []
    decode = staticmethod(lambda ids: "".join(texts.get(i, "?") for i in ids))
    convert_tokens_to_ids = staticmethod(lambda token: None)
  tokenizer = Tokenizer()
  seq = Sequence(prompt=(9,), max_tokens=2, logprobs=2)
  seq.tokens = [6, 7]
  seq.alternatives = types.SimpleNamespace(  # Per position after the first: its top 2.
      logprobs=np.array([-1.5, -0.7]), top_ids=np.array([[5, 6], [9, 5]]),
      top_logprobs=np.array([[-0.5, -1.5], [-0.2, -1.9]]))
  lp = app_lib._logprobs(tokenizer, seq)
  assert lp.tokens == ["\ufffd", "a"] and lp.token_logprobs == [-1.5, -0.7]
  # Token 6 (chosen, -1.5) reads as token 5 (-0.5): the more likely entry stands.
  assert lp.top_logprobs[0] == {"\ufffd": -0.5}
  # Token 7 (chosen, -0.7) outside the top 2: added beside them.
  assert lp.top_logprobs[1] == {"b": -0.2, "\ufffd": -1.9, "a": -0.7}
