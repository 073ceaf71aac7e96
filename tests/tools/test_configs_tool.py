"""`python -m pedrl.tools.configs`: every config file and variant listed, one config printed."""
import glob
import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import jobs
from pedrl.tools import configs

CONFIG_FILES = sorted(glob.glob(os.path.join(jobs.ROOT, "experiments", "*.py")))


def _module(path):
  spec = importlib.util.spec_from_file_location(f"config_{os.path.basename(path)[:-3]}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _accepted_forms(spec: dict) -> set[str]:
  """What `variants.parse` accepts after the colon, as a user types each variant."""
  forms = {"paper"}
  for key, kind in spec.items():
    if kind is bool:
      forms.add(key)
    elif isinstance(kind, tuple):
      forms.update(kind)  # Bare choices: `no_think` for `condition=no_think`.
    else:
      forms.add(f"{key}=<{kind.__name__}>")
  return forms


def _makes_config(module, arg: str) -> bool:
  try:
    return module.get_config(arg) is not None
  except ValueError:
    return False


def test_every_config_file_is_listed():
  names = [f.name for f in configs.config_files()]
  assert names == [os.path.join("experiments", os.path.basename(p)) for p in CONFIG_FILES]


def test_uco_lists_paper_000s_variants():
  uco = next(f for f in configs.config_files() if f.name.endswith("uco.py"))
  # Paper 000: the paper setup, tables III (ablations), V-VIII (λ, α, δ, c), fig. 3 (G
  # rollouts), and pedrl's tiny.
  assert sorted(uco.variants) == sorted(["paper", "tiny", "no_scaffold", "no_progress",
                                         "lam=<float>", "alpha=<float>", "delta=<float>",
                                         "c=<float>", "rollouts=<int>"])
  assert all(uco.variants.values())


@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_the_listed_variants_are_what_get_config_accepts(path):
  module = _module(path)
  listed = configs.read(path).variants
  assert set(listed) == _accepted_forms(module.VARIANTS)
  args = [f.replace("<float>", "0.5").replace("<int>", "2").replace("<str>", "x") for f in listed]
  for arg in args:  # Each, with a value where it takes one, makes a config: alone, or with one
    # other listed variant it needs (evaluate.py's conditions need its thinking protocol).
    assert any(_makes_config(module, combined)
               for combined in [arg] + [f"{other},{arg}" for other in args if other != arg]), arg
  with pytest.raises(ValueError, match="unknown variant"):
    module.get_config("no_such_variant")


def test_a_config_file_without_variant_help_is_named(tmp_path):
  bad = tmp_path / "new.py"
  bad.write_text('"""A new job."""\nVARIANTS = dict(tiny=bool)\n')
  with pytest.raises(ValueError, match=f"{bad}: no VARIANT_HELP"):
    configs.read(str(bad))


def _run(*args, cwd):
  return subprocess.run([sys.executable, "-m", "pedrl.tools.configs", *args], cwd=cwd,
                        env=jobs.env(), capture_output=True, text=True, timeout=300)


@pytest.mark.job
def test_the_listing_runs_from_anywhere_without_jax(tmp_path):
  out = _run(cwd=tmp_path)
  assert out.returncode == 0, out.stderr
  assert "experiments/uco.py  UCO (paper 000)" in out.stdout
  assert re.search(r"\n  lam=<float> +λ of eq. 5", out.stdout), out.stdout
  probe = subprocess.run(
      [sys.executable, "-c", "import sys; from pedrl.tools import configs; "
       "configs.listing(configs.config_files()); print('jax' in sys.modules)"],
      cwd=tmp_path, env=jobs.env(), capture_output=True, text=True, timeout=60)
  assert probe.stdout.strip() == "False", probe.stderr


@pytest.mark.job
def test_show_prints_the_resolved_config_with_overrides(tmp_path):
  out = _run("--show=experiments/uco.py:paper", cwd=tmp_path)
  assert out.returncode == 0, out.stderr
  values = dict(line.split("=", 1) for line in out.stdout.splitlines()[1:])
  # Paper 000 section IV: lr 5e-6, B 16, G 4, λ 0.5, α 2.0, δ 0.7, c 0.2, KL 0.01.
  assert (values["rl.lr"], values["batch_problems"], values["group_size"]) == ("5e-06", "16", "4")
  assert [values[f"rewards.uco.{k}"] for k in ("lam", "alpha", "delta", "c")] == [
      "0.5", "2.0", "0.7", "0.2"]
  assert values["rl.beta"] == "0.01"

  out = _run("--show", "experiments/uco.py:tiny,lam=0.3", "--config.rl.lr=1e-4",
             "--config.group_size=3", cwd=tmp_path)
  assert out.returncode == 0, out.stderr
  values = dict(line.split("=", 1) for line in out.stdout.splitlines()[1:])
  assert (values["rewards.uco.lam"], values["rl.lr"], values["group_size"]) == ("0.3", "0.0001", "3")
  # Relative paths resolved against the repository, as the job reads them.
  assert values["tutor.path"] == os.path.join(jobs.ROOT, "testdata", "models", "qwen2")


@pytest.mark.job
@pytest.mark.parametrize("args, says", [
    (["--show=experiments/uco.py:tny"], "unknown variant 'tny'"),
    (["--show=experiments/uco.py:tiny", "--config.rl.lrr=1"], "--config.rl has no key 'lrr'"),
    (["extra"], "unexpected arguments ['extra']"),
])
def test_a_mistake_is_one_line(tmp_path, args, says):
  out = _run(*args, cwd=tmp_path)
  assert out.returncode == 1
  assert out.stderr.strip().count("\n") == 0 and says in out.stderr, out.stderr
