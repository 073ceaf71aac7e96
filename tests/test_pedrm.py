"""Ped-RM: each tutor turn scored in context, equal to transformers' sequence classifier."""
import numpy as np
import pytest

from pedrl.env.dialogue import STUDENT, TUTOR, Dialogue, Message
from pedrl.eval import pedrm

import reference

DIALOGUE = Dialogue(
    problem_id="p", problem="Ana has 3 apples and buys 4 more. How many now?", answer="7",
    scenario="guided", rollout=0,
    messages=[Message(role=TUTOR, text="What do you know about the apples?"),
              Message(role=STUDENT, text="She has 3 and buys 4."),
              Message(role=TUTOR, text="Good. What operation joins them?"),
              Message(role=STUDENT, text="Adding, so 7.")])


def test_turn_chats_end_in_each_tutor_turn():
  chats = pedrm.turn_chats(DIALOGUE)
  assert len(chats) == 2
  assert chats[0] == [{"role": "user", "content": f"Problem: {DIALOGUE.problem}"},
                      {"role": "assistant", "content": "What do you know about the apples?"}]
  assert [m["role"] for m in chats[1]] == ["user", "assistant", "user", "assistant"]
  assert chats[1][-1]["content"] == "Good. What operation joins them?"
  mtb = pedrm.turn_chats(DIALOGUE, "mathtutorbench", "Judge these teachers.")
  assert mtb[0][:2] == [{"role": "system", "content": "Judge these teachers."},
                        {"role": "user", "content": f"Problem: {DIALOGUE.problem}\n"
                                                    "Reference Solution: 7"}]


def test_scores_equal_transformers_sequence_classifier(testdata):
  path = testdata("qwen2_seqcls")
  rm = pedrm.PedRM(pedrm.PedRMSettings(path=path, rows_per_call=3))
  tok = rm.chat.tokenizer
  (ours,) = rm.score_dialogues([DIALOGUE])
  hf = reference.load(path, "seq_cls")
  want = []
  for chat in pedrm.turn_chats(DIALOGUE):
    ids = tok(tok.apply_chat_template(chat, tokenize=False), add_special_tokens=False)["input_ids"]
    want.append(float(reference.forward(hf, [ids], [[1] * len(ids)])[0, 0]))
  np.testing.assert_allclose(ours, want, atol=1e-4, rtol=0)
  assert len(set(np.round(ours, 4))) == 2  # The turns score differently.
  # Batched with other rows (left padding, filler rows): the same scores.
  other = Dialogue(**{**DIALOGUE.__dict__, "messages": DIALOGUE.messages[:1]})
  both = rm.score_dialogues([other, DIALOGUE, other])
  np.testing.assert_allclose(both[1], ours, atol=1e-5, rtol=0)
  assert len(both[0]) == len(both[2]) == 1


def test_a_causal_lm_is_refused_by_name(testdata):
  with pytest.raises(pedrm.PedRMError, match="not a one-label sequence classifier"):
    pedrm.PedRM(pedrm.PedRMSettings(path=testdata("qwen2")))
  with pytest.raises(ValueError, match="needs system_prompt_file"):
    pedrm.PedRMSettings(path=testdata("qwen2_seqcls"), format="mathtutorbench")
  pedrm.PedRMSettings(format="mathtutorbench")  # No model: nothing to check yet.


def test_mathtutorbench_format_reads_the_users_system_prompt(testdata, tmp_path):
  prompt = tmp_path / "system.txt"
  prompt.write_text("Score the teacher.\n")
  rm = pedrm.PedRM(pedrm.PedRMSettings(path=testdata("qwen2_seqcls"), format="mathtutorbench",
                                       system_prompt_file=str(prompt)))
  assert rm.system_prompt == "Score the teacher."
  mtb = rm.score_dialogues([DIALOGUE])[0]
  ref = pedrm.PedRM(pedrm.PedRMSettings(path=testdata("qwen2_seqcls"))).score_dialogues(
      [DIALOGUE])[0]
  assert len(mtb) == 2 and not np.allclose(mtb, ref)  # The context changes the score.
