"""Template rewards of PedagogicalRL (paper 003, appendix B), from the tutor's raw turns.

Tags are checked on each tutor message as sampled (thinking included). By the
paper's words ("opened and properly closed without structural errors", `TAGS`
"paper", the default) a message "uses tags correctly" when it has at least one
<think>…</think> block, every block is closed before the next opens, and none is
empty; it "misuses" them when an opening or closing tag is unmatched or out of
order. By the reference code's count (eth-lre/PedagogicalRL src/classroom.py,
`get_thinking_reward`; "reference") a message uses them correctly when it has as
many <think> as </think> and at least one, and misuses them when the counts differ:
an empty block or a closing tag before its opening one pass. A message without tags
does neither. Like the reference code, the thinking terms and the
end bonus are 0 for a dialogue that was never scored (hard rejection), and the
length penalty applies regardless.
"""
from collections.abc import Iterable, Sequence
import re

_TAG = re.compile(r"</?think>")
TAGS = ("paper", "reference")  # How tag use is read (module docstring).


def _blocks(text: str):
  """(well_formed, blocks): the tag sequence open, close, open, close, ... and the contents."""
  tags = list(_TAG.finditer(text))
  ok = len(tags) % 2 == 0 and all(
      t.group() == ("<think>" if i % 2 == 0 else "</think>") for i, t in enumerate(tags))
  blocks = [text[a.end():b.start()] for a, b in zip(tags[::2], tags[1::2])] if ok else []
  return ok, blocks


def _counts(text: str) -> tuple[int, int]:
  return text.count("<think>"), text.count("</think>")


def tags_correct(text: str, tags: str = "paper") -> bool:
  if tags == "reference":
    opened, closed = _counts(text)
    return opened == closed > 0
  ok, blocks = _blocks(text)
  return ok and bool(blocks) and all(b.strip() for b in blocks)


def tags_misused(text: str, tags: str = "paper") -> bool:
  if tags == "reference":
    opened, closed = _counts(text)
    return opened != closed
  return not _blocks(text)[0]


def think_format_reward(tutor_texts: Iterable[str], c: float = 0.5, tags: str = "paper") -> float:
  """c · |{u_i with correct tags}| / |{u_i}| (paper 003, appendix B.1)."""
  tutor_texts = list(tutor_texts)
  if not tutor_texts:
    return 0.0
  return c * sum(tags_correct(t, tags) for t in tutor_texts) / len(tutor_texts)


def tag_misuse_penalty(tutor_texts: Iterable[str], c: float = 0.5, tags: str = "paper") -> float:
  """p_misuse = c · (# of wrong tags in D), counted per tutor message (paper 003, appendix B.2)."""
  return c * sum(tags_misused(t, tags) for t in tutor_texts)


def end_reward(ended_by_tutor: bool, value: float = 0.1) -> float:
  """r_end = 0.1 if the tutor ended the dialogue, else 0 (paper 003, appendix B.3)."""
  return value if ended_by_tutor else 0.0


def length_penalty(any_turn_truncated: bool, value: float = 0.5) -> float:
  """p_len = 0.5 if a tutor turn hit the token limit without EOS (paper 003, appendix B.4)."""
  return value if any_turn_truncated else 0.0


def template_reward(tutor_texts: Sequence[str], ended_by_tutor: bool, any_turn_truncated: bool,
                    scored: bool = True, c_think: float = 0.5, c_misuse: float = 0.5,
                    r_end: float = 0.1, p_len: float = 0.5, tags: str = "paper") -> float:
  """r_templ = r_think + r_end − p_misuse − p_len (paper 003, appendix B.5); `tags`, how
  tag use is read (TAGS)."""
  if tags not in TAGS:
    raise ValueError(f"template tags {tags!r} is not one of {TAGS}")
  think = end = 0.0
  if scored:
    think = (think_format_reward(tutor_texts, c_think, tags)
             - tag_misuse_penalty(tutor_texts, c_misuse, tags))
    end = end_reward(ended_by_tutor, r_end)
  return think + end - length_penalty(any_turn_truncated, p_len)
