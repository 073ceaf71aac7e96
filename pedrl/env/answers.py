"""Final answers: the last \\boxed{...} of a solution, and whether it is correct.

Papers 003 and 000 score a student attempt by its last boxed answer. Correctness
is decided by math-verify (symbolic equivalence: 0.5 = \\frac{1}{2}, 1,000 = 1000)
or, to reproduce reference numbers that used plain string comparison, by exact
match after stripping surrounding whitespace, ignoring case (nothing else, `$`
included, is removed), of the answer the reference's own extraction reads.
"""
import functools
import re

from math_verify import parse, verify
# Re-exported: defined there, importable without JAX.
from pedrl.env.settings import MATCH_MODES

_BOX = re.compile(r"\\(?:boxed|fbox)\s*")


def last_boxed(text: str) -> str | None:
  """Content of the last \\boxed{...} (or \\fbox{...}) in text, braces matched; None if none.

  A box whose braces never close is ignored, and an earlier complete one is used.
  """
  for m in reversed(list(_BOX.finditer(text))):
    start = m.end()
    if start >= len(text) or text[start] != "{":
      continue
    depth = 0
    for i in range(start, len(text)):
      if text[i] == "{" and not _escaped(text, i):
        depth += 1
      elif text[i] == "}" and not _escaped(text, i):
        depth -= 1
        if depth == 0:
          return text[start + 1:i]
  return None


def reference_boxed(text: str) -> str | None:
  """Paper 003's reference extraction (eth-lre/PedagogicalRL @ bae10cd
  src/utils/utils.py, `extract_answer`), which `solve.match=exact` reproduces: the content
  of the last `\\boxed{` as written (no space before the brace, no \\fbox), braces
  counted with no regard to backslashes; None when that box never closes or is empty,
  whatever an earlier box holds."""
  at = text.rfind("\\boxed{")
  if at == -1:
    return None
  start = at + len("\\boxed{")
  depth = 1
  for i in range(start, len(text)):
    depth += {"{": 1, "}": -1}.get(text[i], 0)
    if depth == 0:
      return text[start:i] if i > start else None
  return None


def extract(text: str, mode: str = "math_verify") -> str | None:
  """The answer a solution gives, as the match mode reads it: pedrl's `last_boxed` for
  math_verify, the reference's `reference_boxed` for exact."""
  if mode not in MATCH_MODES:
    raise ValueError(f"match mode {mode!r} is not one of {MATCH_MODES}")
  return reference_boxed(text) if mode == "exact" else last_boxed(text)


def _escaped(text: str, i: int) -> bool:
  """Whether text[i] follows an odd run of backslashes: `\\{` is a literal brace, while
  `\\\\}` is a LaTeX line break and then a closing brace."""
  run = 0
  while i - run - 1 >= 0 and text[i - run - 1] == "\\":
    run += 1
  return run % 2 == 1


def _exact_form(s: str) -> str:
  """The reference code's string match: stripped, case-insensitive, nothing more."""
  return s.strip().lower()


@functools.lru_cache(maxsize=1 << 16)
def parse_answer(answer: str) -> tuple:
  """math-verify's reading of an answer, cached: a reference is parsed once, not once
  per load, filter and each of the K attempts checked against it."""
  return tuple(parse(f"\\boxed{{{answer}}}"))


def parses(answer: str) -> bool:
  """Whether math-verify reads a math expression from an answer (its string
  fallback alone does not count)."""
  return any(not isinstance(x, str) for x in parse_answer(answer))


def is_correct(predicted: str | None, reference: str, mode: str = "math_verify") -> bool:
  """Whether an extracted answer equals the reference (None, e.g. no box, is wrong)."""
  if mode not in MATCH_MODES:
    raise ValueError(f"match mode {mode!r} is not one of {MATCH_MODES}")
  if predicted is None:
    return False
  if mode == "exact":
    return _exact_form(predicted) == _exact_form(reference)
  gold = parse_answer(reference)
  return bool(gold) and verify(list(gold), parse(f"\\boxed{{{predicted}}}"))
