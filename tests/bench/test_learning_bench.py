"""`pedrl.bench.learning`'s arguments: which model it picks, the config it runs, its windows."""
import subprocess
import sys

import pytest

from tests.helpers import jobs
from pedrl.bench import learning
from pedrl.tools import import_gguf


def test_smollm2_is_the_default_once_imported_into_the_cache(tmp_path, monkeypatch):
  monkeypatch.setenv("PEDRL_MODEL_CACHE", str(tmp_path))
  assert learning.pick_model(None) == learning.TESTDATA
  smollm2 = tmp_path / import_gguf.SMOLLM2
  smollm2.mkdir()
  assert learning.pick_model(None) == learning.TESTDATA  # An unfinished import is not there.
  (smollm2 / import_gguf.DONE).touch()
  assert learning.pick_model(None) == str(smollm2)
  assert learning.pick_model("/models/x") == "/models/x"


def test_a_real_model_is_tutor_and_student_without_thinking_and_a_word_limit():
  tiny = learning.config(30, 1e-3)
  assert tiny.tutor.path.endswith("qwen2") and tiny.rollout.thinking
  assert tiny.rewards.rule_judges.max_tutor_share == 0.5
  c = learning.config(40, 1e-5, None, "/models/smollm2")
  assert c.tutor.path == c.student.path == "/models/smollm2" and not c.rollout.thinking
  assert c.rewards.components == "pedagogy:1" and c.rewards.judge_backend == "rule"
  assert c.rewards.rule_judges.max_tutor_words == 50 and c.scan_layers
  assert c.rewards.rule_judges.max_tutor_share == 0.9
  assert learning.config(40, 1e-5, 0.6, "/m").rewards.rule_judges.max_tutor_share == 0.6
  assert (c.rl.steps, c.rl.lr, c.rl.samples_every, c.rl.samples_dialogues) == (40, 1e-5, 40, 2)
  assert learning.config(40, 1e-5, 0.5, "/m", max_tutor_words=12).rewards.rule_judges \
      .max_tutor_words == 12


def test_windows_cover_every_step():
  assert learning.windows([0, 1, 2, 3, 4], 2) == [(1, 2, 0.5), (3, 4, 2.5), (5, 5, 4.0)]


@pytest.mark.job
def test_a_model_that_is_no_checkpoint_stops_with_one_line(tmp_path):
  r = subprocess.run([sys.executable, "-m", "pedrl.bench.learning", f"--workdir={tmp_path}/w",
                      f"--model={tmp_path}"], cwd=jobs.ROOT, env=jobs.env(), capture_output=True,
                     text=True, timeout=300)
  assert r.returncode == 1
  assert r.stderr.strip().splitlines()[-1] == (
      f"error: --model={tmp_path}: no config.json there (a checkpoint directory, or `testdata`)")
