"""Entry points under failure: signals, another run's workdir, endpoints down before the
models load, an empty problem split. Those that need a finished run are in test_training."""
import os
import signal
import subprocess
import time

import pytest

from tests.helpers.jobs import ROOT, cmd as _cmd, env as _env, metrics as _metrics

pytestmark = pytest.mark.job  # Every test here starts a job.


def test_sigint_finishes_the_step_saves_and_exits_130(tmp_path):
  """On thinking:tiny, whose first step also shows the tiny configs' reward spread."""
  workdir = tmp_path / "interrupted"
  proc = subprocess.Popen(_cmd("thinking", workdir, "--config.rl.save_every=10"), cwd=ROOT,
                          env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  deadline = time.time() + 600
  while not ((workdir / "metrics.jsonl").exists() and (workdir / "metrics.jsonl").read_text()):
    assert time.time() < deadline and proc.poll() is None
    time.sleep(0.2)
  proc.send_signal(signal.SIGINT)
  _, err = proc.communicate(timeout=600)
  assert proc.returncode == 130, err[-3000:]
  assert "Traceback" not in err and "stopping on SIGINT at step" in err
  step = int(err.split("stopping on SIGINT at step ")[1].split()[0])
  assert step < 3 and str(step) in os.listdir(workdir / "checkpoints")
  assert [m["step"] for m in _metrics(workdir)] == list(range(1, step + 1))
  first = _metrics(workdir)[0]  # Tutor text the judges can read, rewards that differ.
  assert first["reward_std/total"] > 0 and first["advantage/std"] > 0


def test_a_workdir_of_another_run_is_refused(tmp_path, monkeypatch):
  import importlib.util
  from pedrl.jobs import settings, workdir
  spec = importlib.util.spec_from_file_location(
      "ped_config", os.path.join(ROOT, "experiments", "pedagogical_rl.py"))
  config = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(config)
  monkeypatch.chdir(ROOT)  # The config's testdata paths are relative.
  owned = tmp_path / "ped"
  s = settings.read_settings(config.get_config("tiny"), settings.TrainingSettings)
  workdir.claim(str(owned), s, "train", "experiments/pedagogical_rl.py:tiny")
  workdir.release(str(owned))  # As a run that has ended leaves it.
  # Another training run may take the folder over (resume_mismatch=allow); another job never.
  cases = [(_cmd("uco", owned), "holds a train run of experiments/pedagogical_rl.py:tiny", True),
           (_cmd("rollout", owned), "this rollout run of experiments/rollout.py:tiny", False)]
  for cmd, message, allowed in cases:
    r = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and message in r.stderr, r.stderr[-2000:]
    assert ("resume_mismatch=allow" in r.stderr) == allowed and "Traceback" not in r.stderr
  assert sorted(os.listdir(owned)) == ["run.json"]  # Nothing written by the refused runs.


def test_preflight_fails_in_seconds_before_any_model_loads(tmp_path):
  import shutil
  import socket
  # A tutor whose weights cannot load: an error about them would mean the models came first.
  tutor = tmp_path / "tutor"
  shutil.copytree(os.path.join(ROOT, "testdata", "models", "qwen2"), tutor)
  (tutor / "model.safetensors").write_bytes(b"broken")
  with socket.socket() as s:  # A port nothing listens on.
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  api = ["--config.rewards.judge_backend=openai", f"--config.tutor.path={tutor}",
         f"--config.rewards.openai.base_url=http://127.0.0.1:{port}/v1",
         "--config.rewards.openai.api_key_env=PEDRL_TEST_PREFLIGHT_KEY",
         "--config.rewards.openai.timeout=1"]
  env = dict(_env(), NO_PROXY="127.0.0.1")
  for key, message in ((None, "PEDRL_TEST_PREFLIGHT_KEY is not set"),
                       ("sk-test", f"127.0.0.1:{port}/v1 (model 'gpt-4o-mini') cannot be reached")):
    if key:
      env["PEDRL_TEST_PREFLIGHT_KEY"] = key
    start = time.time()
    r = subprocess.run(_cmd("pedagogical_rl", tmp_path / "w", *api), cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and message in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and time.time() - start < 60


def test_an_empty_problem_split_is_an_error(tmp_path):
  empty = tmp_path / "empty.jsonl"
  empty.write_text("")
  r = subprocess.run(_cmd("pedagogical_rl", tmp_path / "w", f"--config.problems.path={empty}"),
                     cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
  assert r.returncode == 1 and "no problems left" in r.stderr, r.stderr[-2000:]
