"""Student solve attempts: r_sol by hand, grading modes, batch-independent samples."""
import numpy as np
import pytest

from pedrl import models
from pedrl.engine import Sampler, SamplingParams
from pedrl.env import chat, rollout, solving
from pedrl.env.dialogue import STUDENT, TUTOR, Dialogue, Message, transcript
from pedrl.env.party import Party
from pedrl.env.problems import Problem, problem_id
from pedrl.tokenizer import load_tokenizer


def test_solve_rate_is_mean_correctness():
  assert solving.solve_rate([True, False, True, True]) == 0.75  # 3 of K=4.
  assert solving.solve_rate([False] * 8) == 0.0
  assert solving.solve_rate([]) == 0.0


def test_grade_takes_the_last_box_and_both_match_modes():
  texts = [r"so x = \boxed{\frac{1}{2}}", r"first \boxed{3}, then \boxed{0.5}", "no box here",
           r"\boxed{\frac{2}{4}"]  # Unclosed: no answer.
  a = solving.grade(texts, "0.5")
  assert a.answers == [r"\frac{1}{2}", "0.5", None, None]
  assert a.correct == [True, True, False, False] and a.rate == 0.5
  exact = solving.grade(texts, "0.5", match="exact")
  assert exact.correct == [False, True, False, False] and exact.rate == 0.25


def test_transcript_names_the_speakers():
  msgs = [Message(role=STUDENT, text="My attempt: 8"), Message(role=TUTOR, text="Count again.")]
  assert transcript(msgs) == "Student: My attempt: 8\n\nTeacher: Count again."


def test_settings_are_checked():
  with pytest.raises(ValueError, match="match"):
    solving.SolveSettings(match="fuzzy")
  with pytest.raises(ValueError, match="positive"):
    solving.SolveSettings(k=0)


@pytest.fixture(scope="module")
def student(testdata):
  cfg, model, params = models.load(testdata("llama3"), scan_layers=False)
  tok = load_tokenizer(testdata("llama3"))
  return Party(Sampler(model, tok), params, chat.ChatFormat(tok),
                       SamplingParams(max_new_tokens=12, temperature=0.6,
                                      stop_token_ids=cfg.eos_token_ids))


def test_samples_do_not_depend_on_how_prompts_are_batched(student):
  chats = [[{"role": "user", "content": f"What is {i} + 1?"}] for i in range(3)]
  draw = lambda seed=0, stream=1, per_call=3: solving.sample(
      student, chats, [10, 11, 12], k=3, seed=seed, stream=stream, prompts_per_call=per_call)
  together, apart = draw(), draw(per_call=1)
  assert together == apart and len(together) == 3 and all(len(t) == 3 for t in together)
  assert len(set(together[0])) > 1  # The K samples differ.
  assert draw(seed=1) != together and draw(stream=2) != together


def test_post_dialogue_prompt_carries_problem_persona_and_transcript():
  d = Dialogue(problem_id="p", problem="What is 2 + 2?", answer="4", scenario="attempted",
               rollout=0, persona="You often forget to carry.",
               messages=[Message(role=STUDENT, text="It is 5."),
                         Message(role=TUTOR, text="Count on your fingers.")])
  d.student_system = rollout.student_system_prompt("pedagogical_rl/student_system", d)
  system, user = solving.post_dialogue_chat(d, solving.SolveSettings(post_format="transcript"))
  assert "What is 2 + 2?" in system["content"]
  assert system["content"].endswith("\n\nYou often forget to carry.")
  assert user["content"].startswith("Student: It is 5.\n\nTeacher: Count on your fingers.\n")
  assert r"\boxed{}" in user["content"]
  # The default, as the reference code: the dialogue as the student's chat turns, then figure 11.
  chat = solving.post_dialogue_chat(d, solving.SolveSettings())
  assert chat[0] == system
  assert chat[1:3] == [{"role": "assistant", "content": "It is 5."},
                       {"role": "user", "content": "Count on your fingers."}]
  assert chat[3]["role"] == "user" and chat[3]["content"].startswith(
      "The conversation with the teacher has ended.")
  assert "Teacher:" not in chat[3]["content"] and len(chat) == 4


def test_pre_and_post_dialogue_attempts_fill_the_records(student):
  problems = [Problem(id=problem_id(t), problem=t, answer="4") for t in ("2 + 2?", "1 + 3?")]
  pre = solving.pre_dialogue(problems, student, solving.SolveSettings(k=2), seed=0)
  assert set(pre) == {p.id for p in problems}
  assert all(len(a.texts) == 2 and a.rate == solving.solve_rate(a.correct) for a in pre.values())
  dialogues = [Dialogue(problem_id=p.id, problem=p.problem, answer=p.answer, scenario="guided",
                        rollout=0, student_system="You are a student.",
                        messages=[Message(role=TUTOR, text="What is 2 + 2?")])
               for p in problems]
  out = solving.post_dialogue(dialogues, student, solving.SolveSettings(k=3), seed=0)
  for d, a in zip(dialogues, out):
    assert len(d.post_answers) == len(d.post_correct) == 3
    assert d.r_sol == a.rate == np.mean(d.post_correct)


def test_attempt_prompts_are_the_reference_files_in_their_roles(tmp_path, monkeypatch):
  """Paper 003's reference measures the pre-dialogue solve rate with its own no-tutor
  prompt as a user message, and asks for the attempted scenario's attempt with another
  prompt as a lone system message (src/classroom.py); figure 10 is neither. pedrl ships its
  own wording of both and reads the reference's files from paths the user gives, checked
  by SHA-256."""
  from absl import logging
  from pedrl.env import prompts
  problem = "What is 6 * 7?"
  pre = solving.pre_dialogue_chat(problem, solving.SolveSettings())
  attempt = rollout.attempt_chat(problem, rollout.RolloutSettings())
  figure_10 = prompts.render("pedagogical_rl/student_pre_dialogue", problem=problem)
  assert [m["role"] for m in pre] == ["user"] and [m["role"] for m in attempt] == ["system"]
  assert figure_10 not in (pre[0]["content"], attempt[0]["content"])
  assert pre[0]["content"] == prompts.render("pedagogical_rl/student_attempt", problem=problem)
  assert problem in attempt[0]["content"] and "\\boxed{}" in attempt[0]["content"]
  # The reference's files by path: rendered as given; a text whose SHA-256 is not the
  # reference's is logged once per file.
  path = tmp_path / "attempt.txt"
  path.write_text("Solve alone:\n{{ problem }}\n")
  warned = []
  monkeypatch.setattr(logging, "warning", lambda *a: warned.append(a))
  s = solving.SolveSettings(pre_prompt_file=str(path))
  assert solving.pre_dialogue_chat(problem, s) == [
      {"role": "user", "content": f"Solve alone:\n{problem}"}]
  solving.pre_dialogue_chat(problem, s)
  assert len(warned) == 1 and "student_attempt_prompt.txt" in warned[0]
  import hashlib
  monkeypatch.setitem(prompts.REFERENCE_FILES, "student_initial_attempt_prompt.txt",
                      hashlib.sha256(path.read_text().strip().encode()).hexdigest())
  r = rollout.RolloutSettings(attempt_prompt_file=str(path))
  assert rollout.attempt_chat(problem, r) == [
      {"role": "system", "content": f"Solve alone:\n{problem}"}]
  assert len(warned) == 1  # The file is the reference's: nothing logged.
  # pedrl's earlier prompts: figure 10, as a user message, before and in the dialogue.
  old = rollout.RolloutSettings(attempt_prompt="pedagogical_rl/student_pre_dialogue",
                                attempt_role="user")
  assert rollout.attempt_chat(problem, old) == [{"role": "user", "content": figure_10}]
  with pytest.raises(ValueError, match="pre_prompt_file"):
    solving.SolveSettings(pre_prompt_file=str(tmp_path / "missing.txt"))
