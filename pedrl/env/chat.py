"""What each side of a dialogue sees, and its chat-template tokens turn by turn.

The tutor's own view keeps its `<think>` blocks; the student and the judges
see `visible_text`: thinking and the `<end_of_conversation>` marker removed.

A dialogue grows one KV cache per model, so each turn appends only the tokens
that are new to that model: the template's closing of the model's own last
message, the other side's message, and the next generation prompt. They are
found by rendering the dialogue's *role skeleton* (every content replaced by
a marker) with the new messages and taking what follows the model's last
message, so templates work whatever they do to contents (Qwen2.5, Qwen3, Llama).
"""
from collections.abc import Sequence
import dataclasses
import typing

if typing.TYPE_CHECKING:  # transformers loads only where a tokenizer is made.
  from transformers import PreTrainedTokenizerBase

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
END_OF_CONVERSATION = "<end_of_conversation>"


class TemplateError(ValueError):
  """A chat template that cannot be extended turn by turn."""


def split_thinking(text: str) -> tuple[str, str]:
  """(visible part, thinking part) of a message.

  Every `<think>…</think>` block is thinking. An unclosed `<think>` (a turn cut
  at its token limit) runs to the end, and a `</think>` with no opening closes
  a block begun before the text (a template that opens it in the prompt): both
  are hidden, so thinking never reaches the other side.
  """
  visible, thinking = [], []
  close, open_ = text.find(THINK_CLOSE), text.find(THINK_OPEN)
  if close != -1 and (open_ == -1 or close < open_):
    text = THINK_OPEN + text
  while True:
    before, opened, text = text.partition(THINK_OPEN)
    visible.append(before)
    if not opened:
      break
    inside, closed, text = text.partition(THINK_CLOSE)
    thinking.append(inside)
    if not closed:
      break
  return "".join(visible), "\n".join(t.strip() for t in thinking if t.strip())


def opens_thinking(prompt: str) -> bool:
  """Whether a rendered prompt ends with an opening `<think>` (a template that opens
  the reply's thinking in its generation prompt): the reply then begins as thinking.
  Only its very end counts: a message that mentions the tag opens nothing."""
  return prompt.rstrip().endswith(THINK_OPEN)


def visible_text(text: str) -> str:
  """The message as the student and the judges see it."""
  return split_thinking(text)[0].replace(END_OF_CONVERSATION, "").strip()


def ends_conversation(text: str) -> bool:
  """The tutor wrote `<end_of_conversation>` outside its thinking."""
  return END_OF_CONVERSATION in split_thinking(text)[0]


def history_text(raw: str) -> str:
  """A model's earlier message as a thinking template shows it once a later user message
  follows: what comes after its last `</think>`, leading newlines dropped (the rule of
  Qwen3's and DeepSeek-R1-0528-Qwen3's chat templates); a message without one as it is."""
  return raw.split(THINK_CLOSE)[-1].lstrip("\n") if THINK_CLOSE in raw else raw


def _marker(i: int) -> str:
  return f"\ue000{i}\ue001"  # Private-use characters: no template trims or rewrites them.


@dataclasses.dataclass
class ChatFormat:
  """One tokenizer's chat template, rendered whole or turn by turn.

  template_kwargs go to `apply_chat_template` (e.g. enable_thinking for Qwen3).
  """
  tokenizer: "PreTrainedTokenizerBase"
  template_kwargs: dict = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    if not getattr(self.tokenizer, "chat_template", None):
      raise TemplateError(f"tokenizer {getattr(self.tokenizer, 'name_or_path', '?')!r} "
                          "has no chat template")

  def render(self, messages: Sequence[dict], add_generation_prompt: bool) -> str:
    return self.tokenizer.apply_chat_template(
        list(messages), tokenize=False, add_generation_prompt=add_generation_prompt,
        **self.template_kwargs)

  def encode(self, text: str) -> list[int]:
    """Token ids of rendered text (special tokens in it are recognized, none added)."""
    return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

  def prompt_ids(self, messages: Sequence[dict]) -> list[int]:
    """The whole conversation, ending in the generation prompt."""
    return self.encode(self.render(messages, add_generation_prompt=True))

  def drops_history_thinking(self) -> bool:
    """Whether the template leaves out an earlier assistant message's thinking once a
    user message follows it (Qwen3, DeepSeek-R1-0528-Qwen3 do; Qwen2.5, Llama do not)."""
    probe = [{"role": "user", "content": _marker(0)},
             {"role": "assistant", "content": f"{THINK_OPEN}\n{_marker(1)}\n{THINK_CLOSE}\n\n"
                                              f"{_marker(2)}"},
             {"role": "user", "content": _marker(3)}]
    text = self.render(probe, add_generation_prompt=True)
    return _marker(1) not in text and _marker(2) in text

  def reopens_history(self) -> bool:
    """Whether the template renders an earlier assistant message, once a user message
    follows it, after another opening than its generation prompt gave the reply (Qwen3
    with enable_thinking=False: the prompt's empty think block is not in its history)."""
    ask = [{"role": "user", "content": _marker(0)}]
    prompt = self.render(ask, add_generation_prompt=True)
    later = self.render(ask + [{"role": "assistant", "content": _marker(1)},
                               {"role": "user", "content": _marker(2)}],
                        add_generation_prompt=True)
    return not later.startswith(prompt + _marker(1))

  def next_ids(self, roles: Sequence[str], new_messages: Sequence[dict],
               stop_text: str | None) -> list[int]:
    """Tokens to append after a model's own last message to reach its next turn.

    Args:
      roles: roles of the messages already in the model's tokens; the last is
        the model's own message ("assistant").
      new_messages: what was said since ({"role", "content"} dicts).
      stop_text: the text of the stop token that ended the model's message, if
        it ended on one: the template's closing starts with it and it is
        already in the tokens. None (cut at the token limit): the whole closing
        is appended.
    """
    skeleton = [{"role": r, "content": _marker(i)} for i, r in enumerate(roles)]
    after = self.render(skeleton + list(new_messages), add_generation_prompt=True)
    last = _marker(len(roles) - 1)
    if last not in after:
      raise TemplateError("the chat template drops the model's own last message once more "
                          "messages follow, so a dialogue cannot be extended turn by turn")
    # What follows the model's last message. Only `after` counts: a template may
    # render the last message differently while it is last (Qwen3 wraps it in an
    # empty think block), but the cache already holds that message as sampled.
    delta = after[after.rindex(last) + len(last):]
    if stop_text and delta.startswith(stop_text):
      delta = delta[len(stop_text):]
    return self.encode(delta)
