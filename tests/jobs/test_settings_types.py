"""The typed settings of a job: one type per kind of job, every value read once and passed.

A dialogue job's settings (rollouts, baseline data), a training job's and an
evaluation job's are three types; nothing in them is a plain dict or None for half
the jobs, and no value of the config lives in two settings objects (a copy could
disagree with its source)."""
import collections
import dataclasses
import json
import os
import types
import typing

import jax.numpy as jnp
import pytest

from pedrl import paths
from pedrl.clients import openai_compat
from pedrl.engine.distribution import SamplingParams
from pedrl.jobs import reward_factory, settings
from pedrl.rl import checkpoint, trainer, update

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
JOBS = [("uco.py", settings.TrainingSettings), ("pedagogical_rl.py", settings.TrainingSettings),
        ("thinking.py", settings.TrainingSettings), ("rollout.py", settings.DialogueSettings),
        ("evaluate.py", settings.EvaluationSettings)]


def _paths(value, prefix="") -> dict[str, list[str]]:
  """{field name: every dotted path at which a dataclass in `value`'s tree has it}."""
  out = collections.defaultdict(list)
  for f in dataclasses.fields(value):
    path, child = f"{prefix}{f.name}", getattr(value, f.name)
    out[f.name].append(path)
    if dataclasses.is_dataclass(child):
      for name, where in _paths(child, path + ".").items():
        out[name] += where
  return out


def _optional(hint) -> bool:
  union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
  return union and type(None) in typing.get_args(hint)


@pytest.mark.parametrize("kind", [settings.DialogueSettings, settings.TrainingSettings,
                                  settings.EvaluationSettings])
def test_a_jobs_settings_hold_typed_sections_none_of_them_a_dict_or_optional(kind):
  hints = typing.get_type_hints(kind)
  for f in dataclasses.fields(kind):
    hint = hints[f.name]
    assert dataclasses.is_dataclass(hint) and not _optional(hint), (kind.__name__, f.name, hint)


@pytest.mark.parametrize("config,kind", JOBS, ids=[c for c, _ in JOBS])
def test_the_seed_batch_shape_temperature_and_failed_share_are_held_once(config, kind):
  s = settings.read_settings(paths.load_config(config, "paper"), kind)
  where = _paths(s)
  for name in ("seed", "batch_problems", "group_size"):
    assert where[name] == [f"job.{name}"], where[name]
  assert where["max_failed_share"] == ["judging.max_failed_share"]
  # Each side, the solve attempts, the judges' endpoint and an evaluation's reasoning
  # benchmarks sample at their own temperature; GRPO's log-probs use the tutor's
  # (Trainer), with no copy of it in the settings. Every endpoint is one type, whose
  # temperature UCO's oracle takes from the judges' section (its own left None) and an
  # endpoint side from its side's (pedrl.jobs.loading.endpoint_party): not in the config.
  own = {"tutor", "student", "solve", "openai", "local_judge", "oracle_endpoint"}
  if kind is settings.EvaluationSettings:
    own.update(("reasoning", "tutor_endpoint", "student_endpoint"))
  assert sorted(where["temperature"]) == sorted(f"{x}.temperature" for x in own)


def test_the_judges_endpoint_is_typed_and_a_bad_value_is_refused_on_reading():
  c = paths.load_config("uco.py", "tiny")
  s = settings.read_settings(c, settings.TrainingSettings)
  assert isinstance(s.openai, openai_compat.EndpointSettings) and s.openai.model == "gpt-4o-mini"
  c.rewards.openai.max_tokens_field = "max_token"
  with pytest.raises(ValueError, match=r"^--config\.rewards\.openai\.max_tokens_field="
                                       r"'max_token': must be one of \('max_tokens', "):
    settings.read_settings(c, settings.TrainingSettings)
  c = paths.load_config("uco.py", "tiny")
  c.rewards.openai.modle = "gpt-4o"
  with pytest.raises(settings.UnreadKeys,
                     match=r"^nothing reads --config\.rewards\.openai\.modle "):
    settings.read_settings(c, settings.TrainingSettings)


def test_a_training_config_needs_groups_and_the_failed_share_is_checked_on_reading():
  c = paths.load_config("rollout.py", "tiny")
  c.group_size = 1
  settings.read_settings(c)  # Rollouts of one dialogue per problem are fine.
  c = paths.load_config("pedagogical_rl.py", "tiny")
  c.group_size = 1
  with pytest.raises(ValueError, match=r"^--config\.group_size=1: group_size must be at least 2"):
    settings.read_settings(c, settings.TrainingSettings)
  c = paths.load_config("rollout.py", "tiny")
  c.rewards.max_failed_share = 1.5
  with pytest.raises(ValueError, match=r"^--config\.rewards: max_failed_share 1\.5 is not in"):
    settings.read_settings(c)


@pytest.mark.parametrize("temperature,want", [(0.7, 0.7), (0.0, 1.0)])
def test_grpo_takes_the_log_prob_temperature_of_the_tutor_it_trains(temperature, want):
  """The update's log-probs are of logits / T with the tutor's sampling T (greedy: 1), as
  the sampler's: the sampled distribution is the trained one."""
  tutor = types.SimpleNamespace(params={"w": jnp.zeros(2)},
                                sampling=SamplingParams(8, temperature=temperature))
  run = trainer.Trainer(trainer.TrainSettings(), update.GRPOSettings(micro_batch=2), tutor, None,
                        None, None, [], update.OptimizerSettings().optimizer(1), "", None, None,
                        {}, seed=3, batch_problems=4, group_size=2)
  assert run.objective == update.GRPOObjective(update.GRPOSettings(micro_batch=2), want)
  assert run.objective.micro_batch == 2
  assert run.data_meta() == {"seed": 3, "batch_problems": 4, "group_size": 2}


class _SavedAt:
  """Checkpoints holding one step saved with `meta`."""

  def __init__(self, meta):
    self.meta, self.directory = meta, "/runs/a/checkpoints"

  def restore(self, state_like, fingerprint):
    return 3, state_like, self.meta


@dataclasses.dataclass(frozen=True)
class _Tutor:
  params: dict
  sampling: SamplingParams


def _grpo(steps: int, decays: bool, ckpt) -> trainer.Trainer:
  tutor = _Tutor({"w": jnp.zeros(2)}, SamplingParams(8))
  return trainer.Trainer(trainer.TrainSettings(steps=steps), update.GRPOSettings(), tutor, None,
                         None, None, [], update.OptimizerSettings().optimizer(1), "", ckpt,
                         types.SimpleNamespace(resume=lambda step: None), {}, seed=3,
                         batch_problems=4, group_size=2, schedule_decays=decays)


def test_a_grpo_run_whose_learning_rate_decays_is_not_resumed_with_another_length():
  """Cosine or linear decay reaches 0 at the last step: resumed at step 3 of 6 with 12 steps,
  a cosine rate would jump from half its peak to 0.85 of it."""
  saved = _grpo(6, True, None).data_meta()
  assert saved == {"seed": 3, "batch_problems": 4, "group_size": 2, "steps": 6}
  with pytest.raises(checkpoint.CheckpointError, match=r"/runs/a/checkpoints: the run was "
                     r"started with steps=6, this config has 12; resuming would change its "
                     r"data order or schedule"):
    _grpo(12, True, _SavedAt(saved)).restore_if_any()
  assert _grpo(6, True, _SavedAt(saved)).restore_if_any()
  # A constant rate does not depend on the length: a run may be extended.
  constant = _grpo(6, False, None).data_meta()
  assert "steps" not in constant and _grpo(12, False, _SavedAt(constant)).restore_if_any()
  # Saved before the length was recorded: resumed, with a warning.
  assert _grpo(12, True, _SavedAt(constant)).restore_if_any()


def test_protocols_record_the_seed_with_the_rollout_and_solve_sections_as_before():
  """Shards written before the seed left RolloutSettings and SolveSettings recorded it in
  both sections: today's tiny evaluation builds the very sections they hold."""
  s = settings.read_settings(paths.load_config("evaluate.py", "tiny"), settings.EvaluationSettings)
  status = os.path.join(ROOT, "testdata", "records", "eval_v1", "shards",
                        "status-00000-of-00002.json")
  with open(status) as f:
    old = json.load(f)["protocol"]
  # Less the settings added since those shards were written (a protocol that has them
  # differs from theirs, as it should: the dialogues differ).
  added = ("student_names", "attempt_prompt_file", "attempt_role", "pre_prompt_file",
           "tutor_history_thinking", "attempt_view")
  drop = lambda protocol: {k: v for k, v in protocol.items() if k not in added}
  assert drop(reward_factory.rollout_protocol(s.rollout, s.job.seed)) == dict(
      old["rollout"], attempt_prompt="pedagogical_rl/student_initial_attempt")
  assert drop(reward_factory.solve_protocol(s.solve, s.job.seed)) == dict(
      old["solve"], pre_prompt="pedagogical_rl/student_attempt")
  assert old["rollout"]["seed"] == old["solve"]["seed"] == s.job.seed == 42
