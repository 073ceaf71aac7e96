"""Workdirs record their run (run.json) and refuse another; SIGINT/SIGTERM as stop requests."""
import json
import os
import signal

import ml_collections
import pytest

from pedrl import stopping
from pedrl.jobs import settings, workdir
from pedrl.jobs.base_config import dialogue_config
from pedrl.jobs.rl_config import rl_section


def _config(components="r_sol:1,pedagogy:1,template:1", advantage="dialogue",
            resume_mismatch="refuse"):
  c = dialogue_config("tiny")
  c.rewards.components = components
  c.resume_mismatch = resume_mismatch
  c.rl = rl_section(advantage=advantage)
  return settings.read_settings(c, settings.TrainingSettings)


@pytest.fixture
def in_root(monkeypatch):
  monkeypatch.chdir(os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))


def test_a_workdir_is_resumed_by_its_run_and_refused_to_another(tmp_path, in_root):
  w = str(tmp_path / "w")
  workdir.claim(w, _config(), "train", "experiments/pedagogical_rl.py:tiny")
  record = json.load(open(os.path.join(w, "run.json")))
  assert record["identity"]["rewards"] == "r_sol:1,pedagogy:1,template:1"
  assert record["identity"]["tutor"]["model_type"] == "qwen2"
  workdir.claim(w, _config(), "train", "experiments/pedagogical_rl.py:tiny")  # Same run: fine.
  for c, job, diff in ((_config("uco:1", "turn"), "train", "rewards=uco:1"),
                       (_config(), "rollout", "job=rollout")):
    with pytest.raises(workdir.WorkdirError) as e:
      workdir.claim(w, c, job, "other.py:x")
    assert diff in str(e.value) and "experiments/pedagogical_rl.py:tiny" in str(e.value)
    assert "other.py:x" in str(e.value) and "resume_mismatch=allow" in str(e.value)
  c = _config("uco:1", "turn", resume_mismatch="allow")
  workdir.claim(w, c, "train", "experiments/uco.py:tiny")  # Taken over: the record follows.
  assert json.load(open(os.path.join(w, "run.json")))["config"] == "experiments/uco.py:tiny"


def test_a_workdir_from_before_run_json_is_judged_by_what_it_holds(tmp_path, in_root):
  w = tmp_path / "old_rollouts"
  w.mkdir()
  (w / "dialogues.jsonl").write_text("")
  with pytest.raises(workdir.WorkdirError, match="holds a rollout run"):
    workdir.claim(str(w), _config(), "train", "experiments/pedagogical_rl.py:tiny")
  workdir.claim(str(w), _config(), "rollout", "experiments/rollout.py:tiny")
  assert (w / "run.json").exists()


@pytest.mark.job
def test_run_json_records_each_start_and_config_json_has_absolute_paths(tmp_path, in_root):
  import importlib.metadata
  import subprocess
  import jax
  w = str(tmp_path / "w")
  for _ in range(2):  # A start and a resume.
    workdir.claim(w, _config(), "train", "experiments/pedagogical_rl.py:tiny")
  record = json.load(open(os.path.join(w, "run.json")))
  assert len(record["starts"]) == 2 and record["provenance"] == record["starts"][-1]
  p = record["provenance"]
  head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout
  if head:  # Run from a clone (this checkout).
    assert p["git_commit"] == head.strip() and isinstance(p["git_dirty"], bool)
  assert p["versions"]["jax"] == jax.__version__
  assert p["versions"]["transformers"] == importlib.metadata.version("transformers")
  assert p["devices"]["count"] == jax.device_count() and p["started"].endswith("+00:00")
  c = dialogue_config("tiny")
  workdir.write_config(w, c)
  saved = json.load(open(os.path.join(w, "config.json")))
  root = os.getcwd()
  assert saved["tutor"]["path"] == os.path.join(root, "testdata", "models", "qwen2")
  assert saved["problems"]["path"] == os.path.join(root, c.problems.path)
  assert saved["rollout"]["tutor_prompt"] == c.rollout.tutor_prompt  # Not a path: as given.


def test_a_first_signal_is_a_stop_request_and_a_second_ctrl_c_stops_at_once():
  before = signal.getsignal(signal.SIGTERM)
  with stopping.StopRequest("the test") as stop:
    assert stop.requested is None
    os.kill(os.getpid(), signal.SIGTERM)
    assert stop.requested == "SIGTERM"  # Noted; the job decides where to stop.
    with pytest.raises(KeyboardInterrupt):
      os.kill(os.getpid(), signal.SIGINT)
  assert signal.getsignal(signal.SIGTERM) is before


def test_a_config_is_never_written_over_a_checkpoints(tmp_path, testdata):
  import shutil
  model = tmp_path / "model"
  shutil.copytree(testdata("qwen2"), model)
  before = (model / "config.json").read_text()
  with pytest.raises(workdir.WorkdirError, match="holds a model checkpoint"):
    workdir.write_config(str(model), ml_collections.ConfigDict({"a": 1}))
  assert (model / "config.json").read_text() == before
