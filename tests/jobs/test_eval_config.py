"""The evaluation config's variants: every key read, the papers' protocol values, and each
training variant's evaluation twin."""
import importlib.util
import json
import os

from absl import flags
import pytest

from tests.helpers import jobs
from tests.helpers.jobs import ROOT
from pedrl.jobs import conditions, settings


def _settings(variant, **tutor):
  c = jobs.config("evaluate", variant)
  for key, value in tutor.items():  # As --config.tutor.KEY=VALUE would set them.
    section, _, leaf = key.rpartition("__")
    (c.tutor[section] if section else c.tutor)[leaf] = value
  return settings.read_settings(c, settings.EvaluationSettings)  # UnreadKeys if any is unread.


@pytest.mark.parametrize("variant", ["paper", "pedagogical_rl", "thinking", "uco", "uco_003",
                                     "tiny", "tiny,thinking", "tiny,uco", "tiny,uco_003",
                                     "tiny,reasoning", "tiny,wbeb"])
def test_every_variant_reads_completely(variant):
  s = _settings(variant)
  assert s.evaluation.shard == 0 and s.evaluation.num_shards == 1
  assert s.tutor_run.workdir is None and s.tutor_endpoint.model is None


# Paper 003's reference evaluation, read from eth-lre/PedagogicalRL @ bae10cd: (setting, value,
# where). Every tutoring protocol takes these (papers 001 and 000 state none of their own).
REFERENCE_EVALUATION = [
    ("tutor.temperature", 0.6, "config/eval/*.yaml: teacher_model.vllm.temperature 0.6"),
    ("student.temperature", 0.6, "config/eval/*.yaml: student_model.vllm.temperature 0.6"),
    ("tutor.top_k", 50, "config/train_rl_model.py: ModelvLLMConfig.top_k = 50, kept"),
    ("student.top_k", 50, "config/train_rl_model.py: ModelvLLMConfig.top_k = 50, kept"),
    ("tutor.top_p", 1.0, "config/train_rl_model.py: ModelvLLMConfig.top_p = 1.0"),
    ("openai.temperature", 0.6, "config/eval/*.yaml: judge_model.vllm.temperature 0.6"),
    ("local_judge.temperature", 0.6, "config/eval/*.yaml: judge_model.vllm.temperature 0.6"),
    ("openai.max_tokens", 2048, "config/train_rl_model.py: max_tokens_per_judge_attempt"),
    ("judging.judge_samples", 2, "config/eval.py: number_judge_attempts=2"),
    ("solve.k", 8, "config/eval.py: number_student_attempts=8"),
    ("solve.temperature", 0.6, "the student's temperature (sampling_params_student_solution)"),
    ("solve.max_new_tokens", 3900, "config/train_rl_model.py: max_tokens_per_student_attempt"),
    ("evaluation.samples_per_problem", 1, "config/eval.py: num_samples_per_problem=1"),
    ("job.seed", 42, "config/eval.py: seed=42"),
    ("problems.split", "published", "config/eval.py: Dataset split='test' of the released set"),
    ("problems.n_test", 500, "config/eval.py: max_val_examples=500"),
    ("problems.filter", False, "utils/data.py: the split as loaded, no filter"),
    ("evaluation.pedrm_unscored", "zero", "eval.py: `... if len(score) != 0 else 0`"),
    ("pedrm.format", "pedagogical_rl", "utils/pedagogical_reward.py: format_conversation"),
    ("pedrm.dtype", "float32", "utils/pedagogical_reward.py: LLM(..., dtype=torch.float32)"),
]


@pytest.mark.parametrize("variant", ["pedagogical_rl", "pedagogical_rl,think", "thinking",
                                     "uco", "uco_003"])
def test_tutoring_protocols_sample_as_the_reference_evaluation(variant):
  s = _settings(variant)
  wrong = [(n, jobs.setting(s, n), want, where) for n, want, where in REFERENCE_EVALUATION
           if jobs.setting(s, n) != want]
  assert not wrong, "\n".join(f"{variant}: {n} = {got!r}, reference: {want!r} ({where})"
                               for n, got, want, where in wrong)
  # The split of a raw pool (problems.split=test) is training's (seed 0), not the eval seed's.
  assert s.problems.split_seed == 0


def test_paper_protocols():
  s = _settings("pedagogical_rl")  # Paper 003 section 6 and its reference evaluation.
  assert s.judging.judges == "pedagogical_rl" and s.openai.model == "google/gemma-3-27b-it"
  assert s.rollout.max_turns == 15 and s.rollout.max_conversation_tokens == 8192
  assert (s.rollout.scenario, s.rollout.thinking, s.rollout.force_thinking) == (
      "mixed", False, False)
  t = _settings("pedagogical_rl,think").rollout  # config/eval/TutorRL-think.yaml.
  assert t.thinking and t.force_thinking and t.think_instruction
  t = _settings("thinking")  # Paper 001: GPT-4o-mini judges, the thinking-quality judge.
  assert t.judging.judges == "thinking" and t.openai.model == "gpt-4o-mini"
  assert t.rollout.thinking and t.rollout.tutor_prompt == "thinking/tutor_polya"
  # Table 1's NoThink, Think NoReward and Think Reward were trained on the general prompt.
  for condition in ("no_think", "think_no_reward", "think_reward"):
    r = _settings(f"thinking,condition={condition}").rollout
    assert r.tutor_prompt == "thinking/tutor_general" and r.thinking == (condition != "no_think")
  u = _settings("uco").rollout  # Paper 000 section IV: T = 10 tutor turns, tutor first.
  assert (u.max_tutor_turns, u.scenario) == (10, "guided")
  assert (u.tutor_prompt, u.student_prompt) == ("uco/teacher", "uco/student")  # Table XII.
  # UCO's tutor in 003's dialogues: 003's turn limit, both scenarios, 003's student prompt.
  u = _settings("uco_003").rollout
  assert (u.max_turns, u.max_tutor_turns, u.scenario) == (15, 0, "mixed")
  assert (u.tutor_prompt, u.student_prompt) == ("uco/teacher", "pedagogical_rl/student_system")
  with pytest.raises(flags.IllegalFlagValueError, match="think is paper 003's"):
    _settings("uco,think")
  with pytest.raises(flags.IllegalFlagValueError, match="condition is paper 001's"):
    _settings("uco,condition=no_think")


def _training(config, variant):
  return settings.read_settings(jobs.config(config, variant), settings.TrainingSettings)


def _module(config):
  spec = importlib.util.spec_from_file_location(f"config_{config}", os.path.join(
      ROOT, "experiments", f"{config}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _every_variant(spec) -> list[str]:
  """Each variant of a config alone (flags, every choice, a value for numbers), and tiny
  with each."""
  out = ["paper"]
  for key, kind in spec.items():
    if kind is bool and key != "tiny":
      out.append(key)
    elif isinstance(kind, tuple):
      out += [f"{key}={x}" for x in kind]
    elif kind is float:
      out.append(f"{key}=0.3")
    elif kind is int:
      out.append(f"{key}=4")
  return out + [f"tiny,{v}" if v != "paper" else "tiny" for v in out]


@pytest.mark.parametrize("config", ["pedagogical_rl", "thinking", "uco"])
def test_every_training_variant_has_an_evaluation_twin_with_its_dialogues(config):
  module = _module(config)
  for variant in _every_variant(module.VARIANTS):
    twin = module.evaluation_variant(variant)
    trained = conditions.dialogue_settings(_training(config, variant))
    evaluated = conditions.dialogue_settings(_settings(twin))
    assert evaluated == trained, f"{config}.py:{variant} vs evaluate.py:{twin}"


def test_a_tutor_prompt_file_is_in_the_protocol_by_its_content(tmp_path):
  """Shards of one evaluation must agree on the protocol: a prompt file edited at the
  same path is another protocol (its SHA-1 is recorded beside the path)."""
  from pedrl.experiments import evaluate
  prompt = tmp_path / "teacher.txt"
  prompt.write_text("Help the student with {{ problem }}.\n")
  c = jobs.config("evaluate", "tiny")
  c.rollout.tutor_prompt_file = str(prompt)
  s = settings.read_settings(c, settings.EvaluationSettings)
  before = evaluate.protocol(s).to_dict()  # As the status files record it.
  assert before["rollout"]["tutor_prompt_file_sha1"] == (
      "d18a56ee0be2d6cba88e5136e0ec97a1fd836c5f")  # `sha1sum` of the file.
  prompt.write_text("Tell the student the answer to {{ problem }}.\n")
  after = evaluate.protocol(s).to_dict()
  assert after != before and after["rollout"]["tutor_prompt_file"] == str(prompt)
  assert "tutor_prompt_file_sha1" not in evaluate.protocol(_settings("tiny")).to_dict()["rollout"]


def test_the_reference_prompt_files_an_evaluation_lacks_are_named(tmp_path):
  """Paper 003's protocol reads four prompt files of its reference code that pedrl ships
  only in its own wording: each one not given is named (the job logs them)."""
  from pedrl.experiments import evaluate
  c = jobs.config("evaluate", "pedagogical_rl")
  c.student.path = c.tutor.path = os.path.join(jobs.ROOT, "testdata", "models", "qwen2")
  assert evaluate.unreferenced_prompts(settings.read_settings(c, settings.EvaluationSettings)) == [
      "solve.pre_prompt_file", "rollout.attempt_prompt_file", "rewards.leakage_prompt_file",
      "rewards.helpfulness_prompt_file"]
  given = tmp_path / "prompt.txt"
  given.write_text("{{ problem }}")
  for key in ("solve.pre_prompt_file", "rollout.attempt_prompt_file",
              "rewards.leakage_prompt_file", "rewards.helpfulness_prompt_file"):
    section, name = key.split(".")
    setattr(getattr(c, section), name, str(given))
  assert evaluate.unreferenced_prompts(settings.read_settings(c, settings.EvaluationSettings)) == []
  c.rollout.attempt_prompt_file, c.rollout.scenario = "", "guided"  # No attempt to prompt.
  assert evaluate.unreferenced_prompts(settings.read_settings(c, settings.EvaluationSettings)) == []


def test_reasoning_protocol():
  with pytest.raises(ValueError, match="gsm8k needs its data"):
    _settings("reasoning")  # The benchmarks' files are the user's: named, not guessed.
  r = _settings("tiny,reasoning").reasoning  # Paper 003 table 3 and its LightEval sampling.
  assert r.names == ("gsm8k", "math500", "mmlu")
  assert (r.gsm8k_shots, r.mmlu_shots, r.temperature, r.top_p) == (4, 5, 0.6, 0.95)
  # The reference README's LightEval command: max_new_tokens:8192 (tiny cuts it to 24).
  paper = jobs.config("evaluate", "reasoning").eval.reasoning
  assert (paper.max_new_tokens, paper.temperature, paper.top_p) == (8192, 0.6, 0.95)


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


def test_a_run_trained_in_other_dialogues_is_told_apart():
  # What the evaluation job logs when --config.tutor.workdir names a run trained otherwise:
  # its WORKDIR/config.json (the config as JSON) against the evaluation's settings.
  trained = json.loads(jobs.config("thinking", "no_think").to_json_best_effort())
  assert conditions.differences(trained, _settings("thinking,condition=no_think")) == []
  diffs = conditions.differences(trained, _settings("thinking"))  # Polya, thinking, 4096.
  assert any(d.startswith("rollout.tutor_prompt: trained 'thinking/tutor_general'")
             for d in diffs)
  assert "tutor.max_new_tokens: trained 1024, here 4096" in diffs
  del trained["rollout"]["thinking"]  # A key an older run did not record: not compared.
  assert not any("rollout.thinking" in d for d in conditions.differences(
      trained, _settings("thinking")))
  # Read by the settings types: the recorded values typed, the keys it had listed.
  recorded = conditions.recorded(trained)
  assert recorded.dialogues.rollout.tutor_prompt == "thinking/tutor_general"
  assert recorded.dialogues.rollout.student_names == tuple(trained["rollout"]["student_names"])
  assert recorded.dialogues.tutor_max_new_tokens == 1024
  assert "rollout.thinking" not in recorded.keys and "tutor.max_new_tokens" in recorded.keys
  trained["rollout"]["scenario"] = "sideways"  # A value today's types refuse: said, not raised.
  (diff,) = conditions.differences(trained, _settings("thinking"))
  assert "not readable" in diff and "--config.rollout" in diff and "sideways" in diff
