"""Config variants (`experiments/uco.py:tiny,lam=0.3`): both spellings, the papers' values, errors."""
import os
import subprocess
import sys

from absl import flags
from ml_collections import config_flags
import pytest

from tests.helpers.jobs import ROOT
from pedrl.jobs import variants

SPEC = dict(lam=float, steps=int, hard=bool, condition=("a", "b"))


def _config(arg):
  """experiments/ARG (`uco.py:tiny,lam=0.3`) as an entry point's --config flag loads it."""
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=fv)
  fv(["test", f"--config={os.path.join(ROOT, 'experiments', arg)}"])
  return fv.config.to_dict()


@pytest.mark.parametrize("arg, want", [
    ("paper", dict(lam=None, steps=None, hard=False, condition="a")),
    ("", dict(lam=None, steps=None, hard=False, condition="a")),
    ("lam0.3", dict(lam=0.3, steps=None, hard=False, condition="a")),
    ("hard,lam=1.0,steps=3", dict(lam=1.0, steps=3, hard=True, condition="a")),
    ("hard=False, steps7, b", dict(lam=None, steps=7, hard=False, condition="b")),
    ("condition=b,lam=-1e-3", dict(lam=-1e-3, steps=None, hard=False, condition="b")),
])
def test_both_spellings_parse(arg, want):
  assert vars(variants.parse(arg, SPEC)) == want


@pytest.mark.parametrize("arg, named", [
    ("lamda", "'lamda'"), ("lam=da", "lam=da"), ("tiny", "'tiny'"), ("foo=1", "'foo'"),
    ("lam", "lam needs a value"), ("hard=yes", "hard=yes"), ("condition=c", "condition=c"),
    ("steps=1.5", "steps=1.5"), ("lam0.1,lam=0.2", "lam given twice"),
])
def test_bad_items_are_named_with_the_valid_ones(arg, named):
  with pytest.raises(ValueError) as e:
    variants.parse(arg, SPEC)
  assert named in str(e.value)
  assert "valid: paper, lam=<float>, steps=<int>, hard, condition=a|b" in str(e.value)


@pytest.mark.parametrize("old, new", [
    ("uco.py:lam0.3", "uco.py:lam=0.3"), ("uco.py:alpha2.5", "uco.py:alpha=2.5"),
    ("uco.py:delta0.9", "uco.py:delta=0.9"), ("uco.py:c0.1", "uco.py:c=0.1"),
    ("uco.py:no_scaffold", "uco.py:no_scaffold=true"), ("uco.py:paper", "uco.py"),
    ("pedagogical_rl.py:hard", "pedagogical_rl.py:hard=True"),
    ("pedagogical_rl.py:hard", "pedagogical_rl.py:hard,lam=1.0"),
    ("pedagogical_rl.py:lam1.5", "pedagogical_rl.py:lam=1.5"),
    ("pedagogical_rl.py:lam0", "pedagogical_rl.py:lam=0"),
    ("thinking.py:no_think", "thinking.py:condition=no_think"),
    ("thinking.py:paper", "thinking.py:condition=ped_think_reward"),
    ("thinking.py:tiny", "thinking.py:tiny,ped_think_reward"),
    ("rollout.py:tiny_uco", "rollout.py:tiny_uco=1"), ("rollout.py:paper", "rollout.py:"),
])
def test_old_names_equal_their_new_spelling(old, new):
  assert _config(old) == _config(new)


def test_the_papers_values():
  uco = _config("uco.py:lam=0.3")["rewards"]["uco"]
  assert (uco["lam"], uco["alpha"], uco["delta"], uco["c"]) == (0.3, 2.0, 0.7, 0.2)  # 000 table V.
  tiny, tiny_lam = _config("uco.py:tiny"), _config("uco.py:tiny,lam=0.3")
  assert tiny_lam["rewards"]["uco"]["lam"] == 0.3 and tiny_lam["tutor"] == tiny["tutor"]
  tiny_lam["rewards"]["uco"]["lam"] = 0.5
  assert tiny_lam == tiny  # Tiny with an ablation value: nothing else moves.
  assert _config("uco.py:no_progress")["rewards"]["uco"]["progress_weight"] == 0.0  # Table III.

  for arg, hard, lam in [("paper", False, 0.75), ("hard", True, 1.0),  # Paper 003.
                         ("hard,lam=1.5", True, 1.5), ("lam=0", False, 0.0)]:
    rewards = _config(f"pedagogical_rl.py:{arg}")["rewards"]
    assert (rewards["hard"], rewards["lam"]) == (hard, lam), arg
  # Table 2's +think rows: tagged thinking asked for and its opening forced.
  for arg, hard, lam in [("think", False, 0.75), ("lam1.5_think", False, 1.5),
                         ("hard_think", True, 1.0)]:
    c = _config(f"pedagogical_rl.py:{arg}")
    assert (c["rewards"]["hard"], c["rewards"]["lam"]) == (hard, lam), arg
    assert c["rollout"]["thinking"] and c["rollout"]["force_thinking"], arg
    assert c["rollout"]["think_instruction"] == "pedagogical_rl/think_instruction", arg
  assert not _config("pedagogical_rl.py")["rollout"]["force_thinking"]
  no_sol = _config("pedagogical_rl.py:no_sol")["rewards"]  # Table 2's −r_sol: hard λ = 1.0.
  assert (no_sol["hard"], no_sol["lam"], no_sol["components"]) == (
      True, 1.0, "pedagogy:1,template:1")

  no_think = _config("thinking.py:tiny,no_think")  # Paper 001 section 2.5.
  assert no_think["rollout"]["thinking"] is False and no_think["rl"]["steps"] == 3
  assert no_think["rewards"]["components"] == "r_sol:1,pedagogy:1"
  assert _config("thinking.py")["rollout"]["tutor_prompt"] == "thinking/tutor_polya"
  # Paper 001 leaves the thinking tutor's token limits open; pedrl's choice (thinking.py).
  for arg, turn, conversation in [("paper", 4096, 32768), ("no_think", 1024, 8192),
                                  ("tiny", 24, 700)]:
    c = _config(f"thinking.py:{arg}")
    assert (c["tutor"]["max_new_tokens"], c["rollout"]["max_conversation_tokens"]) == (
        turn, conversation), arg
  assert _config("rollout.py:tiny_uco")["rewards"]["components"] == "uco:1,template:1"


@pytest.mark.parametrize("arg, named, valid", [
    ("uco.py:tiny,lamda", "'lamda'", "lam=<float>, alpha=<float>, delta=<float>, c=<float>"),
    ("pedagogical_rl.py:lam=da", "lam=da", "lam=<float>, hard, think, no_sol, tiny"),
    ("thinking.py:no_thinking", "'no_thinking'", "condition=ped_think_reward|no_think|"),
    ("rollout.py:tiny,uco", "'uco'", "paper, tiny, tiny_uco"),
])
def test_config_files_name_a_bad_item_and_the_valid_ones(arg, named, valid):
  with pytest.raises(flags.IllegalFlagValueError) as e:
    _config(arg)
  assert named in str(e.value) and valid in str(e.value)


@pytest.mark.job
def test_the_entry_point_prints_the_error_readably():
  r = subprocess.run([sys.executable, "-m", "pedrl.experiments.uco",
                      "--config=experiments/uco.py:tiny,lam=da", "--workdir=/nonexistent"],
                     cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert r.returncode == 1
  assert r.stderr.startswith("error: --config=experiments/uco.py:tiny,lam=da: variant "
                             "'tiny,lam=da': bad value lam=da; valid: paper, lam=<float>")
  assert "Traceback" not in r.stderr
