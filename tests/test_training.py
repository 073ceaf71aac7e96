"""GRPO training end to end on the testdata models: outputs, SIGKILL + resume, bad input."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from pedrl.env.problems import Problem
from pedrl.rl import trainer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cmd(module, workdir, *overrides):
  return [sys.executable, "-m", f"pedrl.experiments.{module}",
          f"--config=experiments/{module}.py:tiny", f"--workdir={workdir}", *overrides]


def _env():
  return dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu")


def _metrics(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


def test_problem_order_is_a_function_of_seed_and_step():
  problems = [Problem(id=str(i), problem=f"p{i}", answer="1") for i in range(5)]
  a = [trainer.problems_for_step(problems, s, 2, seed=0) for s in range(6)]
  assert a == [trainer.problems_for_step(problems, s, 2, seed=0) for s in range(6)]
  positions = [pos for step in a for pos, _ in step]
  assert positions == list(range(12))
  first_epoch = {p.id for step in a[:2] for _, p in step} | {a[2][0][1].id}
  assert first_epoch == {str(i) for i in range(5)}  # Each epoch visits every problem once.
  assert a != [trainer.problems_for_step(problems, s, 2, seed=1) for s in range(6)]


def test_training_killed_and_restarted_resumes_with_the_same_data(tmp_path):
  straight, killed = tmp_path / "straight", tmp_path / "killed"
  args = ["--config.rl.steps=3"]
  done = subprocess.run(_cmd("pedagogical_rl", straight, *args), cwd=ROOT, env=_env(),
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  for sub in ("checkpoints", "tensorboard", "samples", "metrics.jsonl"):
    assert os.path.exists(straight / sub)
  assert sorted(os.listdir(straight / "checkpoints")) == ["1", "2", "3"]
  assert any(f.startswith("events.out") for f in os.listdir(straight / "tensorboard"))
  assert "Teacher:" in (straight / "samples" / "step_000001.txt").read_text()
  ref = _metrics(straight)
  assert [m["step"] for m in ref] == [1, 2, 3]
  assert ref[0]["first_pass_ratio"] == pytest.approx(1.0, abs=1e-4)
  for key in ("reward/total", "reward/pedagogy", "kl", "clip_fraction", "advantage/std",
              "seconds/rollout", "seconds/rewards", "seconds/update", "tokens_per_second"):
    assert key in ref[0]

  proc = subprocess.Popen(_cmd("pedagogical_rl", killed, *args), cwd=ROOT, env=_env(),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 600
  while not (killed / "checkpoints" / "1").exists() and proc.poll() is None:
    assert time.time() < deadline
    time.sleep(0.2)
  proc.send_signal(signal.SIGKILL)
  proc.wait()
  again = subprocess.run(_cmd("pedagogical_rl", killed, *args), cwd=ROOT, env=_env(),
                         capture_output=True, text=True, timeout=600)
  assert again.returncode == 0, again.stderr[-3000:]
  assert "resumed from" in again.stderr
  resumed = _metrics(killed)
  assert [m["step"] for m in resumed][-1] == 3
  by_step = {m["step"]: m["problem_uids"] for m in resumed}
  assert by_step == {m["step"]: m["problem_uids"] for m in ref}


def test_bad_configs_fail_before_any_compute(tmp_path):
  cases = [
      (["--config.tutor.path=/nonexistent/model"], "not a checkpoint directory"),
      (["--config.group_size=1", "--config.batch_problems=2"], "group_size must be at least 2"),
  ]
  for overrides, message in cases:
    r = subprocess.run(_cmd("pedagogical_rl", tmp_path / "bad", *overrides), cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and message in r.stderr, r.stderr[-2000:]
  r = subprocess.run(_cmd("pedagogical_rl", tmp_path / "bad", "--config.batch_problems=3",
                          "--config.group_size=3"), cwd=ROOT, capture_output=True, text=True,
                     timeout=300, env=dict(_env(), XLA_FLAGS="--xla_force_host_platform_device_count=2"))
  assert r.returncode != 0 and "do not split over the mesh" in r.stderr, r.stderr[-2000:]
