"""Config files → typed settings: every key is read by something, defaults are the papers'."""
import importlib.util
import os

import pytest

from pedrl.jobs import settings

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
FILES = {"uco": settings.TrainingSettings, "pedagogical_rl": settings.TrainingSettings,
         "thinking": settings.TrainingSettings, "rollout": settings.DialogueSettings}


def _module(name):
  spec = importlib.util.spec_from_file_location(f"config_{name}",
                                                os.path.join(ROOT, "experiments", f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _variants(module) -> list[str]:
  """paper, and each of the file's variant items on its own."""
  spec = getattr(module, "VARIANTS", None) or module.base_config.VARIANTS
  out = ["paper"]
  for name, kind in spec.items():
    if kind is bool:
      out.append(name)
    elif isinstance(kind, tuple):
      out += [f"{name}={choice}" for choice in kind]
    else:  # A value every numeric variant accepts (GRPO needs rollouts >= 2).
      out.append(f"{name}={kind(4) if kind is int else kind(1)}")
  return out


CASES = [(name, v) for name in FILES for v in _variants(_module(name))]


@pytest.mark.parametrize("name,variant", CASES, ids=[f"{n}:{v}" for n, v in CASES])
def test_every_key_of_every_config_is_read(name, variant):
  config = _module(name).get_config(variant)
  settings.read_settings(config, FILES[name])  # UnreadKeys names any key left.


def test_a_key_nothing_reads_is_an_error_naming_it():
  config = _module("uco").get_config("tiny")
  config.rollout.max_turn = 3  # A typo of max_turns.
  config.rl.gama = 0.9
  with pytest.raises(settings.UnreadKeys, match=r"--config.rl.gama, --config.rollout.max_turn"):
    settings.read_settings(config, settings.TrainingSettings)


def test_a_rollout_config_with_an_rl_section_is_refused():
  config = _module("rollout").get_config("tiny")
  config.rl = _module("uco").get_config("tiny").rl
  with pytest.raises(settings.UnreadKeys, match=r"--config.rl.lr"):
    settings.read_settings(config)


def test_sections_carry_the_papers_defaults_from_the_settings_types():
  c = _module("pedagogical_rl").get_config("paper")
  # Paper 003: B 16, G 8, 15 messages (the reference's count of 16 turns), 8192-token conversations, K 8 at T 0.6, λ 0.75,
  # lr 5e-7, β 0.001, μ 2, 150 steps (A.1, A.2 and the reference code).
  assert (c.batch_problems, c.group_size) == (16, 8)
  assert (c.rollout.max_turns, c.rollout.max_conversation_tokens) == (15, 8192)
  assert (c.solve.k, c.solve.temperature, c.solve.max_new_tokens) == (8, 0.6, 3900)
  assert (c.rewards.lam, c.rewards.components) == (0.75, "r_sol:1,pedagogy:1,template:1")
  assert (c.rl.lr, c.rl.beta, c.rl.passes, c.rl.steps) == (5e-7, 0.001, 2, 150)
  assert (c.tutor.temperature, c.tutor.top_k, c.student.temperature) == (1.0, 50, 0.6)
  s = settings.read_settings(c, settings.TrainingSettings)
  assert s.train.steps == 150 and s.optimizer.lr == 5e-7 and s.tutor.temperature == 1.0
  assert s.job.seed == c.seed
  assert (s.job.batch_problems, s.job.group_size) == (16, 8)
  # Paper 000 section IV: lr 5e-6, G 4, KL 0.01, γ 0.95, λ 0.5, α 2, δ 0.7, c 0.2.
  u = settings.read_settings(_module("uco").get_config("paper"), settings.TrainingSettings)
  assert (u.optimizer.lr, u.job.group_size, u.grpo.beta, u.rewards.gamma) == (5e-6, 4, 0.01, 0.95)
  assert (u.uco.lam, u.uco.alpha, u.uco.delta, u.uco.c) == (0.5, 2.0, 0.7, 0.2)
  assert u.judging.max_failed_share == 0.2


_PRINT_SETTINGS = """
from absl import app, flags
from ml_collections import config_flags
from pedrl.jobs import settings
config_flags.DEFINE_config_file("config", None, "")
def main(_):
  s = settings.read_settings(flags.FLAGS.config, settings.TrainingSettings)
  print(s.grpo.eps_high, s.openai.base_url, s.oracle_endpoint.model, s.tutor.path)
app.run(main)
"""


@pytest.mark.job
def test_none_defaults_are_settable_from_the_command_line():
  """Fields whose default is None are typed placeholders, so a flag can set them."""
  import subprocess
  import sys
  r = subprocess.run(
      [sys.executable, "-c", _PRINT_SETTINGS, "--config=experiments/uco.py:tiny",
       "--config.rl.eps_high=0.28", "--config.rewards.openai.base_url=http://127.0.0.1:1/v1",
       "--config.rewards.uco.oracle_endpoint.model=m", "--config.tutor.path=/ckpt"],
      cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert r.returncode == 0, r.stderr[-2000:]
  assert r.stdout.split() == ["0.28", "http://127.0.0.1:1/v1", "m", "/ckpt"]


def test_section_refuses_unknown_and_missing_fields():
  from pedrl.env import party
  with pytest.raises(ValueError, match="not fields"):
    settings.section(party.PartySettings, path=None, temperature=1.0, top_k=0, top_p=1.0,
                     max_new_tokens=8, tempreature=0.5)
  with pytest.raises(ValueError, match="no default"):
    settings.section(party.PartySettings, path=None)


def test_a_sides_compact_setting_reaches_its_sampler():
  """`tutor.compact` (default on) is the tutor's Sampler(compact=...): finished rows
  leave the decode batch unless a config turns it off."""
  from pedrl import paths
  from pedrl.jobs import loading
  config = paths.load_config("rollout.py", "tiny")
  assert config.tutor.compact is True and config.student.compact is True
  config.tutor.compact = False
  s = settings.read_settings(config)
  assert loading.load_party(s.tutor, None, False).sampler.compact is False
  assert loading.load_party(s.student, None, False).sampler.compact is True
