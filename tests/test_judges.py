"""Judges: tolerant parsing, re-ask rounds and failure policies, rules, and the real
`openai` client against a scripted HTTP server on 127.0.0.1."""
import http.server
import json
import threading
import time
import types

import pytest

from pedrl.env.dialogue import STUDENT, TUTOR, Dialogue, Message
from pedrl.rewards import backends, judging


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

  def __init__(self, script=None, default='{"decision": "OK"}'):
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
  backend = Scripted({(1, "helpfulness", 1, 0): '{"decision": "REJECT"}'})
  v = judging.judge(ds, judging.PEDAGOGICAL_RL, backend)
  assert [x.r_ped for x in v] == [1.0, 0.0]
  assert v[1].decisions == {"leakage": [True, True], "helpfulness": [True, False]}
  assert len(backend.seen) == 1 and len(backend.seen[0]) == 2 * 2 * 2  # 2 judges x 2 samples.


def test_unparsed_replies_are_reasked_then_follow_the_policy():
  garbage = "I cannot decide."
  script = {(0, "leakage", 0, r): garbage for r in range(5)}  # Never parses.
  script[(1, "leakage", 1, 0)] = garbage  # Parses on the second round.
  script[(1, "leakage", 1, 1)] = '{"decision": "REJECT"}'
  for policy, r_ped0 in (("accept", 1.0), ("reject", 0.0), ("drop", None)):
    stats = judging.JudgeStats()
    backend = Scripted(script)
    v = judging.judge([_dialogue(0), _dialogue(1)], judging.PEDAGOGICAL_RL, backend,
                      rounds=5, on_failure=policy, stats=stats)
    assert v[0].r_ped == r_ped0 and v[0].dropped == (policy == "drop")
    assert v[1].r_ped == 0.0 and not v[1].dropped
    assert [len(s) for s in backend.seen] == [8, 2, 1, 1, 1]  # Only the unparsed go again.
    assert stats["parse_failures"] == 5 + 1 and stats["reasks"] == 2 + 1 + 1 + 1
    assert stats[f"policy/{policy}"] == 1 and stats["requests"] == 8


def test_thinking_judge_sees_the_traces_and_others_do_not():
  d = _dialogue(0, thinking="SECRET PLAN: ask about carrying")
  backend = Scripted({(0, "thinking", 0, 0): '{"score": 0.8}'})
  prompts_seen = []
  orig = backend.complete
  backend.complete = lambda reqs, r=0: prompts_seen.extend(reqs) or orig(reqs, r)
  v = judging.judge([d], judging.THINKING, backend)
  assert v[0].r_think == 0.8 and v[0].r_ped == 1.0
  for req in prompts_seen:
    assert ("SECRET PLAN" in req.prompt) == (req.spec.name == "thinking")
    assert "Teacher: Can you find 2 + 2 step by step?" in req.prompt


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
  rules = backends.RuleBackend(max_tutor_words=12, max_tutor_share=0.6)
  leak = _dialogue(0, tutor="The answer is 4.", student="Oh, 4.")
  own = _dialogue(1, tutor="What do you get?", student="I get 4.")
  number_inside = _dialogue(2, tutor="Look at 42 and 14.", student="Hmm.")
  v = judging.judge([leak, own, number_inside], judging.PEDAGOGICAL_RL[:1], rules)
  assert [x.r_ped for x in v] == [0.0, 1.0, 1.0]
  long = _dialogue(3, tutor="word " * 13, student="ok")
  dominating = _dialogue(4, tutor="Let us add two and two together now.", student="Ok.")
  fine = _dialogue(5, tutor="What is two plus two?", student="I add them and I think get four.")
  v = judging.judge([long, dominating, fine], judging.PEDAGOGICAL_RL[1:], rules)
  assert [x.r_ped for x in v] == [0.0, 0.0, 1.0]
  think = judging.judge([_dialogue(6, thinking="plan"), _dialogue(7)], judging.THINKING[2:], rules)
  assert [x.r_think for x in think] == [1.0, 0.0]


# -- The openai client against a scripted server ------------------------------------------------

class _Server:
  """Answers POST /v1/chat/completions from a list of actions, one per request:
  ("sleep", seconds) | ("status", code) | ("body", raw bytes) | ("reply", content)."""

  def __init__(self, actions):
    self.actions, self.lock, self.bodies = list(actions), threading.Lock(), []
    outer = self

    class Handler(http.server.BaseHTTPRequestHandler):
      def log_message(self, *args):
        pass

      def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with outer.lock:
          outer.bodies.append((body, self.headers.get("Authorization")))
          kind, arg = outer.actions.pop(0) if outer.actions else ("reply", '{"decision": "OK"}')
        if kind == "sleep":
          time.sleep(arg)
          kind, arg = "reply", '{"decision": "OK"}'
        if kind == "status":
          data = json.dumps({"error": {"message": "scripted", "type": "x"}}).encode()
          code = arg
        elif kind == "body":  # A 200 whose body is not a completion.
          code, data = 200, arg
        elif kind == "reply":
          code, data = 200, json.dumps({
              "id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
              "choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": arg}}]}).encode()
        try:
          self.send_response(code)
          self.send_header("Content-Type", "application/json")
          self.send_header("Content-Length", str(len(data)))
          self.end_headers()
          self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
          pass

    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
    threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

  def close(self):
    self.httpd.shutdown()
    self.httpd.server_close()


@pytest.fixture
def api_key(monkeypatch):
  monkeypatch.setenv("PEDRL_TEST_JUDGE_KEY", "sk-test-not-a-secret")
  monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def _backend(server, **kw):
  kw = dict(model="judge-model", base_url=server.url, api_key_env="PEDRL_TEST_JUDGE_KEY",
            timeout=0.5, backoff_base=0.01, max_concurrency=1, **kw)
  return backends.OpenAIBackend(**kw)


def test_openai_backend_retries_then_succeeds(api_key, monkeypatch):
  server = _Server([("sleep", 1.5), ("status", 429), ("status", 500), ("status", 503),
                    ("reply", "not json at all"),
                    ("reply", 'Here you go: {"reasoning": "fine", "decision": "OK"} Thanks!')])
  delays = []
  # The backend's own view of time and randomness (the server keeps the real ones).
  monkeypatch.setattr(backends, "time", types.SimpleNamespace(sleep=delays.append))
  monkeypatch.setattr(backends, "random", types.SimpleNamespace(
      uniform=lambda a, b: (a, b) == (0.5, 1.5) and 1.25))
  try:
    backend = _backend(server)
    stats = judging.JudgeStats()
    v = judging.judge([_dialogue()], (judging.JudgeSpec("leakage", "judges/leakage", samples=1),),
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


def test_openai_backend_gives_up_after_max_tries_and_counts(api_key):
  # Sample 0 fails 5 times (its round ends in an API error), sample 1 gets REJECT;
  # asked again, sample 0 gets OK.
  server = _Server([("status", 500)] * 5 + [("reply", '{"decision": "REJECT"}')])
  try:
    backend = _backend(server)
    stats = judging.JudgeStats()
    spec = (judging.JudgeSpec("leakage", "judges/leakage", samples=2),)
    v = judging.judge([_dialogue()], spec, backend, stats=stats)
    assert v[0].r_ped == 0.0 and v[0].decisions["leakage"] == [True, False]
    assert stats["api_errors"] == 1 and stats["api_errors/InternalServerError"] == 1
    assert backend.stats["retries"] == 4 and stats["reasks"] == 1
  finally:
    server.close()


def test_openai_backend_bad_key_and_missing_key_are_clear_errors(api_key, monkeypatch):
  server = _Server([("status", 401)])
  try:
    with pytest.raises(judging.JudgeError, match="HTTP 401") as e:
      judging.judge([_dialogue()], judging.PEDAGOGICAL_RL[:1], _backend(server))
    assert "sk-test" not in str(e.value)
  finally:
    server.close()
  monkeypatch.delenv("PEDRL_TEST_JUDGE_KEY")
  with pytest.raises(judging.JudgeError, match="PEDRL_TEST_JUDGE_KEY is not set"):
    _backend(server)


def test_unreachable_endpoint_is_a_clear_error(api_key):
  server = _Server([])
  server.close()  # Nothing listens on the port any more.
  backend = _backend(server, max_tries=2)
  with pytest.raises(judging.JudgeError, match="failed every request.*APIConnectionError"):
    judging.judge([_dialogue()], judging.PEDAGOGICAL_RL[:1], backend, rounds=2)
  assert backend.stats["retries/APIConnectionError"] == 2


def test_local_backend_samples_each_request_with_its_own_key(testdata):
  from pedrl import models
  from pedrl.engine import Sampler, SamplingParams
  from pedrl.env import chat, rollout
  from pedrl.tokenizer import load_tokenizer
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  tok = load_tokenizer(testdata("qwen2"))
  party = rollout.Party(Sampler(model, tok), params, chat.ChatFormat(tok),
                        SamplingParams(max_new_tokens=8, stop_token_ids=cfg.eos_token_ids))
  backend = backends.LocalBackend(party)
  spec = (judging.JudgeSpec("helpfulness", "judges/thinking_helpfulness", samples=3),)
  reqs = judging.requests_for([_dialogue(0), _dialogue(1)], spec)
  replies = backend.complete(reqs, 0)
  assert len(replies) == 6 and len(set(replies)) == 6  # Same prompt, different samples.
  assert backend.complete(reqs, 0) == replies and backend.complete(reqs, 1) != replies
  # A random model never writes a verdict: every sample is asked again, then the policy.
  stats = judging.JudgeStats()
  v = judging.judge([_dialogue(0)], spec, backend, rounds=2, on_failure="reject", stats=stats)
  assert v[0].r_ped == 0.0
  assert stats["parse_failures"] == 6 and stats["policy/reject"] == 3
  # Paper 003's judge prompts do not fit the tiny model's 1024-token context: said plainly.
  with pytest.raises(judging.JudgeError, match="exceeds the local judge model's context"):
    backend.complete(judging.requests_for([_dialogue(0)], judging.PEDAGOGICAL_RL), 0)


def test_openai_backend_malformed_bodies_and_the_policy(api_key):
  # A body that is not JSON is retried like a 5xx; replies that never parse meet the policy.
  server = _Server([("body", b"<html>bad gateway</html>")] + [("reply", "no verdict")] * 20)
  try:
    backend = _backend(server)
    stats = judging.JudgeStats()
    v = judging.judge([_dialogue()], judging.PEDAGOGICAL_RL[:1], backend, rounds=3,
                      on_failure="accept", stats=stats)
    assert v[0].r_ped == 1.0 and stats["policy/accept"] == 2
    assert stats["parse_failures"] == 6 and backend.stats["retries/JSONDecodeError"] == 1
  finally:
    server.close()
