"""Views of a dialogue and turn-by-turn chat-template tokens, against whole-conversation renders."""
import pytest

from pedrl.env import chat
from pedrl.tokenizer import load_tokenizer


@pytest.mark.parametrize("text, visible, thinking", [
    ("<think>plan</think>Hello", "Hello", "plan"),
    ("A<think>x</think>B<think>y</think>C", "ABC", "x\ny"),
    ("Hi <think>cut off at the token limit", "Hi ", "cut off at the token limit"),
    ("opened in the prompt</think>Visible", "Visible", "opened in the prompt"),
    ("no thinking at all", "no thinking at all", ""),
])
def test_split_thinking(text, visible, thinking):
  assert chat.split_thinking(text) == (visible, thinking)


def test_visible_text_drops_thinking_and_end_marker():
  text = "<think>answer is 42, do not say</think>What is 6 times 7? <end_of_conversation>"
  assert chat.visible_text(text) == "What is 6 times 7?"
  assert chat.ends_conversation(text)
  # The marker inside thinking neither shows nor ends the dialogue.
  assert not chat.ends_conversation("<think>maybe <end_of_conversation> later</think>Go on.")


def _tokenizers(testdata, shared_data=None):
  out = [load_tokenizer(testdata("qwen2")), load_tokenizer(testdata("llama3"))]
  if shared_data is not None:
    out.append(load_tokenizer(shared_data("tokenizers", "qwen2_5_instruct")))
  return out


def _grow(fmt, messages, stop_id, cut=None):
  """The assistant's token stream built as a rollout builds it: its prompt, each of
  its turns (+ its stop token, except turn `cut`), then next_ids for what follows."""
  turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
  ids = fmt.prompt_ids(messages[:turns[0]])
  for t, a in enumerate(turns):
    ids += fmt.encode(messages[a]["content"])
    stop = None if t == cut else fmt.tokenizer.decode([stop_id])
    if stop:
      ids.append(stop_id)
    upto = turns[t + 1] if t + 1 < len(turns) else len(messages)
    ids += fmt.next_ids([m["role"] for m in messages[:a + 1]], messages[a + 1:upto], stop)
  return ids


CONVERSATION = [
    {"role": "system", "content": "You are a tutor. Problem: 3 + 4 = ?"},
    {"role": "user", "content": "Here is my attempt at this problem: it is 8."},
    {"role": "assistant", "content": "<think>they added wrong</think>Count again from 3."},
    {"role": "user", "content": "3, 4, 5, 6, 7. So 7?"},
    {"role": "assistant", "content": "Check it with 4 + 3."},
    {"role": "user", "content": "Also 7!"},
]


def test_turn_by_turn_tokens_equal_whole_render(testdata, shared_data):
  for tok in _tokenizers(testdata) + _tokenizers(testdata, shared_data)[2:]:
    fmt = chat.ChatFormat(tok)
    stop_id = tok.convert_tokens_to_ids("<|im_end|>" if "<|im_end|>" in tok.get_vocab()
                                        else "<|eot_id|>")
    whole = fmt.prompt_ids(CONVERSATION)
    assert _grow(fmt, CONVERSATION, stop_id) == whole, tok.name_or_path


def test_a_cut_turn_gets_the_templates_closing(testdata, shared_data):
  """A turn cut at its token limit has no stop token; next_ids supplies the closing."""
  for tok in _tokenizers(testdata) + _tokenizers(testdata, shared_data)[2:]:
    fmt = chat.ChatFormat(tok)
    stop_id = tok.convert_tokens_to_ids("<|im_end|>" if "<|im_end|>" in tok.get_vocab()
                                        else "<|eot_id|>")
    assert _grow(fmt, CONVERSATION, stop_id, cut=0) == fmt.prompt_ids(CONVERSATION)


# The shape of Qwen3's template: the assistant message after the last user message
# is wrapped in a think block (empty unless given), earlier ones are not, and
# enable_thinking=False puts an empty think block in the generation prompt.
QWEN3_LIKE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages %}{% if m['role'] == 'user' %}{% set ns.last_user = loop.index0 %}"
    "{% endif %}{% endfor -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' and loop.index0 > ns.last_user -%}"
    "{{ '<|im_start|>assistant\n<think>\n\n</think>\n\n' + m['content'] + '<|im_end|>\n' }}"
    "{%- else -%}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and not enable_thinking %}"
    "{{ '<think>\n\n</think>\n\n' }}{% endif %}{% endif %}")


@pytest.mark.parametrize("thinking", [True, False])
def test_template_that_rewraps_the_last_message_qwen3_style(testdata, thinking):
  tok = load_tokenizer(testdata("qwen2"))
  tok.chat_template = QWEN3_LIKE
  fmt = chat.ChatFormat(tok, {"enable_thinking": thinking})
  stop = tok.convert_tokens_to_ids("<|im_end|>")
  # What the model holds: its turns as it sampled them, after the generation prompt.
  ids = fmt.prompt_ids(CONVERSATION[:2])
  prompt_tail = "" if thinking else "<think>\n\n</think>\n\n"
  assert tok.decode(ids).endswith("assistant\n" + prompt_tail)
  ids += fmt.encode(CONVERSATION[2]["content"]) + [stop]
  ids += fmt.next_ids(["system", "user", "assistant"], CONVERSATION[3:4], "<|im_end|>")
  assert tok.decode(ids).endswith(
      "Count again from 3.<|im_end|>\n<|im_start|>user\n3, 4, 5, 6, 7. So 7?<|im_end|>\n"
      "<|im_start|>assistant\n" + prompt_tail)


def test_template_that_drops_the_models_message_is_refused(testdata):
  tok = load_tokenizer(testdata("qwen2"))
  tok.chat_template = ("{{ messages[-1]['role'] + ': ' + messages[-1]['content'] + '\n' }}"
                       "{% if add_generation_prompt %}assistant: {% endif %}")
  fmt = chat.ChatFormat(tok)
  with pytest.raises(chat.TemplateError, match="turn by turn"):
    fmt.next_ids(["system", "user", "assistant"], [{"role": "user", "content": "x"}], None)


def test_tokenizer_without_template_is_refused(testdata):
  tok = load_tokenizer(testdata("qwen2"))
  tok.chat_template = None
  with pytest.raises(chat.TemplateError, match="no chat template"):
    chat.ChatFormat(tok)
