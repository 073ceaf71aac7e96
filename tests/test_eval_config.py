"""The evaluation config's variants: every key read, and the papers' protocol values."""
import os

from absl import flags
from ml_collections import config_flags
import pytest

from jobs import ROOT
from pedrl.experiments import settings


def _settings(variant, **tutor):
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=fv)
  fv(["test", f"--config={os.path.join(ROOT, 'experiments', 'evaluate.py')}:{variant}"])
  for key, value in tutor.items():  # As --config.tutor.KEY=VALUE would set them.
    section, _, leaf = key.rpartition("__")
    (fv.config.tutor[section] if section else fv.config.tutor)[leaf] = value
  return settings.read_settings(fv.config, evaluation=True)  # UnreadKeys if any is unread.


@pytest.mark.parametrize("variant", ["paper", "pedagogical_rl", "thinking", "uco", "tiny",
                                     "tiny,thinking", "tiny,uco", "tiny,reasoning", "tiny,wbeb"])
def test_every_variant_reads_completely(variant):
  s = _settings(variant)
  assert s.evaluation.shard == 0 and s.evaluation.num_shards == 1
  assert s.tutor_run.workdir is None and s.tutor_endpoint.model is None


def test_paper_protocols():
  s = _settings("pedagogical_rl")  # Paper 003 section 6 and its reference evaluation.
  assert (s.problems.split, s.problems.n_test, s.problems.filter) == ("test", 500, True)
  assert s.evaluation.samples_per_problem == 1 and s.solve.k == 8
  assert (s.solve.temperature, s.solve.max_new_tokens) == (0.6, 3900)
  assert s.judging.judges == "pedagogical_rl" and s.judging.judge_samples == 2
  assert s.rollout.max_turns == 16 and s.rollout.max_conversation_tokens == 8192
  assert s.pedrm.format == "reference"
  t = _settings("thinking")  # Paper 001: GPT-4o-mini judges, the thinking-quality judge.
  assert t.judging.judges == "thinking" and t.openai["model"] == "gpt-4o-mini"
  assert t.rollout.thinking and t.rollout.tutor_prompt == "thinking/tutor_polya"
  u = _settings("uco").rollout  # Paper 000 section IV: T = 10 tutor turns, tutor first.
  assert (u.max_tutor_turns, u.scenario) == (10, "guided")
  assert (u.tutor_prompt, u.student_prompt) == ("uco/teacher", "uco/student")  # Table XII.


def test_reasoning_protocol():
  with pytest.raises(ValueError, match="gsm8k needs its data"):
    _settings("reasoning")  # The benchmarks' files are the user's: named, not guessed.
  r = _settings("tiny,reasoning").reasoning  # Paper 003 table 3 and its LightEval sampling.
  assert r.names == ("gsm8k", "math500", "mmlu")
  assert (r.gsm8k_shots, r.mmlu_shots, r.temperature, r.top_p) == (4, 5, 0.6, 0.95)


def test_wbeb_protocol():
  with pytest.raises(ValueError, match="wbeb needs its data"):
    _settings("wbeb")  # WBEB is not public with paper 001: the user's file, by path.
  s = _settings("tiny,wbeb")  # Paper 001 table 2: the thinking tutor, multiple choice.
  assert s.reasoning.names == ("wbeb",) and s.rollout.thinking


def test_an_agent_tutor_takes_its_cpa_numbers_from_the_config():
  s = _settings("tiny", agent="cpa", cpa__max_resyntheses=2)
  assert s.tutor_agent.agent == "cpa" and s.tutor_cpa.max_resyntheses == 2
  assert (s.tutor_cpa.k, s.tutor_cpa.j, s.tutor_cpa.sim_steps) == (3, 3, 3)  # Paper 002 §4.4.
  with pytest.raises(ValueError, match="tutor.cpa.*k=0 must be at least 1"):
    _settings("tiny", cpa__k=0)
