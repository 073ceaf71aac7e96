"""Paper 001's educational codebook (table 5): 82 codes in seven major categories.

The codes are the paper's facts, kept as data in `codebook.tsv` (one code a
line: number, major category, sub-category, name). The numbers are pedrl's,
in the table's order; the labeller answers with a number because two names
occur twice ("Strategy selection" under Strategy Exploration and Immediate
Decision Making, "Structuring" under Subject Matter Knowledge and Extension of
Understanding). A user's own codebook in the same layout can replace it
(`--config.codebook_file=FILE`).
"""
import collections
import dataclasses
import os

from pedrl.eval.analysis import AnalysisError

PAPER_CODEBOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "codebook.tsv")
# Table 4's short names of the major categories (the rest are written in full).
SHORT = {"Mathematical Problem Solving": "Math Problem Solving",
         "Mathematical Knowledge for Teaching": "Math Knowledge Teaching",
         "Pedagogical Intent Utterance": "Pedagogical Intent",
         "Interaction/Discourse Patterns": "Interaction Patterns"}
# Table 4 shows these four of the seven; table 8's "Major Categories" test (df = 4) reads as
# them and the rest pooled: five rows.
TABLE4 = tuple(SHORT)
OTHER = "Other"


class CodebookError(AnalysisError):
  """A codebook file that cannot be used (names the file and line)."""


@dataclasses.dataclass(frozen=True)
class Code:
  id: int
  category: str
  subcategory: str
  name: str


@dataclasses.dataclass(frozen=True)
class Codebook:
  codes: tuple  # (Code, ...) in the file's order.
  path: str = ""

  @property
  def categories(self) -> tuple:
    """Major categories in the file's order."""
    return tuple(dict.fromkeys(c.category for c in self.codes))

  def by_id(self, code_id: int) -> Code | None:
    return next((c for c in self.codes if c.id == code_id), None)

  def named(self, name: str) -> list:
    """The codes called `name` (case and spaces ignored): one, or two for a repeated name."""
    key = " ".join(name.lower().split())
    return [c for c in self.codes if " ".join(c.name.lower().split()) == key]

  def code(self, name: str) -> Code:
    """The one code called `name`; CodebookError naming the candidates otherwise."""
    found = self.named(name)
    if len(found) != 1:
      raise CodebookError(f"{'no' if not found else 'more than one'} code named {name!r} in "
                          f"{self.path or 'the codebook'}" + (
                              ": " + ", ".join(f"{c.id} ({c.subcategory})" for c in found)
                              if found else ""))
    return found[0]

  def category_of(self, code_id: int) -> str:
    return self.by_id(code_id).category

  def counts(self) -> dict:
    """{major category: number of codes} (table 5's parenthesised counts)."""
    return dict(collections.Counter(c.category for c in self.codes))


def load(path: str = PAPER_CODEBOOK) -> Codebook:
  """The codebook in `path` (tab-separated id, category, subcategory, code; # comments)."""
  if not os.path.isfile(path):
    raise CodebookError(f"{path}: no such codebook file")
  codes = []
  with open(path, encoding="utf-8") as f:
    lines = [(n, line.rstrip("\n").split("\t")) for n, line in enumerate(f, 1)
             if line.strip() and not line.startswith("#")]
  for n, row in lines:
    if row == ["id", "category", "subcategory", "code"]:
      continue
    if len(row) != 4 or not row[0].strip().isdigit() or not all(x.strip() for x in row):
      raise CodebookError(f"{path}, line {n}: not 'id<TAB>category<TAB>subcategory<TAB>code'")
    codes.append(Code(int(row[0]), *(x.strip() for x in row[1:])))
  ids = collections.Counter(c.id for c in codes)
  if dup := [i for i, k in ids.items() if k > 1]:
    raise CodebookError(f"{path}: code number {dup[0]} is used twice")
  if not codes:
    raise CodebookError(f"{path}: no codes")
  return Codebook(tuple(codes), path)
