"""UCO per-turn rewards on the testdata models, against a by-hand recomputation."""
import dataclasses

import numpy as np
import pytest

from pedrl import models
from pedrl.engine import Sampler, SamplingParams
from pedrl.engine.scoring import Scorer, sequence_logprobs
from pedrl.env import chat, prompts
from pedrl.env.dialogue import STUDENT, TUTOR, Dialogue, Message
from pedrl.env.party import Party
from pedrl.rewards import asking, embedding, oracle, uco, uco_turns
from pedrl.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def setup(testdata):
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  tok = load_tokenizer(testdata("qwen2"))
  student = Party(Sampler(model, tok), params, chat.ChatFormat(tok),
                          SamplingParams(max_new_tokens=8, stop_token_ids=cfg.eos_token_ids))
  return student, model, Scorer(model), embedding.Embedder(testdata("bert"))


def _dialogue():
  return Dialogue(problem_id="p", problem="What is 3 + 4?", answer="7", scenario="attempted",
                  rollout=0, student_system=prompts.render("pedagogical_rl/student_system",
                                                           problem="What is 3 + 4?"),
                  messages=[
                      Message(role=STUDENT, text="Is it 8?"),
                      Message(role=TUTOR, text="Count up from 3, four times."),
                      Message(role=STUDENT, text="4, 5, 6, 7. So 7!"),
                      Message(role=TUTOR, text="Well done."),
                  ])


def _logprob(model, params, context, continuation, reduce, width=512):
  """Teacher-forced over the whole sequence (right-padded to one width: one compile)."""
  n = len(context) + len(continuation)
  ids = np.zeros((1, width), np.int32)
  ids[0, :n] = context + continuation
  mask = np.arange(width)[None] < n
  lp = np.asarray(sequence_logprobs(model, params, ids, mask))[0]
  return uco.candidate_logprob(lp[len(context):n], reduce)


@pytest.mark.parametrize("reduce", ["mean", "sum"])
def test_turn_rewards_equal_a_by_hand_recomputation(setup, reduce):
  student, model, scorer, embedder = setup
  d = _dialogue()
  settings = uco_turns.UCOSettings(reduce=reduce)
  (scores,) = uco_turns.score_turns([d], student, scorer, oracle.ReferenceOracle(), embedder,
                                    settings)
  assert [s.message for s in scores] == [1, 3]
  fmt, params = student.chat, student.params
  system = {"role": "system", "content": prompts.render("pedagogical_rl/student_system",
                                                        problem="What is 3 + 4?")}
  # The student's state before each tutor turn, written out by hand.
  before = {1: [system, {"role": "assistant", "content": "Is it 8?"}],
            3: [system, {"role": "assistant", "content": "Is it 8?"},
                {"role": "user", "content": "Count up from 3, four times."},
                {"role": "assistant", "content": "4, 5, 6, 7. So 7!"}]}
  for s in scores:
    told = oracle.ReferenceOracle()([oracle.OracleRequest(d, s.message)])[0]
    after = before[s.message] + [{"role": "user", "content": d.messages[s.message].text}]
    ctx = fmt.prompt_ids(after)
    best = max(_logprob(model, params, ctx, fmt.encode(c), reduce) for c in told.candidates)
    assert s.potential == pytest.approx(np.tanh(2.0 * best), abs=1e-4)
    p = [_logprob(model, params,
                  fmt.prompt_ids(before[s.message] + [{"role": "user", "content": h}]),
                  fmt.encode(told.candidates[0]), reduce) for h in told.hints]
    np.testing.assert_allclose(s.level_logprobs, p, atol=1e-4)
    assert s.zpd_level == max(0, int(np.argmax(p)) - 1)
    vec = embedder([d.messages[s.message].text] + list(told.hints))
    level = int(np.argmax(vec[1:] @ vec[0]))
    assert s.level == level
    want_scaffold = (1 / (1 + np.exp(-p[level])) + 0.5 if level == s.zpd_level
                     else -0.2 * abs(level - s.zpd_level))
    assert s.scaffold == pytest.approx(want_scaffold, abs=1e-4)
    assert s.reward == pytest.approx(s.progress + s.scaffold)
  first, last = scores
  told = oracle.ReferenceOracle()([oracle.OracleRequest(d, 1)])[0]
  vec = embedder([d.messages[2].text] + list(told.candidates))
  semantic = float(np.max(vec[1:] @ vec[0])) - 0.7
  assert first.semantic == pytest.approx(semantic, abs=1e-5)
  assert first.progress == pytest.approx(0.5 * first.potential + 0.5 * semantic, abs=1e-5)
  # The last tutor turn has no student reply: progress is the potential term alone.
  assert last.semantic is None and last.progress == last.potential
  (zero,) = uco_turns.score_turns([d], student, scorer, oracle.ReferenceOracle(), embedder,
                                  uco_turns.UCOSettings(reduce=reduce, last_turn_semantic="zero"))
  assert zero[1].progress == pytest.approx(0.5 * zero[1].potential)
  (no_scaffold,) = uco_turns.score_turns(  # Table III ablation: eq. 9 without a term.
      [d], student, scorer, oracle.ReferenceOracle(), embedder,
      uco_turns.UCOSettings(reduce=reduce, scaffold_weight=0.0))
  assert [t.reward for t in no_scaffold] == pytest.approx([t.progress for t in scores])


class _TextBackend:
  def __init__(self, replies):
    self.replies, self.calls = replies, 0

  def complete(self, requests, round_=0):
    self.calls += 1
    return [self.replies(r, round_) for r in requests]


GOOD_ORACLE = ('{"candidates": ["7", "It is 7.", "3+4=7", "seven: 7", "I get 7"], "hints": '
               '{"metacognitive": "What do you know?", "strategic": "Count on.", "conceptual": '
               '"Addition is counting on.", "Step-by-step": "Start at 3, add 1 four times.", '
               '"worked example": "2+5: 3,4,5,6,7 so 7."}}')


def test_llm_oracle_and_classifier_with_reasks_and_fallbacks(setup):
  student, _, scorer, embedder = setup
  good = GOOD_ORACLE
  short = '{"candidates": ["7", "7"], "hints": {}}'

  def oracle_reply(r, k):  # Turn 1: too short, then good; turn 3: the endpoint refuses.
    return ConnectionError("refused") if r.turn == 3 else short if k == 0 else good
  o = oracle.LLMOracle(_TextBackend(oracle_reply))
  classifier = _TextBackend(lambda r, k: '{"level": "conceptual"}' if r.turn == 1 else "??")
  settings = uco_turns.UCOSettings(level_method="llm", classifier_rounds=2)
  stats = asking.AskStats()
  (scores,) = uco_turns.score_turns([_dialogue()], student, scorer, o, embedder, settings,
                                    classifier=classifier, stats=stats)
  assert o.stats["parse_failures"] == 1 and o.stats["api_errors/ConnectionError"] == 3
  assert o.stats["policy/reference"] == 1
  assert scores[0].level == 2  # "conceptual" from the classifier.
  assert stats["parse_failures"] == 2 and stats["policy/nearest_hint"] == 1
  # Which values are stand-ins: turn 3's candidates and hints, and its level.
  assert [(t.oracle_fallback, t.level_fallback) for t in scores] == [(False, False), (True, True)]
  strict = oracle.LLMOracle(_TextBackend(lambda r, k: short), rounds=2, on_failure="error")
  with pytest.raises(oracle.OracleError, match="turn 1"):
    strict([oracle.OracleRequest(_dialogue(), 1)])
  lenient = oracle.LLMOracle(_TextBackend(lambda r, k: short), rounds=2)
  (turn,) = lenient([oracle.OracleRequest(_dialogue(), 1)])
  reference = oracle.ReferenceOracle()([oracle.OracleRequest(_dialogue(), 1)])[0]
  assert turn == dataclasses.replace(reference, fallback=True) and not reference.fallback
  assert lenient.stats["policy/reference"] == 1 and lenient.stats["parse_failures"] == 2


def test_oracle_and_classifier_requests_are_numbered_by_dialogue_and_turn():
  """A local oracle or classifier seeds each request's sample by its uid: the dialogue's uid
  and turn and which asks, not its place in the batch (every step drew the same keys)."""
  seen = []
  backend = _TextBackend(lambda r, k: seen.append(r.uid) or GOOD_ORACLE)
  d0, d9 = (dataclasses.replace(_dialogue(), uid=u) for u in (0, 9))
  oracle.LLMOracle(backend)([oracle.OracleRequest(d0, 1), oracle.OracleRequest(d9, 3)])
  oracle.LLMOracle(backend)([oracle.OracleRequest(d9, 3)])  # Alone: the same request uid.
  assert seen == [(0 * 256 + 1) * 2, (9 * 256 + 3) * 2, (9 * 256 + 3) * 2]
  level = _TextBackend(lambda r, k: seen.append(r.uid) or '{"level": 2}')
  uco_turns._classify_levels(level, [(d9, 3)], 1, lambda d, i: 0, asking.AskStats())
  assert seen[-1] == (9 * 256 + 3) * 2 + 1  # The classifier's, beside the oracle's.
  with pytest.raises(ValueError, match="message 256 is past"):
    oracle.request_uid(d0, 256, oracle.ORACLE)


def test_oracle_and_classifier_fallbacks_over_max_failed_share_are_errors(setup):
  _, _, _, embedder = setup
  # Turn 1 gets the LLM's answer, turn 3 none (the endpoint refuses): 1 of 2 falls back.
  replies = lambda good: lambda r, k: good if r.turn == 1 else ConnectionError("refused")
  turns = [oracle.OracleRequest(_dialogue(), 1), oracle.OracleRequest(_dialogue(), 3)]
  strict = oracle.LLMOracle(_TextBackend(replies(GOOD_ORACLE)), rounds=2, max_failed_share=0.4)
  with pytest.raises(oracle.OracleError, match=r"^1 of 2 oracle turns .*reference oracle \(50%\)"
                     r".*rewards\.max_failed_share=0\.4 .*api_errors/ConnectionError 1$"):
    strict(turns)
  assert strict.stats["policy/reference"] == 0
  assert len(oracle.LLMOracle(_TextBackend(replies(GOOD_ORACLE)), rounds=2,
                              max_failed_share=0.5)(turns)) == 2  # At the bound: allowed.
  # The classifier: an error before the scorer runs (there is none here).
  settings = uco_turns.UCOSettings(level_method="llm", classifier_rounds=2)
  with pytest.raises(oracle.OracleError, match=r"^1 of 2 tutor turns got no level .*nearest hint"
                     r" \(50%\).*api_errors/ConnectionError 1$"):
    uco_turns.score_turns([_dialogue()], None, None, oracle.ReferenceOracle(), embedder,
                          settings, _TextBackend(replies('{"level": "conceptual"}')),
                          max_failed_share=0.4)
  with pytest.raises(ValueError, match="max_failed_share"):
    uco_turns.score_turns([], None, None, None, None, settings, max_failed_share=-0.1)
  with pytest.raises(ValueError, match="max_failed_share"):
    oracle.LLMOracle(_TextBackend(replies(GOOD_ORACLE)), max_failed_share=2.0)


def test_oracle_replies_are_checked():
  assert oracle.parse_oracle('{"candidates": "seven is it", "hints": {}}') is None
  hints = {k: "h" for k in ("metacognitive", "strategic", "conceptual", "step_by_step")}
  assert oracle.parse_oracle(str({"candidates": ["a"] * 5, "hints": hints})) is None  # No l4.
  hints["worked_example"] = "h"
  assert oracle.parse_oracle(str({"candidates": ["a"] * 6, "hints": hints})).candidates == ("a",) * 5
  down = _TextBackend(lambda r, k: ConnectionError("refused"))
  with pytest.raises(oracle.OracleError, match="failed every request"):
    oracle.LLMOracle(down)([oracle.OracleRequest(_dialogue(), 1)])
  assert oracle.parse_level('{"level": "Step-by-step"}') == 3
  assert oracle.parse_level('{"level": 7}') is None
