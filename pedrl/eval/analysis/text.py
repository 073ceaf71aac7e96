r"""Sentences, words and the response statistics of paper 001 (tables 3 and 9, fig. 2).

The paper reports words per response in the visible text and the thinking,
their total, unique words, a "mathematical content ratio" and a question rate,
without saying how it counts any of them. pedrl counts as follows, the same
way for every condition, so that conditions compare even where the absolute
numbers differ from the paper's.

Sentences (`sentences`): a line break ends a sentence (tutors write lists and
equations on their own lines); within a line a sentence ends after `.`, `!` or
`?` (a run of them, then any closing quote or bracket) followed by white space,
except after the abbreviations in ABBREVIATIONS ("e.g.", "Mr.") and after a
number's decimal point (no space follows it). A leading list marker ("- ",
"* ", "1. ", "2) ", "#") is removed. A piece with no letter or digit is no
sentence.

Words (`words`): the text split at white space, each piece stripped of the
punctuation in EDGE_PUNCTUATION at both ends; a piece that then holds a letter,
a digit or one of MATH_SYMBOLS is a word ("3", "+", "x^2", "don't"), anything
else ("—", "...") is not. Unique words: distinct words, lower-cased.

Mathematical content (`is_math`): a word is mathematical when it holds a
digit, one of MATH_SYMBOLS, a LaTeX command (`\frac`) or `$`, is a bare `-`,
`*` or `/`, or is (lower-cased, a final "s" removed if that helps) one of
MATH_TERMS: operation, quantity and number words (add, product, fraction,
twelve, ...). Words that are as often not mathematical are left out: "one"
(this one), ordinals (first, second: steps and time), "more", "than",
"mean" (what do you mean). The ratio is mathematical words / words of a
text; a response's ratio is taken over its visible text and its thinking
separately (fig. 2 centre compares the two); a condition's is the mean over
its responses with any words.

Questions: a visible sentence ending in "?" (after any closing quote or
bracket); a condition's question rate is its questions over its visible
sentences, pooled.

Per response: visible words, thinking words, total = visible + thinking,
unique words of visible + thinking together. The paper's "Total" column is not
the sum of its two columns (Think NoReward: 74.67 visible, 153.96 thinking,
112.52 total): it reads as a mean over the visible and the thinking texts
pooled, each counted as one text, and its unique words (62 of 113) likewise.
`total="pooled"` reproduces that reading; pedrl's default, "sum", is what
"words per response" says.
"""
import dataclasses
import re

import numpy as np
from pedrl.eval.settings import TOTALS  # Re-exported: defined there, importable without JAX.

ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "mr.", "mrs.", "ms.", "dr.", "prof.", "approx.",
                 "no.", "fig.", "eq.", "cf.")
EDGE_PUNCTUATION = ".,;:!?\"'`()[]{}«»“”‘’…"
MATH_SYMBOLS = set("+=<>^√π×÷±≤≥≠≈∑∫∞%·∙°")
MATH_TERMS = frozenset("""
add adds adding added addition sum plus subtract subtracting subtracted subtraction minus
difference multiply multiplying multiplied multiplication times product divide dividing divided
division quotient remainder equal equals equation expression variable solve solving calculate
calculation compute computing total fraction numerator denominator decimal percent percentage
ratio proportion number digit integer prime factor multiple square squared root cube cubed power
exponent formula area perimeter volume radius diameter circumference angle triangle rectangle
circle length width height average median probability half halves twice double triple quarter
zero two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen
sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety
hundred thousand million billion dozen rate speed distance
""".split())

_LIST_MARKER = re.compile(r"^\s*(?:[-*•]+|#+|\d+[.)])\s+")
# End of a sentence: . ! or ? (a run), closing quotes/brackets, then white space.
_END = re.compile(r"""([.!?]+["'”’)\]]*)\s+""")
_LATEX = re.compile(r"\\[A-Za-z]+")


def sentences(text: str) -> list[str]:
  """The sentences of `text` (see the module docstring for the rule)."""
  out = []
  for line in (text or "").splitlines():
    line = _LIST_MARKER.sub("", line).strip()
    start = 0
    for m in _END.finditer(line):
      before = line[start:m.end(1)]
      last = before.split()[-1].lower() if before.split() else ""
      if last in ABBREVIATIONS:
        continue
      out.append(before)
      start = m.end()
    out.append(line[start:])
  return [s.strip() for s in out if any(ch.isalnum() for ch in s)]


def words(text: str) -> list[str]:
  """The words of `text`: white-space pieces stripped of edge punctuation, holding a
  letter, a digit or a math symbol."""
  out = []
  for piece in (text or "").split():
    w = piece.strip(EDGE_PUNCTUATION)
    if w and (any(ch.isalnum() for ch in w) or any(ch in MATH_SYMBOLS for ch in w)
              or w in ("-", "*", "/")):
      out.append(w)
  return out


def is_math(word: str) -> bool:
  """Whether a word (from `words`) is mathematical content (module docstring)."""
  if any(ch.isdigit() or ch in MATH_SYMBOLS for ch in word) or "$" in word:
    return True
  if word in ("-", "*", "/") or _LATEX.search(word):
    return True
  w = word.lower()
  return w in MATH_TERMS or (w.endswith("s") and w[:-1] in MATH_TERMS)


def is_question(sentence: str) -> bool:
  return sentence.rstrip().rstrip("\"'”’)]").endswith("?")


def math_ratio(ws: list[str]) -> float | None:
  """Share of mathematical words; None for a text without words."""
  return sum(map(is_math, ws)) / len(ws) if ws else None


@dataclasses.dataclass(frozen=True)
class ResponseStats:
  """One tutor turn's numbers (None: that part is absent)."""
  visible_words: int
  thinking_words: int | None  # None: the turn has no thinking.
  total_words: int
  unique_words: int
  visible_math: float | None  # Ratio over the visible words; None without any.
  thinking_math: float | None
  sentences: int  # Visible sentences.
  questions: int  # Visible sentences ending in "?".
  # `total="pooled"`: the visible and the thinking text as separate texts.
  texts: tuple = ()  # ((words, unique words), ...) per non-empty text.


def response_stats(visible: str, thinking: str) -> ResponseStats:
  v, t = words(visible), words(thinking)
  s = sentences(visible)
  texts = tuple((len(x), len({w.lower() for w in x})) for x in (v, t) if x)
  return ResponseStats(
      visible_words=len(v), thinking_words=len(t) if thinking.strip() else None,
      total_words=len(v) + len(t), unique_words=len({w.lower() for w in v + t}),
      visible_math=math_ratio(v), thinking_math=math_ratio(t), sentences=len(s),
      questions=sum(map(is_question, s)), texts=texts)


@dataclasses.dataclass(frozen=True)
class ConditionStats:
  """A condition's row of tables 3 and 9 (means over its responses)."""
  responses: int
  visible: float
  thinking: float | None  # None: no response of the condition thinks ("—").
  total: float
  unique: float
  visible_math: float | None
  thinking_math: float | None
  question_rate: float | None  # Questions / visible sentences, pooled.
  thinking_responses: int = 0


def _mean(values) -> float | None:
  values = [v for v in values if v is not None]
  return float(np.mean(values)) if values else None


def summarize(stats: list[ResponseStats], total: str = "sum") -> ConditionStats:
  """The condition's means; `total` "sum" or "pooled" (module docstring)."""
  if total not in TOTALS:
    raise ValueError(f"total {total!r} is not one of {TOTALS}")
  if total == "sum":
    totals, uniques = [s.total_words for s in stats], [s.unique_words for s in stats]
  else:
    totals = [n for s in stats for n, _ in s.texts]
    uniques = [u for s in stats for _, u in s.texts]
  sentences_ = sum(s.sentences for s in stats)
  return ConditionStats(
      responses=len(stats), visible=_mean([s.visible_words for s in stats]) or 0.0,
      thinking=_mean([s.thinking_words for s in stats]), total=_mean(totals) or 0.0,
      unique=_mean(uniques) or 0.0, visible_math=_mean([s.visible_math for s in stats]),
      thinking_math=_mean([s.thinking_math for s in stats]),
      question_rate=sum(s.questions for s in stats) / sentences_ if sentences_ else None,
      thinking_responses=sum(s.thinking_words is not None for s in stats))
