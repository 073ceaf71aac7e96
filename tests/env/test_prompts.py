"""The papers' prompts render completely and go through each model's chat template."""
import re

import pytest

from pedrl.env import chat, prompts
from pedrl.tokenizer import load_tokenizer


# The agents' and the labellers' prompts take other variables; tests/agents/test_cpa.py and
# tests/eval/test_analysis.py render every one of them.
@pytest.mark.parametrize("name", sorted(n for n in prompts.SOURCES
                                        if not n.startswith(("cpa/", "baselines/", "analysis/"))))
def test_every_prompt_renders_with_its_variables(name):
  text = prompts.render(name, problem="What is 7 * 8?", conversation="Teacher: Hi.\nStudent: Hello.",
                        thinking="Turn 1: ask about units.", answer="56", message="Hm.")
  assert not re.search(r"\{\{\s*\w+\s*\}\}|\{%", text)  # Nothing left unrendered.
  if name != "pedagogical_rl/think_instruction":  # Fixed text, appended to the tutor's.
    assert "7 * 8" in text or "Teacher: Hi." in text


def test_paper_facts_in_prompts():
  assert prompts.render("pedagogical_rl/student_pre_dialogue", problem="P").startswith(
      "Please reason step by step, and put your final answer within \\boxed{}.")
  tutor = prompts.render("pedagogical_rl/tutor_system", problem="P")
  assert "<end_of_conversation>" in tutor and "must not reveal the answer" in tutor
  assert "Polya's 4-Step Problem-Solving Method" in prompts.render("thinking/tutor_polya", problem="P")
  assert prompts.render("uco/student", problem="P").count("P.") >= 1


def test_missing_variables_and_unknown_prompts_are_named():
  with pytest.raises(ValueError, match="problem"):
    prompts.render("pedagogical_rl/tutor_system")
  with pytest.raises(KeyError, match="known"):
    prompts.render("nope")


@pytest.mark.parametrize("tokenizer", ["chatml", "llama3"])
def test_chat_rendering_uses_the_tokenizers_template(testdata, tokenizer):
  tok = load_tokenizer(testdata(tokenizer, kind="tokenizers"))
  system = prompts.render("pedagogical_rl/student_system", problem="What is 7 * 8?")
  ids = chat.ChatFormat(tok).prompt_ids([{"role": "system", "content": system},
                                        {"role": "user", "content": "Hello!"}])
  text = tok.decode(ids)
  assert text == tok.apply_chat_template(
      [{"role": "system", "content": system}, {"role": "user", "content": "Hello!"}],
      tokenize=False, add_generation_prompt=True)
  assert "What is 7 * 8?" in text and text.index(system[:30]) < text.index("Hello!")


def test_real_qwen_chat_template(shared_data):
  path = shared_data("tokenizers", "qwen2_5_instruct")
  tok = load_tokenizer(path)
  tutor = prompts.render("thinking/tutor_polya", problem="What is 7 * 8?")
  ids = chat.ChatFormat(tok).prompt_ids([{"role": "system", "content": tutor},
                                        {"role": "user", "content": "I think it's 54."}])
  text = tok.decode(ids)
  assert text.startswith("<|im_start|>system\n" + tutor[:40])
  assert text.endswith("<|im_start|>user\nI think it's 54.<|im_end|>\n<|im_start|>assistant\n")


def test_a_tutor_prompt_file_replaces_the_papers_prompt(tmp_path):
  # The reference's teacher-prompt variables (problem, student_name, include_thinking), as
  # SocraticLM's own prompt file uses them; pedrl ships no such file.
  from pedrl.env import rollout
  from pedrl.env.dialogue import Dialogue
  path = tmp_path / "teacher.txt"
  path.write_text("{% if student_name %}Help {{ student_name }}.{% else %}Help a student."
                  "{% endif %}{% if include_thinking %} Think first.{% endif %}\n"
                  "Problem: {{ problem }}\n")
  d = Dialogue(problem_id="p", problem="What is 2 + 3?", answer="5", scenario="guided",
               rollout=0)
  s = rollout.RolloutSettings(tutor_prompt_file=str(path), thinking=False)
  assert rollout.tutor_system_prompt(s, d) == "Help a student.\nProblem: What is 2 + 3?"
  # include_thinking is the reference's generation_cfg.use_thinking (src/classroom.py: the
  # teacher prompt's render), pedrl's rollout.thinking: on without forcing, it is on.
  thinks = rollout.RolloutSettings(tutor_prompt_file=str(path), thinking=True)
  assert rollout.tutor_system_prompt(thinks, d) == (
      "Help a student. Think first.\nProblem: What is 2 + 3?")
  with pytest.raises(ValueError, match="tutor_prompt_file '/nowhere.txt' does not exist"):
    rollout.RolloutSettings(tutor_prompt_file="/nowhere.txt")
  path.write_text("{{ grade }}")
  with pytest.raises(ValueError, match=f"prompt file '{path}': 'grade' is undefined"):
    rollout.tutor_system_prompt(s, d)
