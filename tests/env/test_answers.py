"""Answer extraction (brace matching, several boxes, none) and equivalence checks."""
import pytest

from pedrl.env.answers import is_correct, last_boxed


@pytest.mark.parametrize("text,want", [
    (r"so \boxed{42}.", "42"),
    (r"first \boxed{1} then \boxed{2}", "2"),
    (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
    (r"\boxed{\left\{1, 2\right\}}", r"\left\{1, 2\right\}"),
    (r"\boxed{a_{b_{c}} + {d}}", r"a_{b_{c}} + {d}"),
    (r"answer \fbox{7}", "7"),
    (r"\boxed {3}", "3"),
    (r"\boxed{5} and an unclosed \boxed{6", "5"),
    # A LaTeX line break (two backslashes) before a closing brace leaves the brace unescaped.
    (r"\boxed{x = 1 \\}", r"x = 1 \\"),
    (r"\boxed{\begin{cases} 1 \\ 2 \\\end{cases}}", r"\begin{cases} 1 \\ 2 \\\end{cases}"),
    (r"\boxed{\\\}}", r"\\\}"),  # A line break, then a literal brace.
    ("no box here: 42", None),
    (r"\boxed", None),
])
def test_last_boxed(text, want):
  assert last_boxed(text) == want


@pytest.mark.parametrize("pred,ref", [
    ("0.5", r"\frac{1}{2}"), ("1,000", "1000"), (r"\frac{3}{4}", "0.75"), ("x = 3", "3"),
    (r"\dfrac{1}{2}", r"\frac12"), ("2\\sqrt{2}", r"\sqrt{8}"),
])
def test_math_verify_equivalences(pred, ref):
  assert is_correct(pred, ref)


@pytest.mark.parametrize("pred,ref", [("0.51", "0.5"), ("3", "-3"), ("abc", "3"), (None, "3")])
def test_wrong_answers(pred, ref):
  assert not is_correct(pred, ref)


def test_exact_mode_reproduces_string_matching():
  assert is_correct(" 1000 ", "1000", mode="exact")
  assert is_correct(" X=3 ", "x=3", mode="exact")  # Stripped and case-insensitive, as the reference.
  assert not is_correct("$42$", "42", mode="exact")
  assert not is_correct("x = 3", "x=3", mode="exact")
  assert not is_correct("1,000", "1000", mode="exact")
  assert not is_correct("0.5", r"\frac{1}{2}", mode="exact")
  with pytest.raises(ValueError, match="match mode"):
    is_correct("1", "1", mode="fuzzy")


@pytest.mark.parametrize("text, exact, verified", [
    # Paper 003's reference (src/utils/utils.py extract_answer): the last "\boxed{" only.
    (r"so \boxed{5}. Wait, recheck: \boxed{6", None, "5"),  # Its last box never closes.
    (r"x \boxed{3} and \fbox{4}", "3", "4"),  # \fbox is no box there.
    (r"\boxed {7}", None, "7"),  # Nor is a space before the brace.
    (r"\boxed{}", None, ""),  # An empty box reads as none.
    (r"so \boxed{\frac{1}{2}}.", r"\frac{1}{2}", r"\frac{1}{2}"),
])
def test_each_match_mode_reads_the_answer_as_its_source_does(text, exact, verified):
  from pedrl.env import answers, solving
  assert answers.extract(text, "exact") == exact
  assert answers.extract(text, "math_verify") == verified
  graded = solving.grade([text], "5", match="exact")
  assert graded.answers == [exact] and graded.correct == [False]
