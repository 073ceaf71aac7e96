"""The tiny thinking config runs the thinking path: its tutor's turns hold a closed
<think> block and a visible reply (testdata/models/qwen2_think), so the samples show
thinking, the student sees only the reply and the thinking judge has traces to score."""
import dataclasses

from pedrl import paths
from pedrl.env import chat, rollout
from pedrl.env.dialogue import TUTOR
from pedrl.jobs import loading, samples, settings
from pedrl.rewards import assemble


def test_the_tiny_thinking_tutor_thinks_then_replies():
  s = settings.read_settings(paths.load_config("thinking.py", "tiny"), settings.TrainingSettings)
  assert s.rollout.force_thinking and s.tutor.path.endswith("qwen2_think")
  tutor = loading.load_party(s.tutor, None, False, {"enable_thinking": True})
  student = loading.load_party(s.student, None, False)
  problems, _ = loading.load_problems(s.problems, s.job.seed)
  dialogues = rollout.run(problems[:2], 2, tutor, student,
                          dataclasses.replace(s.rollout, max_turns=2), seed=s.job.seed)
  turns = [m for d in dialogues for m in d.messages if m.role == TUTOR]
  closed = [m for m in turns if chat.THINK_CLOSE in m.raw]
  assert len(closed) >= 0.75 * len(turns), [m.raw for m in turns]
  for m in closed:  # Thinking split off, never shown to the student.
    assert m.thinking and chat.THINK_OPEN not in m.text
  assert any(m.text.strip() for m in closed)
  d = next(d for d in dialogues if any(chat.THINK_CLOSE in m.raw for m in d.messages))
  text = samples.describe(d, assemble.RewardSettings())
  assert "Tutor thinking: none" not in text and "  thinking: " in text
