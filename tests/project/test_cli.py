"""The command line's mistakes: one `error:` line, exit code 1, no workdir made; and
--helpshort shows the entry point's own flags."""
import os
import subprocess
import sys

import pytest

from tests.helpers import jobs


def _uco(tmp_path, *args, cwd=jobs.ROOT):
  """The uco job, or the job whose config file the first argument names."""
  workdir = tmp_path / "run"
  name = args[0].partition("experiments/")[2].partition(".py")[0] if args else ""
  module = name if os.path.exists(os.path.join(jobs.ROOT, "pedrl", "experiments", f"{name}.py")) \
      else "uco"
  out = subprocess.run([sys.executable, "-m", f"pedrl.experiments.{module}", *args,
                        f"--workdir={workdir}"], cwd=cwd, env=jobs.env(), capture_output=True,
                       text=True, timeout=300)
  return out, workdir


@pytest.mark.job
@pytest.mark.parametrize("args, says", [
    (["--config=experiments/uco.py:tinyy"],
     ["variant 'tinyy'", "valid: paper, lam=<float>", "no_progress, tiny"]),
    (["--config=experiments/pedagogical_rl.py:lamda"], ["unknown variant 'lamda'", "hard, think"]),
    (["--config=experiments/nope.py:tiny"], ["experiments/nope.py", "no such file"]),
    (["--config=experiments/nope.py:tiny", "--config.rl.lr=1"], ["experiments/nope.py"]),
    (["--config=experiments/uco.py:tiny", "--config.rl.lr=abc"], ["--config.rl.lr=abc", "'abc'"]),
    (["--config=experiments/uco.py:tiny", "--config.rl.lrr=1"],
     ["--config.rl.lrr: --config.rl has no key 'lrr'", "lr,"]),
    (["--config=experiments/uco.py:tiny", "--steps=3"], ["Unknown command line flag 'steps'"]),
])
def test_a_mistake_is_one_line_and_makes_no_workdir(tmp_path, args, says):
  out, workdir = _uco(tmp_path, *args)
  assert out.returncode == 1
  lines = out.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
  for text in says:
    assert text in lines[0]
  assert not os.path.exists(workdir)


@pytest.mark.job
@pytest.mark.parametrize("args, line", [
    (["--config=experiments/uco.py:tiny"],
     "error: --workdir is missing: the job's output directory, e.g. --workdir=/tmp/run"),
    (["--workdir=/tmp/never"],
     "error: --config is missing: a config file and its variant, e.g. "
     "--config=experiments/uco.py:tiny"),
])
def test_a_missing_job_flag_is_one_line(args, line):
  out = subprocess.run([sys.executable, "-m", "pedrl.experiments.uco", *args], cwd=jobs.ROOT,
                       env=jobs.env(), capture_output=True, text=True, timeout=300)
  assert out.returncode == 1
  assert out.stderr.strip().splitlines() == [f"{line} (--helpshort lists the flags)"]


@pytest.mark.job
@pytest.mark.parametrize("job, args", [
    ("uco", ["--config=experiments/nope.py:tiny", "--workdir=/tmp/never"]),
    ("evaluate", ["--workdir=/tmp/never"]),
    ("mathtutorbench", ["--config=experiments/mathtutorbench.py:tiny"]),
    ("cpa", ["--config", "experiments/cpa.py:tiny", "--workdir", "/tmp/never", "--steps", "3"]),
    ("thinking", ["--config=experiments/uco.py:tiny", "--workdir=/tmp/never"]),  # Another job's.
    # What needs the config file loaded: its variant, an override's key, an override's type.
    ("uco", ["--config=experiments/uco.py:nosuch", "--workdir=/tmp/never"]),
    ("evaluate", ["--config=experiments/evaluate.py:tiny", "--config.x=1",
                  "--workdir=/tmp/never"]),
    ("mdpo", ["--config=experiments/mdpo.py:tiny", "--config.train.lr=abc",
              "--workdir=/tmp/never"]),
    ("rollout", ["--config=experiments/rollout.py:tiny", "--config.rollout.max_turnz", "3",
                 "--workdir=/tmp/never"]),
    # And what the job's settings types refuse.
    ("thinking", ["--config=experiments/thinking.py:tiny", "--config.rl.advantage=foo",
                  "--workdir=/tmp/never"]),
    ("evaluate", ["--config=experiments/evaluate.py:tiny", "--config.eval.confidence=2",
                  "--workdir=/tmp/never"]),
    ("cpa", ["--config=experiments/cpa.py:tiny", "--config.agents.methods=cpa,nope",
             "--workdir=/tmp/never"]),
    # The GRPO job itself: a training entry point's config is its own, another job's not.
    ("grpo", ["--config=experiments/uco.py:tiny", "--config.rl.advantage=foo",
              "--workdir=/tmp/never"]),
    ("grpo", ["--config=experiments/sft.py:tiny", "--workdir=/tmp/never"]),
])
def test_command_line_mistakes_are_found_before_jax_is_imported(job, args):
  """The job's module checks its command line first (pedrl.cli.check_job), before its
  imports load JAX: `-X importtime` lists every module imported before the exit."""
  out = subprocess.run([sys.executable, "-X", "importtime", "-m", f"pedrl.experiments.{job}",
                        *args], cwd=jobs.ROOT, env=jobs.env(), capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 1
  imported = [line.split("|")[-1].strip() for line in out.stderr.splitlines()
              if line.startswith("import time:")]
  errors = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
  assert len(errors) == 1 and errors[0].startswith("error: "), errors
  assert "pedrl.cli" in imported and "jax" not in imported and f"pedrl.experiments.{job}" \
      not in imported, [m for m in imported if not m.startswith(("_", "encodings"))][-20:]


def test_the_early_check_knows_the_multihost_modes():
  from pedrl import cli, distributed
  assert cli.MULTIHOST_MODES == distributed.MODES


@pytest.mark.job
def test_helpshort_lists_the_entry_points_flags():
  out = subprocess.run([sys.executable, "-m", "pedrl.experiments.rollout", "--helpshort"],
                       cwd=jobs.ROOT, env=jobs.env(), capture_output=True, text=True, timeout=300)
  assert out.returncode == 0  # Asked-for help is no failure (absl's own exit code is 1).
  for flag in ("--config:", "--workdir:", "--multihost:"):
    assert flag in out.stdout + out.stderr


@pytest.mark.job
def test_the_config_is_found_from_another_directory_in_either_spelling(tmp_path):
  for args in (["--config=experiments/uco.py:tiny"], ["--config", "experiments/uco.py:tiny"]):
    out, workdir = _uco(tmp_path, *args, "--config.rl.lrr=1", cwd=tmp_path)
    assert "--config.rl has no key 'lrr'" in out.stderr  # Loaded: it knows the keys.
    assert not os.path.exists(workdir)


@pytest.mark.job
def test_a_bug_in_a_config_file_keeps_its_traceback(tmp_path):
  broken = tmp_path / "broken.py"
  broken.write_text("def get_config(arg=None):\n  return {}['missing']\n")
  out, _ = _uco(tmp_path, f"--config={broken}:tiny")
  assert out.returncode != 0
  assert "Traceback" in out.stderr and "broken.py" in out.stderr


def test_paths_of_the_config_file_resolve_against_its_repository_and_overrides_do_not(
    tmp_path, monkeypatch):
  import ml_collections
  from pedrl import paths
  repo = tmp_path / "repo"
  (repo / "testdata").mkdir(parents=True)
  (repo / "experiments").mkdir()
  here = tmp_path / "here"
  (here / "testdata").mkdir(parents=True)  # A testdata/ of the user's: must not shadow.
  monkeypatch.chdir(here)
  c = ml_collections.ConfigDict({"tutor": {"path": "testdata", "temperature": "testdata"},
                                 "student": {"path": "testdata"},
                                 "problems": {"path": "nowhere/x.jsonl"}})
  paths.resolve_config(c, paths.config_root(str(repo / "experiments" / "x.py")),
                       skip=["student.path"])
  assert c.tutor.path == str(repo / "testdata")
  assert c.tutor.temperature == "testdata"  # Not a path-named key.
  assert c.student.path == "testdata"  # Given on the command line: relative to here.
  assert c.problems.path == "nowhere/x.jsonl"  # Missing there too: the job names it.


CACHED = """
import sys, jax, jax.numpy as jnp
from pedrl import cli
cli.use_compilation_cache(sys.argv[1])
jax.jit(lambda x: jnp.sin(x) * 3)(jnp.ones(7)).block_until_ready()
"""


@pytest.mark.job
def test_compiled_programs_go_to_the_cache_unless_it_is_off(tmp_path):
  cache = tmp_path / "cache"
  for setting in (str(cache), "off"):
    out = subprocess.run([sys.executable, "-c", CACHED, setting], env=jobs.env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
  assert cache.is_dir() and os.listdir(cache)  # The one program, stored.
  assert not os.path.exists("off")
  env = dict(jobs.env(), PEDRL_COMPILATION_CACHE=str(tmp_path / "mine"))
  out = subprocess.run([sys.executable, "-c",
                        "from pedrl import cli; print(cli.default_cache_dir())"],
                       env=env, capture_output=True, text=True, timeout=120)
  assert out.stdout.strip() == str(tmp_path / "mine")
