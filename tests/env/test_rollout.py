"""Rollouts: scenarios, views, the tutor mask, stop rules, shrinking batches, records.

Most tests drive `rollout.run` with scripted speakers: samplers whose reply is a
function of the context they were fed, so the tests know every message and can
read back exactly which tokens each model saw. The last ones run the real
sampler on the testdata models.
"""
import dataclasses
import types
import zlib

import jax
import numpy as np
import pytest

from pedrl import models
from pedrl.engine import Sampler, SamplingParams, sampling
from pedrl.engine.scoring import sequence_logprobs
from pedrl.env import chat, dialogue, rollout
from pedrl.env.party import Party
from pedrl.env.problems import Problem, problem_id
from pedrl.tokenizer import load_tokenizer

SECRET = "SECRET-PLAN-42"


class _Cache(dict):
  """The scripted sampler's cache: each row's fed ids and its slots (`size`, as KVCache)."""
  size = property(lambda self: self["size"])


class ScriptedSampler:
  """The rollout's sampler interface over a reply function `script(context_text)`.

  Its "cache" holds each row's fed token ids; every generate call is logged as
  (rows asked for, rows in the cache, the contexts). Each reply ends with
  " #<tag from the row's key>:<crc32 of the context>", so rollouts of one
  problem differ and a test can tell which context produced a message.
  """

  def __init__(self, tokenizer, script, stop_id):
    self.tokenizer, self.script, self.stop_id = tokenizer, script, stop_id
    self.cfg = types.SimpleNamespace(max_position_embeddings=1 << 20)
    self.calls = []

  def padded_batch(self, n):
    return n

  def new_cache(self, batch, size):
    return _Cache(rows=[[] for _ in range(batch)], size=size)

  def select_rows(self, cache, rows, batch=None):
    rows = list(rows) + [rows[0]] * ((batch or len(rows)) - len(rows))
    return _Cache(rows=[list(cache["rows"][r]) for r in rows], size=cache["size"])

  def clear_rows(self, cache, rows):
    for r in rows:
      cache["rows"][r] = []
    return cache

  def make_room(self, cache, need, limit=None):
    room = lambda: cache["size"] - max(len(r) for r in cache["rows"])
    if room() < need and limit:  # Grows to the limit, as Sampler.make_room may.
      cache["size"] = max(cache["size"], limit)
    return cache, room()

  def generate(self, params, rows, keys, sp, cache=None):
    cache = cache or self.new_cache(len(rows), 1 << 20)
    n, width = len(rows), sp.max_new_tokens
    tokens = np.zeros((n, width), np.int64)
    lengths, stopped, texts = np.zeros(n, int), np.zeros(n, bool), []
    contexts = []
    for i, new in enumerate(rows):
      cache["rows"][i] += list(new)
      context = self.tokenizer.decode(cache["rows"][i])
      contexts.append(context)
      tag = int(np.asarray(jax.random.key_data(keys[i])).sum()) % 9973
      reply = f"{self.script(context)} #{tag}:{zlib.crc32(context.encode())}"
      ids = list(self.tokenizer(reply, add_special_tokens=False)["input_ids"])
      ids = ids + [self.stop_id] if len(ids) < width else ids[:width]
      stopped[i], lengths[i] = ids[-1] == self.stop_id, len(ids)
      tokens[i, :len(ids)] = ids
      texts.append(self.tokenizer.decode(ids[:-1] if stopped[i] else ids))
      cache["rows"][i] += ids
    self.calls.append((n, len(cache["rows"]), contexts))
    logprobs = -0.01 * (1 + np.arange(width))[None].repeat(n, 0) * (np.arange(width) < lengths[:, None])
    gen = sampling.Generation(tokens, logprobs, lengths, stopped, texts)
    return gen, cache


def _party(tokenizer, script, stop_token, max_new=64):
  stop_id = tokenizer.convert_tokens_to_ids(stop_token)
  return Party(ScriptedSampler(tokenizer, script, stop_id), None,
                       chat.ChatFormat(tokenizer),
                       SamplingParams(max_new_tokens=max_new, stop_token_ids=(stop_id,)))


def _problem(text, answer="7"):
  return Problem(id=problem_id(text), problem=text, answer=answer)


def tutor_script(context):
  """Thinks a secret, asks a question; ends on turn 2 of problems that say 'short'."""
  turn = context.count("<|im_start|>assistant")
  end = " <end_of_conversation>" if "short" in context and turn >= 2 else ""
  return f"<think>{SECRET} turn {turn}</think>Tutor turn {turn}: what next?{end}"


def student_script(context):
  if "long-winded" in context:
    return "I think " + "really " * 60 + "so."
  return "Student says: maybe 7."


@pytest.fixture(scope="module")
def qwen_tok(testdata):
  return load_tokenizer(testdata("qwen2"))


@pytest.fixture(scope="module")
def llama_tok(testdata):
  return load_tokenizer(testdata("llama3"))


def _run(tutor_tok, student_tok, problems, group=2, **settings):
  tutor = _party(tutor_tok, tutor_script, "<|im_end|>")
  stop = "<|eot_id|>" if "<|eot_id|>" in student_tok.get_vocab() else "<|im_end|>"
  student = _party(student_tok, student_script, stop)
  stats = rollout.RolloutStats()
  out = rollout.run(problems, group, tutor, student, rollout.RolloutSettings(**settings),
                    seed=0, stats=stats)
  return out, tutor.sampler, student.sampler, stats


def test_scenario_is_per_problem_and_reproducible_by_seed():
  ids = [problem_id(f"problem {i}") for i in range(200)]
  draws = lambda seed: [rollout.problem_draws(i, rollout.RolloutSettings(), seed)[0]
                        for i in ids]
  assert draws(0) == draws(0)
  assert draws(0) != draws(1)
  share = np.mean([s == dialogue.GUIDED for s in draws(0)])
  assert 0.35 < share < 0.65  # Uniform over the two scenarios.
  fixed = rollout.RolloutSettings(scenario=dialogue.ATTEMPTED)
  assert {rollout.problem_draws(i, fixed, 0)[0] for i in ids} == {dialogue.ATTEMPTED}
  personas = rollout.RolloutSettings(personas=("shy", "bold", "careless"))
  assert {rollout.problem_draws(i, personas, 0)[1] for i in ids} == {"shy", "bold", "careless"}


def test_all_rollouts_of_a_problem_share_scenario_and_persona(qwen_tok, llama_tok):
  problems = [_problem(f"What is {i} + 3?") for i in range(6)]
  settings = dict(max_turns=4, personas=("I am shy.", "I am bold."))
  out, _, student_s, _ = _run(qwen_tok, llama_tok, problems, group=3, **settings)
  for d in out:  # Persona and scenario reach the student's prompt.
    _check_each_message_came_from_its_own_dialogue(d, qwen_tok, llama_tok,
                                                   rollout.RolloutSettings(**settings))
  for p in problems:
    group = [d for d in out if d.problem_id == p.id]
    assert len(group) == 3 and [d.rollout for d in group] == [0, 1, 2]
    assert len({(d.scenario, d.persona) for d in group}) == 1
    assert group[0].messages[0].role == (
        dialogue.STUDENT if group[0].scenario == dialogue.ATTEMPTED else dialogue.TUTOR)


def _check_views(out, student_sampler):
  for d in out:
    for m in d.messages:
      if m.role == dialogue.TUTOR:
        assert SECRET in m.thinking and SECRET in m.raw
        assert SECRET not in m.text and "<think>" not in m.text
        assert "<end_of_conversation>" not in m.text
  for _, _, contexts in student_sampler.calls:
    for context in contexts:
      assert SECRET not in context and "<think>" not in context
      assert "<end_of_conversation>" not in context


@pytest.mark.parametrize("student", ["qwen2", "llama3"])
def test_thinking_never_reaches_the_student(testdata, qwen_tok, student):
  problems = [_problem("short: what is 3 + 4?"), _problem("What is 2 + 5?")]
  out, tutor_s, student_s, _ = _run(qwen_tok, load_tokenizer(testdata(student)), problems,
                                    max_turns=6)
  assert any("<end_of_conversation>" in m.raw for d in out for m in d.messages)
  _check_views(out, student_s)
  # The tutor keeps its own thinking in its view.
  assert any(SECRET in c for _, _, cs in tutor_s.calls[1:] for c in cs)


def _check_mask(d, tok):
  ids, mask = np.asarray(d.tutor_ids), np.asarray(d.tutor_mask, bool)
  assert len(ids) == len(mask) == len(d.tutor_logprobs)
  tutor_msgs = [m for m in d.messages if m.role == dialogue.TUTOR]
  # The 1s are exactly the sampled tokens of the tutor's turns, in order.
  expected = []
  for m in tutor_msgs:
    expected += list(tok(m.raw, add_special_tokens=False)["input_ids"])
    expected += [tok.convert_tokens_to_ids("<|im_end|>")] if m.finish_reason == "stop" else []
  assert ids[mask].tolist() == expected
  for m in tutor_msgs:
    a, b = m.span
    assert mask[a:b].all() and b - a == m.num_tokens
  assert int(mask.sum()) == sum(m.num_tokens for m in tutor_msgs)
  # Nothing of the student's is under the mask; all of it is in the 0s.
  masked_text = tok.decode(ids[mask])
  for m in d.messages:
    if m.role == dialogue.STUDENT:
      assert m.text not in masked_text
      a, b = m.span
      if b:
        assert not mask[a:b].any() and m.text in tok.decode(ids[a:b])
  # Log-probs sit on the 1s only.
  lp = np.asarray(d.tutor_logprobs)
  assert (lp[~mask] == 0).all() and (lp[mask] < 0).all()


def _check_ids_equal_render(d, fmt, settings):
  """tutor_ids are what the template makes of the tutor's whole view (independent render)."""
  from pedrl.env import prompts
  view = [{"role": "system", "content": prompts.render(settings.tutor_prompt, problem=d.problem,
                                                       student_name=d.student_name)}]
  for i, m in enumerate(d.messages):
    if m.role == dialogue.TUTOR:
      view.append({"role": "assistant", "content": m.raw})
    elif i == 0:  # The attempt as the tutor read it (Message.text is wrapped already: "all").
      wrapped = m.text if settings.attempt_view == "all" else settings.attempt_prefix + m.text
      view.append({"role": "user", "content": wrapped})
    else:
      view.append({"role": "user", "content": m.text})
  while view[-1]["role"] != "assistant":  # Messages after the tutor's last turn were not fed.
    view.pop()
  whole = fmt.encode(fmt.render(view, add_generation_prompt=False))
  assert d.tutor_ids == whole[:len(d.tutor_ids)]
  last = [m for m in d.messages if m.role == dialogue.TUTOR][-1]
  closing = fmt.tokenizer.decode(whole[len(d.tutor_ids):]).strip()
  assert closing == ("" if last.finish_reason == "stop" else "<|im_end|>")


def _check_each_message_came_from_its_own_dialogue(d, tutor_tok, student_tok, settings):
  """Every message's crc is that of this dialogue's own context (no rows mixed up
  as dialogues leave the caches), persona included in the student's."""
  fmt = chat.ChatFormat(student_tok)
  view = [{"role": "system", "content": rollout.student_system_prompt(settings.student_prompt, d)}]
  for i, m in enumerate(d.messages):
    if m.role == dialogue.TUTOR:
      context = tutor_tok.decode(d.tutor_ids[:m.span[0]])
    elif i == 0:  # The attempt, from the attempt prompt.
      context = student_tok.decode(fmt.prompt_ids(rollout.attempt_chat(d.problem, settings)))
    else:
      context = student_tok.decode(fmt.prompt_ids(view))
    assert m.raw.rsplit(":", 1)[1] == str(zlib.crc32(context.encode())), (d.uid, i)
    is_attempt = i == 0 and m.role == dialogue.STUDENT
    own = m.role == dialogue.STUDENT
    view.append({"role": "assistant" if own else "user",
                 "content": m.text if is_attempt or not own else m.raw})


@pytest.mark.parametrize("scenario", [dialogue.GUIDED, dialogue.ATTEMPTED])
def test_tutor_mask_covers_exactly_the_tutor_tokens(qwen_tok, llama_tok, scenario):
  problems = [_problem("short: what is 3 + 4?"), _problem("What is 2 + 5?")]
  out, *_ = _run(qwen_tok, llama_tok, problems, max_turns=7, scenario=scenario)
  settings = rollout.RolloutSettings(scenario=scenario)
  for d in out:
    _check_mask(d, qwen_tok)
    _check_ids_equal_render(d, chat.ChatFormat(qwen_tok), settings)


def test_real_qwen_template_mask_and_thinking(shared_data, llama_tok):
  """The same checks on the real Qwen2.5-Instruct tokenizer and chat template."""
  tok = load_tokenizer(shared_data("tokenizers", "qwen2_5_instruct"))
  problems = [_problem("short: what is 3 + 4?"), _problem("What is 2 + 5?")]
  for scenario in (dialogue.GUIDED, dialogue.ATTEMPTED):
    out, _, student_s, _ = _run(tok, llama_tok, problems, max_turns=7, scenario=scenario)
    _check_views(out, student_s)
    for d in out:
      _check_mask(d, tok)
      _check_ids_equal_render(d, chat.ChatFormat(tok), rollout.RolloutSettings())
      assert d.tutor_ids[:3] == tok("<|im_start|>system\n", add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("thinking", [True, False])
def test_thinking_switch_reaches_the_tutors_template(testdata, llama_tok, thinking):
  from tests.env.test_chat import QWEN3_LIKE
  tok = load_tokenizer(testdata("qwen2"))
  tok.chat_template = QWEN3_LIKE
  out, tutor_s, student_s, _ = _run(tok, llama_tok, [_problem("What is 2 + 5?")], max_turns=6,
                                    scenario=dialogue.GUIDED, thinking=thinking)
  empty_think = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
  for _, _, contexts in tutor_s.calls:
    assert all(c.endswith(empty_think) != thinking for c in contexts)
  _check_views(out, student_s)


def test_each_stop_rule(qwen_tok, llama_tok):
  problems = [_problem("short: what is 3 + 4?"), _problem("What is 2 + 5?"),
              _problem("long-winded: what is 1 + 6?")]
  run = lambda limit: _run(qwen_tok, qwen_tok, problems, group=1, max_turns=8,
                          max_conversation_tokens=limit, scenario=dialogue.GUIDED)[0]
  plain = run(1 << 20)[1]
  assert plain.end_reason == "max_turns"
  # A limit the plain dialogue never passes; the long-winded one passes it early.
  out = run(max(len(plain.tutor_ids), plain.student_tokens))
  by = {d.problem: d for d in out}
  short, plain, long = (by[p.problem] for p in problems)
  assert short.end_reason == "end_of_conversation" and short.turns == 3
  assert short.messages[-1].role == dialogue.TUTOR
  # The limit is checked after tutor messages (reference): the 8th message is the student's.
  assert plain.end_reason == "max_turns" and plain.turns == 9
  assert plain.messages[-1].role == dialogue.TUTOR
  assert long.end_reason == "token_limit" and long.turns < 8


@pytest.mark.parametrize("scenario", [dialogue.GUIDED, dialogue.ATTEMPTED])
def test_turn_limits_count_what_they_name(qwen_tok, llama_tok, scenario):
  problems = [_problem("What is 2 + 5?")]
  roles = lambda **kw: [m.role for m in _run(qwen_tok, llama_tok, problems, group=1,
                                             scenario=scenario, **kw)[0][0].messages]
  first = dialogue.TUTOR if scenario == dialogue.GUIDED else dialogue.STUDENT
  # Every message checked: exactly max_turns messages, whoever spoke last.
  assert len(roles(max_turns=4, turn_limit="message")) == 4
  # Checked after tutor messages (the default): the dialogue ends on the first tutor
  # message at or past the limit.
  after_tutor = roles(max_turns=4)
  assert after_tutor[-1] == dialogue.TUTOR and len(after_tutor) == (5 if first == dialogue.TUTOR else 4)
  # Tutor turns (UCO's T): the third tutor message ends it, the attempt not counted.
  three = roles(max_turns=100, max_tutor_turns=3)
  assert three.count(dialogue.TUTOR) == 3 and three[-1] == dialogue.TUTOR
  assert len(three) == (5 if first == dialogue.TUTOR else 6)


@pytest.mark.parametrize("scenario, messages", [(dialogue.GUIDED, 15), (dialogue.ATTEMPTED, 16)])
def test_paper_turn_limit_is_the_reference_count(qwen_tok, llama_tok, scenario, messages):
  # Paper 003's rollout settings as its training config reads them. The reference
  # (eth-lre/PedagogicalRL @ bae10cd: max_turns = 15, checked after a teacher message
  # with len(conversation) >= max_turns) ends a guided dialogue at 15 messages and an
  # attempted one at 16 (the attempt counted), both with 8 tutor turns.
  from pedrl.jobs import base_config, settings
  paper = settings.Reader(base_config.dialogue_config("paper")).read(
      rollout.RolloutSettings, "rollout")
  out, *_ = _run(qwen_tok, llama_tok, [_problem("What is 2 + 5?")], group=1,
                 **dict(dataclasses.asdict(paper), scenario=scenario))
  d = out[0]
  assert d.end_reason == "max_turns" and d.turns == messages
  assert sum(m.role == dialogue.TUTOR for m in d.messages) == 8


def test_students_are_named_per_problem_as_the_reference_does(qwen_tok, llama_tok):
  # The reference's eight names and None (config/train_rl_model.py `student_names`), one
  # per problem, in the tutor's and the student's prompts (src/classroom.py).
  paper = rollout.RolloutSettings()
  assert paper.student_names == ("Alex", "Jamie", "Taylor", "Jordan", "Sam", "Casey",
                                 "Morgan", "Riley", "")
  ids = [problem_id(f"problem {i}") for i in range(300)]
  names = [rollout.problem_draws(i, paper, 0).student_name for i in ids]
  assert set(names) == set(paper.student_names)
  assert names == [rollout.problem_draws(i, paper, 0).student_name for i in ids]
  problems = [_problem(f"What is {i} + 5?") for i in range(6)]
  out, tutor_s, _, _ = _run(qwen_tok, llama_tok, problems, group=2, max_turns=2)
  assert len({d.student_name for d in out}) > 1
  for d in out:
    assert d.student_name == rollout.problem_draws(d.problem_id, paper, 0).student_name
    tutor = rollout.tutor_system_prompt(paper, d)
    if d.student_name:
      assert f"helping a student named {d.student_name} with" in tutor
      assert f"act as a student named {d.student_name} in" in d.student_system
    else:
      assert "helping a student with" in tutor and "act as a student in" in d.student_system
  first = [c for _, _, contexts in tutor_s.calls[:1] for c in contexts]
  assert any(rollout.tutor_system_prompt(paper, d) in c for d in out for c in first)
  # () names nobody: figure 12's and 13's text as printed.
  nameless = rollout.problem_draws(ids[0], rollout.RolloutSettings(student_names=()), 0)
  assert nameless.student_name == ""


# Qwen3's rule for earlier assistant turns (its chat template, and DeepSeek-R1-0528-Qwen3's):
# once a user message follows, only what comes after the last </think> is rendered.
DROPS_HISTORY_THINKING = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages %}{% if m['role'] == 'user' %}{% set ns.last_user = loop.index0 %}"
    "{% endif %}{% endfor -%}"
    "{%- for m in messages -%}{%- set content = m['content'] -%}"
    "{%- if m['role'] == 'assistant' and loop.index0 < ns.last_user and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}{%- endif -%}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endfor -%}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


@pytest.mark.parametrize("template, mode, dropped", [
    (DROPS_HISTORY_THINKING, "template", True), (DROPS_HISTORY_THINKING, "keep", False),
    (None, "template", False), (None, "drop", True)], ids=["qwen3_template", "qwen3_keep",
                                                          "chatml_template", "chatml_drop"])
def test_tutor_history_thinking_follows_the_template_and_the_cache_stays_exact(
    testdata, llama_tok, template, mode, dropped):
  """Every tutor turn's context (the cache row the scripted sampler decodes) is exactly
  transformers' rendering of the tutor's view at that turn: earlier thinking left out
  where the template (or `drop`) leaves it out, kept with `keep` or a template that keeps it."""
  import copy
  from pedrl.tokenizer import load_tokenizer
  keeping = load_tokenizer(testdata("qwen2"))  # ChatML: earlier thinking kept.
  tok = copy.deepcopy(keeping)
  if template:
    tok.chat_template = template
  assert chat.ChatFormat(tok).drops_history_thinking() == (template is not None)
  out, tutor_s, _, _ = _run(tok, llama_tok, [_problem("What is 2 + 5?")], group=1, max_turns=7,
                            scenario=dialogue.GUIDED, tutor_history_thinking=mode)
  d = out[0]
  settings = rollout.RolloutSettings(tutor_history_thinking=mode)
  view = [{"role": "system", "content": rollout.tutor_system_prompt(settings, d)}]
  contexts = [c for _, _, cs in tutor_s.calls for c in cs]
  tutor_turns = [i for i, m in enumerate(d.messages) if m.role == dialogue.TUTOR]
  assert len(contexts) == len(tutor_turns) == 4
  for turn, i in enumerate(tutor_turns):
    shown = [dict(m, content=chat.history_text(m["content"]))
             if mode == "drop" and m["role"] == "assistant" else m for m in view]
    # `keep` holds the turns as sampled: the view as a template that keeps thinking shows it.
    want = (keeping if mode == "keep" else tok).apply_chat_template(
        shown, tokenize=False, add_generation_prompt=True)
    assert contexts[turn] == tok.decode(tok(want, add_special_tokens=False)["input_ids"]), turn
    assert (f"{SECRET} turn" in contexts[turn]) == (turn > 0 and not dropped)
    view.append({"role": "assistant", "content": d.messages[i].raw})
    if i + 1 < len(d.messages):
      view.append({"role": "user", "content": d.messages[i + 1].text})
  # The record: the last view encoded whole and the last turn, the earlier spans cleared.
  last = d.messages[tutor_turns[-1]]
  assert tok.decode(d.tutor_ids[:last.span[0]]) == contexts[-1]
  assert (d.messages[tutor_turns[0]].span == (0, 0)) == dropped
  if not dropped:
    _check_mask(d, tok)
    return
  ids, mask = np.asarray(d.tutor_ids), np.asarray(d.tutor_mask, bool)
  assert ids[mask].tolist() == tok(last.raw, add_special_tokens=False)["input_ids"] + [
      tok.convert_tokens_to_ids("<|im_end|>")]


# Qwen3's generation prompt with thinking off: an empty think block the reply follows, which
# its rule for earlier assistant turns (DROPS_HISTORY_THINKING) leaves out of the history.
QWEN3_THINKING_SWITCH = DROPS_HISTORY_THINKING.replace(
    "{{ '<|im_start|>assistant\\n' }}{% endif %}",
    "{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is defined and not enable_thinking %}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}")


def test_thinking_off_every_turn_is_the_templates_rendering_without_earlier_empty_blocks(
    testdata, llama_tok):
  """A tutor that never thinks, on a Qwen3-style template with thinking off: each turn's
  context (the cache row the scripted sampler decodes) is exactly transformers' rendering
  of its view, with no empty think block but the last generation prompt's."""
  import copy
  tok = copy.deepcopy(load_tokenizer(testdata("qwen2")))
  tok.chat_template = QWEN3_THINKING_SWITCH
  assert chat.ChatFormat(tok, {"enable_thinking": False}).reopens_history()
  assert not chat.ChatFormat(tok, {"enable_thinking": True}).reopens_history()
  assert not chat.ChatFormat(load_tokenizer(testdata("qwen2"))).reopens_history()
  script = lambda context: f"Tutor turn {context.count('<|im_start|>assistant')}: what next?"
  tutor, student = _party(tok, script, "<|im_end|>"), _party(llama_tok, student_script,
                                                             "<|eot_id|>")
  settings = rollout.RolloutSettings(max_turns=7, scenario=dialogue.GUIDED, thinking=False)
  assert rollout.tutor_history(settings, tutor) == "template"
  d, = rollout.run([_problem("What is 2 + 5?")], 1, tutor, student, settings, seed=0)
  view = [{"role": "system", "content": rollout.tutor_system_prompt(settings, d)}]
  contexts = [c for _, _, cs in tutor.sampler.calls for c in cs]
  assert len(contexts) == 4
  for i, m in enumerate(d.messages):
    if m.role == dialogue.TUTOR:
      want = tok.apply_chat_template(view, tokenize=False, add_generation_prompt=True,
                                     enable_thinking=False)
      context = contexts.pop(0)
      assert context == tok.decode(tok(want, add_special_tokens=False)["input_ids"])
      assert context.count("<think>") == 1 and context.endswith("<think>\n\n</think>\n\n")
    view.append({"role": "assistant" if m.role == dialogue.TUTOR else "user", "content": m.raw})


def test_a_dialogue_whose_history_is_encoded_again_leaves_the_others_caches_alone(
    qwen_tok, llama_tok):
  """With earlier thinking dropped from the tutor's view, a dialogue whose tutor thought
  is fed its whole view again; a dialogue beside it that never thinks keeps its cache,
  so its contexts, tokens and trained mask are those it gets alone."""
  def script(context):  # Thinks only in problems that say "ponder".
    turn = context.count("<|im_start|>assistant")
    thought = f"<think>{SECRET}</think>" if "ponder" in context else ""
    return f"{thought}Tutor turn {turn}: what next?"
  def run(problems, uids):  # A problem's uid seeds its samples: the same in both runs.
    tutor, student = _party(qwen_tok, script, "<|im_end|>"), _party(llama_tok, student_script,
                                                                   "<|eot_id|>")
    settings = rollout.RolloutSettings(max_turns=7, scenario=dialogue.GUIDED,
                                       tutor_history_thinking="drop")
    return rollout.run(problems, 2, tutor, student, settings, seed=0,
                       problem_uids=uids), tutor.sampler
  plain, pondering = _problem("What is 2 + 5?"), _problem("ponder: what is 3 + 4?")
  alone, _ = run([plain], [1])
  beside, tutor_s = run([pondering, plain], [0, 1])
  assert [c[0] for c in tutor_s.calls] == [4] * 4  # Every tutor turn batched all four.
  for a, b in zip(alone, beside[2:]):
    assert [m.raw for m in a.messages] == [m.raw for m in b.messages]
    assert (a.tutor_ids, a.tutor_mask) == (b.tutor_ids, b.tutor_mask)
    assert all(m.span != (0, 0) for m in b.messages)  # No turn was encoded again.
    _check_mask(b, qwen_tok)
  for d in beside[:2]:  # Encoded again at every turn after its first: only its last is trained.
    tutor_turns = [m for m in d.messages if m.role == dialogue.TUTOR]
    assert SECRET not in qwen_tok.decode(d.tutor_ids[:tutor_turns[-1].span[0]])
    assert [m.span == (0, 0) for m in tutor_turns] == [True] * 3 + [False]


def test_trainers_refuse_a_tutor_view_without_its_earlier_thinking(testdata):
  from absl import app
  from pedrl.jobs import checks
  s = types.SimpleNamespace(rollout=rollout.RolloutSettings(tutor_history_thinking="drop"),
                            tutor=types.SimpleNamespace(path=testdata("qwen2")), endpoint_sides=())
  with pytest.raises(app.UsageError, match="but GRPO trains one sequence .* set it to keep"):
    checks.check_history_thinking(s, "GRPO trains")
  s.rollout = rollout.RolloutSettings()  # "template": the testdata tutor's ChatML keeps it.
  checks.check_history_thinking(s, "GRPO trains")


@pytest.mark.parametrize("view", ["all", "tutor"])
def test_the_attempt_is_wrapped_for_every_reader_as_the_reference_does(qwen_tok, llama_tok, view):
  """The reference's conversation holds the attempt wrapped ("Here is my attempt at this
  problem: …", src/classroom.py add_message): the student's own view, the post-dialogue
  solve chat, the judges' transcript and Ped-RM read it so. attempt_view=tutor: only the
  tutor (pedrl's earlier view)."""
  from pedrl.env import solving
  from pedrl.eval import pedrm
  from pedrl.rewards import judging
  out, _, student_s, _ = _run(qwen_tok, llama_tok, [_problem("What is 2 + 5?")], group=1,
                              max_turns=4, scenario=dialogue.ATTEMPTED, attempt_view=view)
  d = out[0]
  prefix = rollout.RolloutSettings().attempt_prefix
  attempt = d.messages[0]
  bare = chat.visible_text(attempt.raw)
  assert attempt.role == dialogue.STUDENT and attempt.text == (
      prefix + bare if view == "all" else bare)
  shown = prefix + bare if view == "all" else bare  # What the student and the judges read.
  later = [c for _, _, cs in student_s.calls[1:] for c in cs]  # After the attempt.
  assert later and all(shown in c for c in later)
  assert (prefix in later[0]) == (view == "all")
  d.student_system = d.student_system or "S"
  post = solving.post_dialogue_chat(d, solving.SolveSettings())
  assert post[1] == {"role": "assistant", "content": shown}
  (request, *_) = judging.requests_for([d], judging.PEDAGOGICAL_RL[:1])
  assert f"- Student: {shown}" in request.prompt
  # Ped-RM reads it as the tutor did, wrapped once.
  assert pedrm.dialogue_turns(d)[0]["content"] == prefix + bare


def test_judge_transcripts_list_the_dialogue_as_the_reference_prompts_do():
  msgs = [dialogue.Message(role=dialogue.TUTOR, text="What is 2 + 5?"),
          dialogue.Message(role=dialogue.STUDENT, text="7")]
  assert dialogue.transcript(msgs, "lines") == "- Teacher: What is 2 + 5?\n\n- Student: 7"
  assert dialogue.transcript(msgs) == "Teacher: What is 2 + 5?\n\nStudent: 7"
  from pedrl.jobs import settings
  assert settings.JudgeSettings().judge_transcript == "lines"


def test_truncated_turns_are_recorded(qwen_tok, llama_tok):
  tutor = _party(qwen_tok, tutor_script, "<|im_end|>", max_new=6)
  student = _party(llama_tok, student_script, "<|eot_id|>")
  out = rollout.run([_problem("What is 2 + 5?")], 2, tutor, student,
                    rollout.RolloutSettings(max_turns=4, scenario=dialogue.GUIDED), seed=0)
  for d in out:
    tutor_msgs = [m for m in d.messages if m.role == dialogue.TUTOR]
    assert all(m.finish_reason == "length" and m.num_tokens == 6 for m in tutor_msgs)
    assert d.truncated
    _check_mask(d, qwen_tok)
    # The cut thinking is hidden; the template's closing follows the cut turn.
    assert all(m.text == "" for m in tutor_msgs)
    _check_ids_equal_render(d, chat.ChatFormat(qwen_tok), rollout.RolloutSettings())


def test_finished_dialogues_leave_the_batch(qwen_tok, llama_tok):
  problems = [_problem("short: what is 3 + 4?"), _problem("What is 2 + 5?")]
  out, tutor_s, student_s, stats = _run(qwen_tok, llama_tok, problems, group=2, max_turns=8,
                                        turn_limit="message", scenario=dialogue.GUIDED,
                                        personas=("I am shy.",))
  assert len({d.messages[-1].raw for d in out}) == 4  # The rollouts differ.
  for d in out:
    _check_each_message_came_from_its_own_dialogue(
        d, qwen_tok, llama_tok, rollout.RolloutSettings(personas=("I am shy.",)))
  tutor_calls = [c for c in stats.calls if c[0] == dialogue.TUTOR]
  # Four dialogues talk until the short ones end after the tutor's 2nd turn.
  assert [c[1] for c in tutor_calls] == [4, 4, 2, 2]
  assert [c[2] for c in tutor_calls] == [4, 4, 2, 2]  # The cache shrinks with them.
  assert [len(cs) for _, _, cs in tutor_s.calls] == [4, 4, 2, 2]
  assert [rows for _, rows, _ in student_s.calls] == [4, 2, 2, 2]
  # The contexts still running are the long problem's, never the ended ones.
  for _, _, contexts in tutor_s.calls[2:] + student_s.calls[2:]:
    assert all("short" not in c for c in contexts)


def test_records_round_trip_through_jsonl(qwen_tok, llama_tok, tmp_path):
  out, *_ = _run(qwen_tok, llama_tok, [_problem("short: what is 3 + 4?")], max_turns=5,
                 scenario=dialogue.ATTEMPTED)
  out[0].r_sol, out[0].post_answers, out[0].post_correct = 0.5, ["7", None], [True, False]
  path = tmp_path / "d.jsonl"
  dialogue.save_jsonl(out, path)
  back = dialogue.load_jsonl(path)
  assert back == out
  assert back[0].tutor_turn_spans == out[0].tutor_turn_spans
  with open(path, "ab") as f:
    f.write(b'{"problem_id": "x"\n')
  with pytest.raises(ValueError, match="line 3"):
    dialogue.load_jsonl(path)


def test_bad_settings_are_refused():
  with pytest.raises(ValueError, match="scenario"):
    rollout.RolloutSettings(scenario="both")
  with pytest.raises(ValueError, match="force_thinking"):
    rollout.RolloutSettings(thinking=False, force_thinking=True)
  with pytest.raises(ValueError, match="unknown prompt"):
    rollout.RolloutSettings(tutor_prompt="nope/tutor")


# -- The real sampler on the testdata models ------------------------------------------------


def _real_party(testdata, name, temperature, max_new, scan_layers=False):
  cfg, model, params = models.load(testdata(name), scan_layers=scan_layers)
  tok = load_tokenizer(testdata(name))
  return Party(Sampler(model, tok), params, chat.ChatFormat(tok),
                       SamplingParams(max_new_tokens=max_new, temperature=temperature,
                                      stop_token_ids=cfg.eos_token_ids)), model


@pytest.mark.job  # A pipeline end to end in-process: 20-turn rollouts of two models.
def test_real_models_rollout_logprobs_equal_full_sequence_scoring(testdata, monkeypatch):
  """Qwen tutor, Llama student: turn-by-turn KV caches (rows leaving, compaction) give
  the tutor log-probs that scoring the whole tutor sequence at once gives."""
  from pedrl.engine import kv_cache
  compactions = []
  real_compact = kv_cache.compact
  monkeypatch.setattr(kv_cache, "compact", lambda c: compactions.append(1) or real_compact(c))
  tutor, tutor_model = _real_party(testdata, "qwen2", 1.0, 16)
  student, _ = _real_party(testdata, "llama3", 0.6, 16)
  settings = rollout.RolloutSettings(max_turns=20, max_conversation_tokens=1000,
                                     force_thinking=True)
  # One problem of each scenario (their dialogues end at different turns).
  candidates = [_problem(f"What is {i} + 10?") for i in range(20)]
  problems = [next(p for p in candidates if rollout.problem_draws(p.id, settings, 0)[0] == s)
              for s in (dialogue.GUIDED, dialogue.ATTEMPTED)]
  stats = rollout.RolloutStats()
  out = rollout.run(problems, 2, tutor, student, settings, seed=0, stats=stats)
  assert compactions, "the dialogues should outgrow the caches' free slots"
  live = [c[1] for c in stats.calls if c[0] == dialogue.TUTOR]
  assert live[0] == 4 and live[-1] < 4  # Dialogues left the batch as they ended.
  for d in out:
    assert d.end_reason in ("token_limit", "max_turns") and d.turns >= 10
    ids = np.asarray(d.tutor_ids)[None]
    lp = np.asarray(sequence_logprobs(tutor_model, tutor.params, ids, np.ones_like(ids, bool)))
    mask = np.asarray(d.tutor_mask, bool)
    np.testing.assert_allclose(lp[0][mask], np.asarray(d.tutor_logprobs)[mask], atol=1e-4)
    # The forced "<think>\n" is fed, not sampled.
    for m in d.messages:
      if m.role == dialogue.TUTOR:
        assert m.raw.startswith("<think>\n")
        a = m.span[0]
        assert not any(d.tutor_mask[a - 2:a])


@pytest.mark.job  # A pipeline end to end in-process: a config as its entry point loads it, rolled out.
def test_think_rows_of_paper_003_prompt_and_force_thinking(testdata):
  """`pedagogical_rl.py:tiny,lam1.5_think` on the testdata models: pedrl's thinking
  instruction is in the tutor's prompt, every tutor turn opens with <think>, and the
  template reward's tag terms score it (non-zero)."""
  from tests.jobs import test_variants  # The config exactly as the entry point loads it.
  from pedrl.env import prompts
  from pedrl.rewards import template
  c = test_variants._config("pedagogical_rl.py:tiny,lam1.5_think")
  assert (c["rewards"]["lam"], c["rewards"]["hard"]) == (1.5, False)
  settings = rollout.RolloutSettings(**{k: tuple(v) if isinstance(v, list) else v
                                        for k, v in c["rollout"].items()})
  tutor, _ = _real_party(testdata, "qwen2", 1.0, 12)
  student, _ = _real_party(testdata, "llama3", 0.6, 12)
  out = rollout.run([_problem("What is 3 + 4?"), _problem("What is 9 - 2?")], 2, tutor,
                    student, dataclasses.replace(settings, max_turns=4), seed=0)
  instruction = prompts.render("pedagogical_rl/think_instruction")
  for d in out:
    seen = tutor.chat.tokenizer.decode(d.tutor_ids)
    assert instruction in seen and "What is" in seen
    turns = [m.raw for m in d.messages if m.role == dialogue.TUTOR]
    assert turns and all(t.startswith("<think>") for t in turns)
    tags = (template.think_format_reward(turns) - template.tag_misuse_penalty(turns))
    assert tags != 0.0


class _Recorder:
  """A Replier that records, per call, each conversation's DialogueTurn (None: not given)."""
  max_new_tokens = 0

  def __init__(self, text):
    self.text, self.calls = text, []

  def replies(self, conversations, what, turns=None):
    from pedrl.clients.openai_compat import Reply
    self.calls.append(None if turns is None else [tuple(k) for k in turns])
    return [Reply(self.text, "stop") for _ in conversations]


def test_a_replier_is_told_each_dialogues_uid_and_its_own_turn():
  """Problem uid 7 with G = 2: dialogues 14 and 15 (uid u * G + g). In the attempted
  scenario the student's attempt (no dialogue turn: not given) is its turn 0, so its
  first reply in the dialogue is its turn 1; the tutor's turns count from 0."""
  tutor, student = _Recorder("Tutor: what next?"), _Recorder("Maybe 7.")
  settings = rollout.RolloutSettings(scenario=dialogue.ATTEMPTED, max_turns=5)
  out = rollout.run([_problem("What is 3 + 4?")], 2, tutor, student, settings, seed=0,
                    problem_uids=[7])
  assert [d.uid for d in out] == [14, 15]
  # Attempt, tutor, student, tutor, student, tutor: 6 messages, the limit met after a tutor.
  roles = [dialogue.STUDENT] + [dialogue.TUTOR, dialogue.STUDENT] * 2 + [dialogue.TUTOR]
  assert [m.role for m in out[0].messages] == roles
  assert tutor.calls == [[(14, t), (15, t)] for t in range(3)]
  assert student.calls == [None, [(14, 1), (15, 1)], [(14, 2), (15, 2)]]
