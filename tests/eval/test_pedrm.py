"""Ped-RM: each tutor turn scored in context, equal to transformers' sequence classifier."""
import re

import numpy as np
import pytest
from transformers import AutoTokenizer

from pedrl.env.chat import ChatFormat
from pedrl.env.dialogue import ATTEMPTED, STUDENT, TUTOR, Dialogue, Message
from pedrl.eval import pedrm

from tests.helpers import reference

DIALOGUE = Dialogue(
    problem_id="p", problem="Ana has 3 apples and buys 4 more. How many now?", answer="7",
    scenario="guided", rollout=0,
    messages=[Message(role=TUTOR, text="What do you know about the apples?"),
              Message(role=STUDENT, text="She has 3 and buys 4."),
              Message(role=TUTOR, text="Good. What operation joins them?"),
              Message(role=STUDENT, text="Adding, so 7.")])


def test_turn_chats_end_in_each_tutor_turn():
  chats = pedrm.turn_chats(DIALOGUE, "problem_only")
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
  rm = pedrm.PedRM(pedrm.PedRMSettings(path=path, rows_per_call=3, format="problem_only"))
  tok = rm.chat.tokenizer
  (ours,) = rm.score_dialogues([DIALOGUE])
  hf = reference.load(path, "seq_cls")
  want = []
  for chat in pedrm.turn_chats(DIALOGUE, "problem_only"):
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
    pedrm.PedRM(pedrm.PedRMSettings(path=testdata("qwen2"), format="problem_only"))
  for fmt in ("pedagogical_rl", "mathtutorbench"):  # pedagogical_rl is the default.
    with pytest.raises(ValueError, match=f"format '{fmt}' needs system_prompt_file"):
      pedrm.PedRMSettings(path=testdata("qwen2_seqcls"), format=fmt)
  pedrm.PedRMSettings(format="mathtutorbench")  # No model: nothing to check yet.
  assert pedrm.PedRMSettings().format == "pedagogical_rl"


def test_mathtutorbench_format_reads_the_users_system_prompt(testdata, tmp_path):
  prompt = tmp_path / "system.txt"
  prompt.write_text("Score the teacher.\n")
  rm = pedrm.PedRM(pedrm.PedRMSettings(path=testdata("qwen2_seqcls"), format="mathtutorbench",
                                       system_prompt_file=str(prompt)))
  assert rm.system_prompt == "Score the teacher."
  mtb = rm.score_dialogues([DIALOGUE])[0]
  ref = pedrm.PedRM(pedrm.PedRMSettings(path=testdata("qwen2_seqcls"), format="problem_only")
                    ).score_dialogues([DIALOGUE])[0]
  assert len(mtb) == 2 and not np.allclose(mtb, ref)  # The context changes the score.


# -- Paper 003's format, against an input built by hand by the reference's rules ---------------

SYSTEM = "Rate how well the teacher guides the student without giving the answer away."
ATTEMPT = Dialogue(  # The attempted scenario: the student opens with its attempt.
    problem_id="q", problem="What is 3 + 4 times 2?", answer="11", scenario=ATTEMPTED,
    rollout=0,
    messages=[Message(role=STUDENT, text="I think it is 14.", raw="I think it is 14."),
              Message(role=TUTOR, text="Which operation comes first?",
                      raw="<think>They added first.</think>Which operation comes first?"),
              Message(role=STUDENT, text="Times, so 3 + 8 = 11.", raw="Times, so 3 + 8 = 11."),
              Message(role=TUTOR, text="Well done.",
                      raw="<think>Right.</think>Well done.<end_of_conversation>")])


def _by_the_reference(d: Dialogue, system: str) -> list[list[dict]]:
  """The reward model's inputs as eth-lre/PedagogicalRL (bae10cd) builds them, written here
  from its rules, not from pedrl: the dialogue as the student's view stores it (the attempt
  wrapped as the tutor read it; thinking blocks and the end marker removed), then for k = 0
  .. #student messages the context up to the k-th student message and, when the next message
  is the tutor's, that message as the scored response; eval.py passes no solution."""
  wrap = "Here is my attempt at this problem: {}"  # prompt_templates/initial_attempt_wrapper
  conv = []
  for i, m in enumerate(d.messages):
    raw = m.raw or m.text  # As sampled (DIALOGUE's messages have no thinking to hide).
    text = wrap.format(raw) if (i == 0 and d.scenario == ATTEMPTED) else raw
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.S).replace("<end_of_conversation>", "")
    conv.append(("Teacher" if m.role == TUTOR else "Student", text))
  out = []
  for k in range(sum(r == "Student" for r, _ in conv) + 1):
    seen, context = 0, []
    for r, text in conv:
      if seen == k:
        break
      seen += r == "Student"
      context.append((r, text))
    if len(context) == len(conv) or conv[len(context)][0] != "Teacher":
      continue
    out.append([{"role": "system", "content": system},
                {"role": "user", "content": "Problem: " + d.problem + "\nReference Solution: "}]
               + [{"role": "assistant" if r == "Teacher" else "user", "content": t}
                  for r, t in context]
               + [{"role": "assistant", "content": conv[len(context)][1]}])
  return out


def _tokenizer(which, testdata, shared_data):
  if which == "qwen2.5":  # The released reward model's own template (Qwen2.5).
    return AutoTokenizer.from_pretrained(shared_data("tokenizers", "qwen2_5_instruct"))
  return AutoTokenizer.from_pretrained(testdata("qwen2_seqcls"))


@pytest.mark.parametrize("which", ["qwen2.5", "testdata"])
@pytest.mark.parametrize("dialogue", [ATTEMPT, DIALOGUE], ids=["attempted", "guided"])
def test_pedagogical_rl_format_equals_the_reference_token_for_token(which, dialogue, testdata,
                                                                    shared_data):
  tok = _tokenizer(which, testdata, shared_data)
  ours = [pedrm.encode(ChatFormat(tok), c)
          for c in pedrm.turn_chats(dialogue, "pedagogical_rl", SYSTEM)]
  # vLLM's encode of apply_chat_template(..., tokenize=False), as score_each_conversation.
  want = [tok(tok.apply_chat_template(c, tokenize=False))["input_ids"]
          for c in _by_the_reference(dialogue, SYSTEM)]
  assert len(ours) == len(want) == 2
  assert ours == want
  # The first scored turn of the attempted dialogue reads the wrapped attempt before it.
  text = tok.decode(ours[0])
  assert text.startswith(f"<|im_start|>system\n{SYSTEM}<|im_end|>")  # Not the default one.
  if dialogue is ATTEMPT:
    assert "Here is my attempt at this problem: I think it is 14." in text


def test_a_system_prompt_other_than_the_released_one_is_logged(tmp_path, caplog):
  prompt = tmp_path / "system.txt"
  prompt.write_text(SYSTEM + "\n")
  with caplog.at_level("WARNING"):
    assert pedrm.read_system_prompt(str(prompt)) == SYSTEM
  assert "not the released reward model's system prompt" in caplog.text
