"""The papers' prompts, kept as Jinja text files, and chat rendering.

The tutor's and the student's prompts live in `pedrl/env/prompt_texts/`; the
judges' and the UCO oracle's and level classifier's beside the rewards code that
asks them, in `pedrl/rewards/prompt_texts/`; the agents' (CPA's stages, the
prompting baselines) in `pedrl/agents/prompt_texts/`; the transcript analysis's
labellers' in `pedrl/eval/prompt_texts/`. All are searched by name; a user's own
prompt file renders with `render_file`.

A prompt is rendered with its variables (missing ones are errors), then placed in
a conversation that each model's own Hugging Face chat template turns into
tokens (`pedrl.env.chat.ChatFormat`), so Qwen and Llama students both get their native format;
no role markers are written by hand here.
"""
import hashlib
import os
from typing import Any

import jinja2
from absl import logging

_PEDRL = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT_DIRS = tuple(os.path.join(_PEDRL, package, "prompt_texts")
                    for package in ("env", "rewards", "agents", "eval"))

# name -> where the paper gives it.
SOURCES = {
    "pedagogical_rl/student_pre_dialogue": "paper 003, figure 10",
    # pedrl's own wording where paper 003's reference code uses prompt files the paper does
    # not print (a user gives the reference's file by path: REFERENCE_FILES).
    "pedagogical_rl/student_attempt":
        "pedrl, after paper 003's reference code (the student alone: the pre-dialogue solve rate)",
    "pedagogical_rl/student_initial_attempt":
        "pedrl, after paper 003's reference code (the attempted scenario's first attempt)",
    "pedagogical_rl/student_post_dialogue": "paper 003, figure 11",
    # Figures 12 and 13 name the student where the dialogue has a name (the reference's
    # student_name, rollout.STUDENT_NAMES); the figures print the nameless form.
    "pedagogical_rl/student_system": "paper 003, figure 12",
    "pedagogical_rl/tutor_system": "paper 003, figure 13",
    # pedrl's own wording (the reference code renders one; paper 003 does not print it).
    "pedagogical_rl/think_instruction": "pedrl, for paper 003's +think rows (table 2)",
    "thinking/tutor_general": "paper 001, appendix A.1 (general tutor prompt)",
    "thinking/tutor_polya": "paper 001, appendix A.1 (pedagogical, Polya-based)",
    "thinking/student_system": "paper 001, appendix A.2",
    "uco/teacher": "paper 000, table XII",
    "uco/student": "paper 000, table XII",
    # pedrl's own (paper 000 shows no oracle or level prompt; the level definitions are its III-B-2).
    "uco/oracle": "pedrl, after paper 000 section III-B (candidates and five scaffold hints)",
    "uco/level_classifier": "pedrl, after paper 000 section III-B-2 (level definitions)",
    # Judges. Where figure 14 elides an example, pedrl's own example stands in its place.
    "judges/leakage": "paper 003, figure 14",
    "judges/helpfulness": "paper 003, figure 15",
    "judges/thinking_leakage": "paper 001, appendix A.3 (leakage judge)",
    "judges/thinking_helpfulness": "paper 001, appendix A.3 (helpfulness judge)",
    "judges/thinking_quality": "paper 001, appendix A.3 (thinking quality judge)",
    # pedrl's own: paper 002 describes CPA's stages (section 3) and prints no prompt.
    **{f"cpa/{stage}": f"pedrl, after paper 002 {where}" for stage, where in (
        ("perceive", "section 3.4 (M1, eq. 5)"), ("generate", "algorithm 1 (GENERATE)"),
        ("simulate", "algorithm 1 (SIMULATE)"), ("evaluate", "section 3.5 (EVALUATE)"),
        ("revise", "algorithm 1 (REVISE)"), ("execute", "section 3.6 (M3, eq. 6)"),
        ("monitor", "section 3.6 (eq. 7)"), ("finish", "section 3.7 (M4)"),
        ("solve", "section 3.6 (the answer a 'no direct answer' check needs; not in the paper)"))},
    # pedrl's wording of the baselines paper 002 compares with (section 4.3).
    "baselines/cot": "pedrl, after Wei et al. 2022 (chain of thought)",
    "baselines/plan_solve": "pedrl, after Wang et al. 2023 (Plan-and-Solve, its PS+ variant)",
    "baselines/sot_outline": "pedrl, after Ning et al. 2023 (Skeleton-of-Thought, skeleton)",
    "baselines/sot_expand": "pedrl, after Ning et al. 2023 (Skeleton-of-Thought, point expanding)",
    # pedrl's own: paper 001 names its labeller (GPT-5-mini) but prints no labelling prompt.
    "analysis/codebook": "pedrl, after paper 001 section 4.2 and table 5 (one code a sentence)",
    "analysis/schoenfeld": "pedrl, after paper 001 section 4.1 and appendix E.2 (three phases)",
}

# SHA-256 of the stripped text of paper 003's reference prompt files that pedrl does not
# ship (eth-lre/PedagogicalRL @ bae10cd prompt_templates/): a user gives such a file by
# path, and a text other than the reference's is logged (its numbers are then not the
# paper's).
REFERENCE_FILES = {
    # get_student_no_tutor_attempt (src/classroom.py): the pre-dialogue solve rate.
    "student_attempt_prompt.txt":
        "d7cd37820ffe71ccc438bd3660038db2b2d46464312bc834e28c78f94cee5431",
    # The attempted scenario's first attempt, a lone system message (src/classroom.py).
    "student_initial_attempt_prompt.txt":
        "0337cf8c572bf17a26b016df01d8bf53bb7a1af3cbc10f4f89f564f15bc23fe3",
    # The judges (prompt_templates/judges/; config/train_rl_model.py names them): figures
    # 14 and 15 with the examples the paper elides.
    "does_not_leak_answer.txt":
        "c43587bd50f50eda5e2e9c0ef9d841c9f94ab4357900479999a6764d8d0b08f2",
    "follows_pedagogical_values.txt":
        "6963e1b72971b9726271996e8b14d364162adc66f844fc66edf304caebf590e1",
}
_CHECKED = set()

_ENV = jinja2.Environment(loader=jinja2.FileSystemLoader(PROMPT_DIRS),
                          undefined=jinja2.StrictUndefined, keep_trailing_newline=False,
                          autoescape=False)


def render(name: str, **variables: Any) -> str:
  """The prompt `name` (a key of SOURCES) with its {{ variables }} filled in."""
  if name not in SOURCES:
    raise KeyError(f"unknown prompt {name!r}; known: {', '.join(sorted(SOURCES))}")
  try:
    return _ENV.get_template(name + ".jinja").render(**variables).strip()
  except jinja2.UndefinedError as e:
    raise ValueError(f"prompt {name!r} ({SOURCES[name]}): {e.message}") from None


def is_reference_file(path: str, reference: str) -> bool:
  """Whether the file at `path` holds the reference prompt `reference` (a key of
  REFERENCE_FILES), by the SHA-256 of its stripped text."""
  with open(path, encoding="utf-8") as f:
    text = f.read().strip()
  return hashlib.sha256(text.encode()).hexdigest() == REFERENCE_FILES[reference]


def render_file(path: str, reference: str | None = None, strip: bool = True,
                **variables: Any) -> str:
  """A prompt from a Jinja file the user gives by path (e.g. SocraticLM's own tutor prompt,
  which pedrl does not ship), with its variables; one missing is an error naming the file.
  `reference`: the REFERENCE_FILES name the file stands for; another text is logged, once.
  `strip=False` keeps the text's outer white space, as the reference renders its judges."""
  try:
    if reference and (path, reference) not in _CHECKED:
      _CHECKED.add((path, reference))
      if not is_reference_file(path, reference):
        logging.warning("prompt file %s is not paper 003's reference %s (SHA-256 differs): "
                        "its numbers will not be comparable to the paper's", path, reference)
    with open(path, encoding="utf-8") as f:
      template = _ENV.from_string(f.read())
  except OSError as e:
    raise ValueError(f"prompt file {path!r}: {e.strerror}") from None
  except jinja2.TemplateSyntaxError as e:
    raise ValueError(f"prompt file {path!r}, line {e.lineno}: {e.message}") from None
  try:
    text = template.render(**variables)
  except jinja2.UndefinedError as e:
    raise ValueError(f"prompt file {path!r}: {e.message}") from None
  return text.strip() if strip else text
