"""Judges: tolerant parsing, re-ask rounds and failure policies, rules, and the real
`openai` client against a scripted HTTP server on 127.0.0.1."""
import email.utils
import types

import pytest

from tests.helpers.chat_server import ChatServer
from pedrl.clients import openai_compat
from pedrl.env.dialogue import STUDENT, TUTOR, Dialogue, Message
from pedrl.env.party import Party
from pedrl.eval import judges as eval_judges
from pedrl.rewards import asking, backends, judging
from pedrl.rewards.settings import RuleJudgeSettings


# -- Parsing -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, want", [
    ('{ "reasoning": "fine", "decision": "OK" }', True),
    ('```json\n{"reasoning": "x", "decision": "REJECT"}\n```', False),
    ('Sure! Here is my evaluation: {"decision": "reject", "reasoning": "too long"} Hope it helps.',
     False),
    ("{'reasoning': 'single quotes', 'decision': 'accept'}", True),
    ('{"Decision": "Accepted"}', True),
    ('The verdict... "decision": "REJECT", "reasoning": "cut off', False),  # Broken JSON.
    ("Decision: OK", True),
    ("I think the teacher did fine.", None),
    ('{"decision": "maybe"}', None),
    ('Schema echoed: "decision": "OK or REJECT"', None),
    ("", None),
])
def test_parse_decision(text, want):
  assert judging.parse_decision(text) is want


@pytest.mark.parametrize("text, want", [
    # LaTeX as a model writes it inside a JSON string: read as written, not as escapes.
    (r'{"step": "\frac{3}{4} of \boxed{12} is \beta \times 9"}',
     r"\frac{3}{4} of \boxed{12} is \beta \times 9"),
    (r'{"step": "\neq 5, \text{so} \theta \to \right) \rho"}',
     r"\neq 5, \text{so} \theta \to \right) \rho"),
    (r'{"step": "\sqrt{2}, \( x \), \left[ \underline{a} \alpha"}',
     r"\sqrt{2}, \( x \), \left[ \underline{a} \alpha"),
    (r"{'step': 'python quotes: \frac{1}{2} \alpha'}", r"python quotes: \frac{1}{2} \alpha"),
    (r"{'step': 'It\'s \frac{1}{2}'}", r"It's \frac{1}{2}"),
    (r'{"step": "x \notin S, \therefore \nu \ne 0 as \tan x \to 0"}',
     r"x \notin S, \therefore \nu \ne 0 as \tan x \to 0"),
    # Without other single-backslash LaTeX, \n and \t before text are a newline and a tab.
    (r'{"step": "Options:\ne.g. 5, Col1\tan apple"}', "Options:\ne.g. 5, Col1\tan apple"),
    # The reply's own escapes keep their meaning: newlines, tabs, \u, quotes, a doubled backslash.
    ('{"step": "one\\nThe two\\tx \\u00e9 \\"q\\" \\\\frac"}', 'one\nThe two\tx \u00e9 "q" \\frac'),
])
def test_latex_in_a_json_reply_is_read_as_written(text, want):
  from pedrl import files
  assert files.json_object(text) == {"step": want}


@pytest.mark.parametrize("text, want", [
    ('{"score": 0.85, "reasoning": "..."}', 0.85),
    ('{"score": "0.7", "reasoning": "string"}', 0.7),
    ("```\n{'score': 1, 'reasoning': 'x'}\n```", 1.0),
    ('Overall "score": 0.4 given the trace', 0.4),
    ('{"score": 1.5}', None),  # Outside [0, 1].
    ('{"score": "high"}', None),
    ("no score", None),
])
def test_parse_score(text, want):
  assert judging.parse_score(text) == want


@pytest.mark.parametrize("text, want", [
    # Paper 003's reference (src/classroom.py run_judges, JudgeResponse): the text from the
    # first "{" to the last "}", backslashes removed, as JSON with a string reasoning and a
    # decision of exactly OK or REJECT.
    ('{ "reasoning": "fine", "decision": "OK" }', True),
    ('```json\n{"reasoning": "x", "decision": "REJECT"}\n```', False),
    ('Sure: {"decision": "REJECT", "reasoning": "too long"} Hope it helps.', False),
    ('{"reasoning": "a\\(x\\) and a\nnewline", "decision": "OK", "extra": 1}', True),
    ('{"reasoning": "lower case", "decision": "ok"}', None),
    ('{"reasoning": "a synonym", "decision": "accept"}', None),
    ('{"reasoning": "x", "decision": "Reject"}', None),
    ('{"decision": "OK"}', None),  # No reasoning.
    ('{"reasoning": 3, "decision": "OK"}', None),
    ("{'reasoning': 'single quotes', 'decision': 'OK'}", None),
    ("Decision: OK", None),
    ('The verdict... "decision": "REJECT", "reasoning": "cut off', None),
    ("", None),
])
def test_strict_parse_is_the_reference_rule(text, want):
  assert judging.parse_decision_strict(text) is want
  answer = judging.parse(text, judging.DECISION)  # The default rule.
  assert (answer if answer is None else answer.ok) is want
  lenient = judging.parse(text, judging.DECISION, "lenient")
  assert (lenient if lenient is None else lenient.ok) is judging.parse_decision(text)


def test_a_reply_is_read_once_into_a_typed_answer():
  """parse is the one place a judge's JSON is read: a frozen Decision or Score with its
  reasoning; a policy's stand-in has none."""
  import dataclasses
  d = judging.parse('{"reasoning": "gives 12 away", "decision": "REJECT"}', judging.DECISION)
  assert d == judging.Decision(ok=False, reasoning="gives 12 away")
  s = judging.parse('{"score": "0.7", "reasoning": "plans a question"}', judging.SCORE)
  assert s == judging.Score(score=0.7, reasoning="plans a question")
  assert judging.parse('{"score": 2}', judging.SCORE) is None
  with pytest.raises(dataclasses.FrozenInstanceError):
    d.ok = True
  assert judging.filled(judging.DECISION, accept=True) == judging.Decision(True, None)
  assert judging.filled(judging.SCORE, accept=False) == judging.Score(0.0, None)


def test_judge_settings_default_to_the_reference_rule():
  from pedrl.jobs import base_config, settings
  j = settings.Reader(base_config.dialogue_config("paper")).read(settings.JudgeSettings,
                                                                 "rewards")
  # Strict parsing, 5 rounds, then OK (run_judges' default decision).
  assert (j.judge_parse, j.judge_rounds, j.on_judge_failure) == ("strict", 5, "accept")
  with pytest.raises(ValueError, match="parse rule"):
    settings.JudgeSettings(judge_parse="loose")


# -- A panel over a scripted backend ---------------------------------------------------------

def _dialogue(uid=0, tutor="Can you find 2 + 2 step by step?", student="Is it 4?",
              thinking="", answer="4"):
  raw = f"<think>{thinking}</think>{tutor}" if thinking else tutor
  return Dialogue(problem_id=f"p{uid}", problem="What is 2 + 2?", answer=answer,
                  scenario="guided", rollout=0, uid=uid,
                  messages=[Message(role=TUTOR, text=tutor, raw=raw, thinking=thinking),
                            Message(role=STUDENT, text=student, raw=student)])


class Scripted:
  """Replies by (judge name, sample, round) from a dict; the default accepts."""

  def __init__(self, script=None, default='{"reasoning": "fine", "decision": "OK"}'):
    self.script, self.default, self.seen = script or {}, default, []

  def complete(self, requests, round_=0):
    self.seen.append([(r.dialogue.uid, r.spec.name, r.sample) for r in requests])
    out = []
    for r in requests:
      reply = self.script.get((r.dialogue.uid, r.spec.name, r.sample, round_), self.default)
      out.append(reply() if callable(reply) else reply)
    return out


def test_r_ped_is_one_only_if_every_sample_of_every_judge_accepts():
  ds = [_dialogue(0), _dialogue(1)]
  backend = Scripted({(1, "helpfulness", 1, 0): '{"reasoning": "", "decision": "REJECT"}'})
  v, _ = judging.judge(ds, judging.PEDAGOGICAL_RL, backend)
  assert [x.r_ped for x in v] == [1.0, 0.0]
  assert v[1].decisions == {"leakage": [True, True], "helpfulness": [True, False]}
  assert len(backend.seen) == 1 and len(backend.seen[0]) == 2 * 2 * 2  # 2 judges x 2 samples.


def test_unparsed_replies_are_reasked_then_follow_the_policy():
  garbage = "I cannot decide."
  script = {(0, "leakage", 0, r): garbage for r in range(5)}  # Never parses.
  script[(1, "leakage", 1, 0)] = garbage  # Parses on the second round.
  script[(1, "leakage", 1, 1)] = '{"reasoning": "leaks", "decision": "REJECT"}'
  for policy, r_ped0 in (("accept", 1.0), ("reject", 0.0), ("drop", None)):
    stats = asking.AskStats()
    backend = Scripted(script)
    v, dropped = judging.judge([_dialogue(0), _dialogue(1)], judging.PEDAGOGICAL_RL, backend,
                               rounds=5, on_failure=policy, stats=stats)
    assert v[0].r_ped == r_ped0 and dropped[0] == (policy == "drop")
    assert v[1].r_ped == 0.0 and not dropped[1]
    assert [len(s) for s in backend.seen] == [8, 2, 1, 1, 1]  # Only the unparsed go again.
    assert stats["parse_failures"] == 5 + 1 and stats["reasks"] == 2 + 1 + 1 + 1
    assert stats[f"policy/{policy}"] == 1 and stats["requests"] == 8
    # The policy's value is flagged; a dropped dialogue lists only the judges' values.
    want = {"leakage": [False] if policy == "drop" else [True, False],
            "helpfulness": [False, False]}
    assert v[0].filled == want and len(v[0].decisions["leakage"]) == len(want["leakage"])
    assert v[1].filled == {"leakage": [False, False], "helpfulness": [False, False]}


def test_a_verdict_keeps_each_replys_reason_and_none_for_a_filled_value():
  script = {(0, "leakage", 0, 0): '{"reasoning": "It names 12 as the result.", "decision": '
                                   '"REJECT"}',
            (0, "helpfulness", 1, 0): "```json\n{'Reason': ' asks a question ', 'decision': 'ok'}```"}
  script.update({(0, "leakage", 1, r): "no idea" for r in range(2)})
  (v,), _ = judging.judge([_dialogue(0)], judging.PEDAGOGICAL_RL, Scripted(script), rounds=2,
                          on_failure="accept", parse_rule="lenient")
  assert v.decisions == {"leakage": [False, True], "helpfulness": [True, True]}
  assert v.reasons == {"leakage": ["It names 12 as the result.", None],
                       "helpfulness": ["fine", "asks a question"]}


ACCEPT_001 = '{"reasoning": "fine", "decision": "accept"}'  # Paper 001's A.3 format.


@pytest.mark.parametrize("text, want", [
    ('{"reasoning": "x", "decision": "accept"}', True),  # A.3's output format.
    ('{"reasoning": "x", "decision": "reject"}', False),
    ('{"reasoning": "x", "decision": "ACCEPT"}', True),  # A.3's examples.
    ('{"reasoning": "x", "decision": "REJECT"}', False),
    ('{"reasoning": "x", "decision": "Accept"}', None),
    ('{"reasoning": "x", "decision": "OK"}', None),  # Paper 003's word, not asked for here.
    ('{"decision": "accept"}', None),  # No reasoning, as the reference's rule.
])
def test_strict_parse_reads_the_words_paper_001s_judges_ask_for(text, want):
  [leakage, helpfulness, _] = judging.THINKING
  assert leakage.words == helpfulness.words == judging.PAPER_001_WORDS
  answer = judging.parse(text, judging.DECISION, "strict", leakage.words)
  assert (answer if answer is None else answer.ok) is want


def test_paper_001s_panel_reads_replies_in_its_own_format_under_the_strict_rule():
  """Paper 001's prompts ask for "accept" or "reject" (A.3): read as such by training's
  judges and the evaluation's, not re-asked and filled in or refused as unparsed."""
  reject = '{"reasoning": "names the answer", "decision": "reject"}'
  script = {(0, "leakage", s, 0): reject for s in range(2)}
  script[(0, "thinking", 0, 0)] = script[(1, "thinking", 0, 0)] = '{"score": 0.5}'
  stats = asking.AskStats()
  v, _ = judging.judge([_dialogue(0), _dialogue(1)], judging.THINKING,
                       Scripted(script, default=ACCEPT_001), stats=stats,
                       max_failed_share=0.2)
  assert [x.r_ped for x in v] == [0.0, 1.0] and stats["parse_failures"] == 0
  assert v[0].decisions == {"leakage": [False, False], "helpfulness": [True, True]}
  verdicts = eval_judges.judge([_dialogue(0), _dialogue(1)], judging.THINKING,
                               Scripted(script, default=ACCEPT_001), rounds=5,
                               max_failed_share=0.2, stats=asking.AskStats())
  assert [eval_judges.labels(x).leakage for x in verdicts] == [["REJECT"] * 2, ["OK"] * 2]


def test_a_judge_whose_answers_mostly_fail_is_an_error_whatever_the_panels_share():
  """The thinking judge is one request of five a dialogue: with every one of its replies
  unreadable the panel's share is 1/5, within max_failed_share=0.2, yet each r_think
  would be a stand-in. The share is checked per judge, in training and evaluation."""
  script = {(u, "thinking", 0, r): "85 out of 100" for u in (0, 1) for r in range(5)}
  ds = [_dialogue(0), _dialogue(1)]
  with pytest.raises(judging.JudgeError, match=r"^2 of 2 thinking judge answers"):
    judging.judge(ds, judging.THINKING, Scripted(script, default=ACCEPT_001),
                  max_failed_share=0.2)
  with pytest.raises(judging.JudgeError, match=r"^2 of 2 thinking evaluation judge answers"):
    eval_judges.judge(ds, judging.THINKING, Scripted(script, default=ACCEPT_001), rounds=5,
                      max_failed_share=0.2, stats=asking.AskStats())
  # One of the two thinking answers (half) is within a share of 0.5.
  script = {**{k: v for k, v in script.items() if k[0] == 0}, (1, "thinking", 0, 0): '{"score": 1}'}
  v, _ = judging.judge(ds, judging.THINKING, Scripted(script, default=ACCEPT_001),
                       max_failed_share=0.5)
  assert v[0].filled["thinking"] == [True] and v[1].r_think == 1.0


def test_thinking_judge_sees_the_traces_and_others_do_not():
  d = _dialogue(0, thinking="SECRET PLAN: ask about carrying")
  backend = Scripted({(0, "thinking", 0, 0): '{"score": 0.8}'}, default=ACCEPT_001)
  prompts_seen = []
  orig = backend.complete
  backend.complete = lambda reqs, r=0: prompts_seen.extend(reqs) or orig(reqs, r)
  v, _ = judging.judge([d], judging.THINKING, backend)
  assert v[0].r_think == 0.8 and v[0].r_ped == 1.0
  for req in prompts_seen:
    assert ("SECRET PLAN" in req.prompt) == (req.spec.name == "thinking")
    assert "Teacher: Can you find 2 + 2 step by step?" in req.prompt


def test_the_references_judge_prompt_files_are_rendered_as_it_renders_them(
    tmp_path, monkeypatch):
  """rewards.leakage_prompt_file / helpfulness_prompt_file: a Jinja file rendered with the
  dialogue as paper 003's reference gives it (a list of teacher/student messages, thinking
  and the end marker removed), its outer white space kept; a text that is not the
  reference's is logged once; the protocol records the file and its SHA-1 when given."""
  import hashlib
  from absl import logging
  from pedrl import paths
  from pedrl.env import prompts
  from pedrl.jobs import reward_factory, settings
  path = tmp_path / "leak.txt"  # The reference's structure, not its text.
  path.write_text("Judge the teacher.\n{% for message in conversation %}\n"
                  "- {{ message.role.capitalize() }}: {{ message.content }}\n{% endfor %}\n"
                  "Answer in JSON.\n")
  c = paths.load_config("evaluate.py", "tiny")
  plain = settings.read_settings(c, settings.EvaluationSettings)
  c.rewards.leakage_prompt_file = str(path)
  s = settings.read_settings(c, settings.EvaluationSettings)
  specs, _ = reward_factory.judge_panel(s, None, {})
  assert [x.prompt_file for x in specs] == [str(path), ""]
  d = _dialogue(0, thinking="SECRET PLAN", tutor="What is 2 + 2? <end_of_conversation>")
  d.messages[0].text = "What is 2 + 2?"  # Message.text: what the student saw.
  warned = []
  monkeypatch.setattr(logging, "warning", lambda *a: warned.append(a))
  leak, helpful = (r.prompt for r in judging.requests_for([d], specs) if r.sample == 0)
  assert leak == ("Judge the teacher.\n\n- Teacher: What is 2 + 2?\n\n- Student: Is it 4?\n\n"
                  "Answer in JSON.")  # Jinja drops the file's one last newline, as there.
  assert "SECRET" not in helpful and not helpful.startswith("Judge the teacher.")  # pedrl's.
  judging.requests_for([d], specs)
  assert len(warned) == 1 and "does_not_leak_answer.txt" in warned[0]
  monkeypatch.setitem(prompts.REFERENCE_FILES, "follows_pedagogical_values.txt",
                      hashlib.sha256(path.read_text().strip().encode()).hexdigest())
  c.rewards.helpfulness_prompt_file = str(path)
  both = settings.read_settings(c, settings.EvaluationSettings)
  judging.requests_for([d], reward_factory.judge_panel(both, None, {})[0])
  assert len(warned) == 1  # The reference's text: nothing logged.
  recorded = reward_factory.judges_protocol(s)
  assert recorded["leakage_prompt_file"] == str(path)
  assert recorded["leakage_prompt_file_sha1"] == hashlib.sha1(path.read_bytes()).hexdigest()
  assert not any("prompt_file" in k for k in reward_factory.judges_protocol(plain))
  c.rewards.judges = "thinking"  # Paper 001's panel keeps its own prompts.
  with pytest.raises(Exception, match="leakage_prompt_file is paper 003's judge prompt"):
    settings.read_settings(c, settings.EvaluationSettings)
  c.rewards.judges = "pedagogical_rl"
  c.rewards.leakage_prompt_file = str(tmp_path / "missing.txt")
  with pytest.raises(Exception, match="leakage_prompt_file"):
    settings.read_settings(c, settings.EvaluationSettings)


def test_a_backend_that_fails_everything_is_an_error():
  class Down:
    def complete(self, requests, round_=0):
      return [ConnectionError("refused")] * len(requests)
  with pytest.raises(judging.JudgeError, match="failed every request"):
    judging.judge([_dialogue()], judging.PEDAGOGICAL_RL, Down())
  with pytest.raises(ValueError, match="on_failure"):
    judging.judge([_dialogue()], judging.PEDAGOGICAL_RL, Scripted(), on_failure="ignore")


# -- Rules -----------------------------------------------------------------------------------

def test_rule_judges():
  rules = backends.RuleBackend(RuleJudgeSettings(max_tutor_words=12, max_tutor_share=0.6))
  leak = _dialogue(0, tutor="The answer is 4.", student="Oh, 4.")
  own = _dialogue(1, tutor="What do you get?", student="I get 4.")
  number_inside = _dialogue(2, tutor="Look at 42 and 14.", student="Hmm.")
  v, _ = judging.judge([leak, own, number_inside], judging.PEDAGOGICAL_RL[:1], rules)
  assert [x.r_ped for x in v] == [0.0, 1.0, 1.0]
  long = _dialogue(3, tutor="word " * 13, student="ok")
  dominating = _dialogue(4, tutor="Let us add two and two together now.", student="Ok.")
  fine = _dialogue(5, tutor="What is two plus two?", student="I add them and I think get four.")
  v, _ = judging.judge([long, dominating, fine], judging.PEDAGOGICAL_RL[1:], rules)
  assert [x.r_ped for x in v] == [0.0, 0.0, 1.0]
  think, _ = judging.judge([_dialogue(6, thinking="plan"), _dialogue(7)], judging.THINKING[2:],
                           rules)
  assert [x.r_think for x in think] == [1.0, 0.0]


# -- The openai client against a scripted server ------------------------------------------------

@pytest.fixture
def api_key(monkeypatch):
  monkeypatch.setenv("PEDRL_TEST_JUDGE_KEY", "sk-test-not-a-secret")
  monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def _backend(server, **kw):
  kw = dict(dict(model="judge-model", base_url=server.url, api_key_env="PEDRL_TEST_JUDGE_KEY",
                 timeout=0.5, backoff_base=0.01, max_concurrency=1), **kw)
  return openai_compat.OpenAIBackend(openai_compat.EndpointSettings(**kw))


@pytest.mark.job
def test_openai_backend_retries_then_succeeds(api_key, monkeypatch):
  server = ChatServer([("sleep", 1.5), ("status", 429), ("status", 500), ("status", 503),
                    ("reply", "not json at all"),
                    ("reply", 'Here you go: {"reasoning": "fine", "decision": "OK"} Thanks!')])
  delays = []
  # The backend's own view of time and randomness (the server keeps the real ones).
  monkeypatch.setattr(openai_compat, "time", types.SimpleNamespace(sleep=delays.append))
  monkeypatch.setattr(openai_compat, "random", types.SimpleNamespace(
      uniform=lambda a, b: (a, b) == (0.5, 1.5) and 1.25))
  try:
    backend = _backend(server)
    stats = asking.AskStats()
    v, _ = judging.judge([_dialogue()],
                         (judging.JudgeSpec("leakage", "judges/leakage", samples=1),),
                         backend, stats=stats)
    assert v[0].r_ped == 1.0
    # Timeout, 429, 500 and 503: four retries inside the 5 tries of the first call; its
    # 5th try got prose, unparsable, so the judge asked again and got JSON inside prose.
    assert backend.stats["retries"] == 4
    assert backend.stats["retries/APITimeoutError"] == 1
    assert backend.stats["retries/RateLimitError"] == 1
    assert backend.stats["retries/InternalServerError"] == 2
    assert stats["parse_failures"] == 1 and stats["reasks"] == 1 and stats["api_errors"] == 0
    # Exponential backoff (base 0.01 s, doubling) times the jitter factor drawn in [0.5, 1.5].
    assert delays == pytest.approx([0.0125, 0.025, 0.05, 0.1])
    body, auth = server.bodies[-1]
    assert body["model"] == "judge-model" and body["temperature"] == 0.6
    assert auth == "Bearer sk-test-not-a-secret"
  finally:
    server.close()


@pytest.mark.job
def test_openai_backend_gives_up_after_max_tries_and_counts(api_key):
  # Sample 0 fails 5 times (its round ends in an API error), sample 1 gets REJECT;
  # asked again, sample 0 gets OK.
  server = ChatServer([("status", 500)] * 5 +
                      [("reply", '{"reasoning": "x", "decision": "REJECT"}')])
  try:
    backend = _backend(server)
    stats = asking.AskStats()
    spec = (judging.JudgeSpec("leakage", "judges/leakage", samples=2),)
    v, _ = judging.judge([_dialogue()], spec, backend, stats=stats)
    assert v[0].r_ped == 0.0 and v[0].decisions["leakage"] == [True, False]
    assert stats["api_errors"] == 1 and stats["api_errors/InternalServerError"] == 1
    assert backend.stats["retries"] == 4 and stats["reasks"] == 1
  finally:
    server.close()


@pytest.mark.job
def test_openai_backend_bad_key_and_missing_key_are_clear_errors(api_key, monkeypatch):
  server = ChatServer([("status", 401)])
  try:
    with pytest.raises(judging.JudgeError, match="HTTP 401") as e:
      judging.judge([_dialogue()], judging.PEDAGOGICAL_RL[:1], _backend(server))
    assert "sk-test" not in str(e.value)
  finally:
    server.close()
  monkeypatch.delenv("PEDRL_TEST_JUDGE_KEY")
  with pytest.raises(openai_compat.EndpointError, match="PEDRL_TEST_JUDGE_KEY is not set"):
    _backend(server)


@pytest.mark.job
def test_unreachable_endpoint_is_a_clear_error(api_key):
  server = ChatServer([])
  server.close()  # Nothing listens on the port any more.
  backend = _backend(server, max_tries=2)
  with pytest.raises(judging.JudgeError, match="failed every request.*APIConnectionError"):
    judging.judge([_dialogue()], judging.PEDAGOGICAL_RL[:1], backend, rounds=2)
  assert backend.stats["retries/APIConnectionError"] == 2


def test_local_backend_samples_each_request_with_its_own_key(testdata):
  from pedrl import models
  from pedrl.engine import Sampler, SamplingParams
  from pedrl.env import chat
  from pedrl.tokenizer import load_tokenizer
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  tok = load_tokenizer(testdata("qwen2"))
  party = Party(Sampler(model, tok), params, chat.ChatFormat(tok),
                        SamplingParams(max_new_tokens=8, stop_token_ids=cfg.eos_token_ids))
  backend = backends.LocalBackend(party)
  spec = (judging.JudgeSpec("helpfulness", "judges/thinking_helpfulness", samples=3),)
  reqs = judging.requests_for([_dialogue(0), _dialogue(1)], spec)
  replies = backend.complete(reqs, 0)
  assert len(replies) == 6 and len(set(replies)) == 6  # Same prompt, different samples.
  assert backend.complete(reqs, 0) == replies and backend.complete(reqs, 1) != replies
  # Keyed by the dialogue, not the request's place in the batch: dialogue 1 alone draws
  # what it drew beside dialogue 0, and a later step's dialogue (another uid, the same
  # text) draws afresh, not the keys of the batch's first requests again.
  assert backend.complete(judging.requests_for([_dialogue(1)], spec), 0) == replies[3:]
  assert backend.complete(judging.requests_for([_dialogue(7)], spec), 0) != replies[:3]
  # A random model never writes a verdict: every sample is asked again, then the policy.
  stats = asking.AskStats()
  v, _ = judging.judge([_dialogue(0)], spec, backend, rounds=2, on_failure="reject", stats=stats)
  assert v[0].r_ped == 0.0
  assert stats["parse_failures"] == 6 and stats["policy/reject"] == 3
  # Paper 003's judge prompts do not fit the tiny model's 1024-token context: said plainly.
  with pytest.raises(judging.JudgeError, match="exceeds the local judge model's context"):
    backend.complete(judging.requests_for([_dialogue(0)], judging.PEDAGOGICAL_RL), 0)


@pytest.mark.job
def test_openai_backend_malformed_bodies_and_the_policy(api_key):
  # A body that is not JSON is retried like a 5xx; replies that never parse meet the policy.
  server = ChatServer([("body", b"<html>bad gateway</html>")] + [("reply", "no verdict")] * 20)
  try:
    backend = _backend(server)
    stats = asking.AskStats()
    v, _ = judging.judge([_dialogue()], judging.PEDAGOGICAL_RL[:1], backend, rounds=3,
                         on_failure="accept", stats=stats)
    assert v[0].r_ped == 1.0 and stats["policy/accept"] == 2
    assert stats["parse_failures"] == 6 and backend.stats["retries/non_completion_reply"] == 1
  finally:
    server.close()


# -- Endpoints that misbehave ---------------------------------------------------------------

_ONE_SAMPLE = (judging.JudgeSpec("leakage", "judges/leakage", samples=1),)


def test_completion_text_refuses_every_reply_that_is_no_completion():
  ns = types.SimpleNamespace
  for out in ("<html>502</html>", b"", None, [], ns(choices=None), ns(choices=[]),
              ns(choices="x"), ns(choices=[ns(message=None)]),
              ns(choices=[ns(message=ns(content=5))])):
    with pytest.raises(openai_compat.NonCompletionReply, match="no chat completion"):
      openai_compat.completion_text(out)
  assert openai_compat.completion_text(ns(choices=[ns(message=ns(content=None))])) == ""
  assert openai_compat.completion_text(ns(choices=[ns(message=ns(content="hi"))])) == "hi"


@pytest.mark.job
def test_replies_that_are_no_completion_are_retried_and_counted(api_key):
  # Sample 0: a proxy's HTML page (the client returns a str), JSON without choices, an
  # empty choice list: its 3 tries. Sample 1: a non-JSON body, then the verdict. Asked
  # again, sample 0 gets its verdict too.
  server = ChatServer([("html", b"<html>502 Bad Gateway</html>"), ("json", {"error": "upstream"}),
                    ("json", {"choices": []}), ("body", b"<html>bad gateway</html>"),
                    ("reply", '{"reasoning": "x", "decision": "OK"}')])
  try:
    backend = _backend(server, max_tries=3)
    stats = asking.AskStats()
    v, _ = judging.judge([_dialogue()], judging.PEDAGOGICAL_RL[:1], backend, stats=stats)
    assert v[0].r_ped == 1.0 and v[0].filled == {"leakage": [False, False]}
    assert backend.stats["retries/non_completion_reply"] == 3 == backend.stats["retries"]
    assert stats["api_errors/non_completion_reply"] == 1 and stats["reasks"] == 1
  finally:
    server.close()


@pytest.mark.job
def test_retry_after_is_honoured_up_to_backoff_max(api_key, monkeypatch):
  now = 1_700_000_000
  server = ChatServer([("status", 429, {"Retry-After": "2"}),
                    ("status", 503, {"Retry-After": "120"}),  # Longer than backoff_max.
                    ("status", 429, {"retry-after-ms": "1500"}),
                    ("status", 503, {"Retry-After": email.utils.formatdate(now + 5, usegmt=True)}),
                    ("status", 500),  # No header: exponential backoff with jitter.
                    ("reply", '{"reasoning": "x", "decision": "OK"}')])
  delays = []
  monkeypatch.setattr(openai_compat, "time", types.SimpleNamespace(sleep=delays.append,
                                                              time=lambda: now))
  monkeypatch.setattr(openai_compat, "random", types.SimpleNamespace(
      uniform=lambda a, b: (a, b) == (0.5, 1.5) and 1.25))
  try:
    backend = _backend(server, max_tries=6, backoff_max=10.0)
    v, _ = judging.judge([_dialogue()], _ONE_SAMPLE, backend)
    assert v[0].r_ped == 1.0
    assert delays == pytest.approx([2.0, 10.0, 1.5, 5.0, 0.01 * 2 ** 4 * 1.25])
  finally:
    server.close()
  assert openai_compat.retry_after({"Retry-After": "soon"}) is None
  assert openai_compat.retry_after({"Retry-After": "-3"}) == 0.0 and openai_compat.retry_after({}) is None


def _mostly_down():
  """An endpoint that answers once, then 503s."""
  return ChatServer([("reply", '{"reasoning": "x", "decision": "REJECT"}')] +
                    [("status", 503)] * 200)


@pytest.mark.job
def test_a_mostly_down_endpoint_is_an_error_over_max_failed_share(api_key):
  dialogues = [_dialogue(i) for i in range(4)]  # 4 x 2 samples: 1 answered, 7 filled in.
  server = _mostly_down()
  try:
    backend = _backend(server, max_tries=2)
    with pytest.raises(judging.JudgeError, match=(
        r"^7 of 8 leakage judge answers .* after 2 rounds .*on_failure='reject' \(88%\), more than "
        r"rewards\.max_failed_share=0\.2 allows; causes: api_errors/InternalServerError 7$")):
      judging.judge(dialogues, judging.PEDAGOGICAL_RL[:1], backend, rounds=2,
                    on_failure="reject", max_failed_share=0.2)
  finally:
    server.close()
  server = _mostly_down()
  try:
    stats = asking.AskStats()
    v, _ = judging.judge(dialogues, judging.PEDAGOGICAL_RL[:1], _backend(server, max_tries=2),
                         rounds=2, on_failure="reject", stats=stats, max_failed_share=1.0)
    assert [x.decisions["leakage"] for x in v] == [[False, False]] * 4
    assert [x.filled["leakage"] for x in v] == [[False, True]] + [[True, True]] * 3
    assert stats["policy/reject"] == 7 and stats["api_errors/InternalServerError"] == 14
  finally:
    server.close()
  with pytest.raises(ValueError, match="max_failed_share"):
    judging.judge(dialogues, judging.PEDAGOGICAL_RL, Scripted(), max_failed_share=1.5)


@pytest.mark.job
def test_preflight_names_endpoint_model_and_key_variable(api_key):
  server = ChatServer([("json", {"choices": [{"index": 0, "finish_reason": "length",
                                           "message": {"role": "assistant", "content": None}}]}),
                    ("status", 401), ("status", 404), ("status", 503), ("status", 503),
                    ("html", b"<html>login</html>"), ("html", b"<html>login</html>")])
  try:
    backend = _backend(server)
    backend.preflight()  # One token, nothing to say: a completion all the same.
    body, _ = server.bodies[0]
    assert body["max_tokens"] == 1 and body["model"] == "judge-model"
    where = f"the judge endpoint {server.url} (model 'judge-model')"
    for want, requests in (("refused the API key in the environment variable "
                            "PEDRL_TEST_JUDGE_KEY: HTTP 401", 1),
                           ("HTTP 404: an unknown model", 1),
                           ("failed the preflight request: HTTP 503", 2),
                           ("is no OpenAI-compatible endpoint", 2)):
      before = len(server.bodies)
      with pytest.raises(openai_compat.EndpointError) as e:
        backend.preflight()
      assert str(e.value).startswith(where) and want in str(e.value)
      assert "sk-test" not in str(e.value) and len(server.bodies) - before == requests
    backends.MainProcessCalls(backend).preflight()  # The actions are spent: answers OK.
  finally:
    server.close()


@pytest.mark.job
def test_preflight_of_an_unreachable_or_slow_endpoint(api_key):
  server = ChatServer([])
  server.close()  # Nothing listens on the port any more.
  with pytest.raises(judging.JudgeError, match=f"endpoint {server.url} .* cannot be reached"):
    backends.MainProcessCalls(_backend(server)).preflight()  # Raised as process 0 saw it.
  server = ChatServer([("sleep", 0.6), ("sleep", 0.6)])
  try:
    with pytest.raises(openai_compat.EndpointError,
                       match="did not answer within the timeout of 0.2 s"):
      _backend(server, timeout=0.2).preflight()
  finally:
    server.close()


@pytest.mark.job
def test_an_endpoint_backbone_sends_each_calls_seed_whatever_its_batch(api_key):
  """CPA's backbone on an endpoint sends the API's `seed` of (run seed, instance uid, call
  number), as a local backbone keys its draws: the same call draws the same seed alone or
  in a batch, distinct calls distinct ones; send_seed=False sends none."""
  from pedrl.agents import backbone as backbone_lib
  server = ChatServer([], reply=lambda body: "ok")
  try:
    client = _backend(server)
    agent = backbone_lib.EndpointBackbone(client, seed=42)
    agent.chat([[{"role": "user", "content": "a"}]] * 3, "plan", uids=[5, 6, 5], steps=[0, 0, 1])
    agent.chat([[{"role": "user", "content": "b"}]], "plan", uids=[6], steps=[0])
    seeds = [body["seed"] for body, _ in server.bodies]
    assert seeds[3] == seeds[1] and len(set(seeds[:3])) == 3
    assert all(isinstance(k, int) and 0 <= k < 2 ** 31 for k in seeds)
    backbone_lib.EndpointBackbone(client, seed=43).chat(
        [[{"role": "user", "content": "c"}]], "plan", uids=[6], steps=[0])
    assert server.bodies[-1][0]["seed"] != seeds[1]  # Another run seed, another draw.
    quiet = _backend(server, send_seed=False)
    backbone_lib.EndpointBackbone(quiet, seed=42).chat(
        [[{"role": "user", "content": "d"}]], "plan", uids=[6], steps=[0])
    assert "seed" not in server.bodies[-1][0]
  finally:
    server.close()
