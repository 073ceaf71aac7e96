"""GRPO training end to end on the testdata models: outputs, SIGKILL + resume, bad input."""
import json
import os
import re
import signal
import subprocess
import time
import types

import numpy as np
import pytest

from pedrl.env import dialogue
from pedrl.env.problems import Problem
from pedrl.jobs import metric_log, samples
from pedrl.rl import trainer

from tests.helpers.jobs import (ROOT, cmd as _cmd, env as _env, metrics as _metrics,
                                xla_flags as _xla_flags)


def test_problem_order_is_a_function_of_seed_and_step():
  problems = [Problem(id=str(i), problem=f"p{i}", answer="1") for i in range(5)]
  a = [trainer.problems_for_step(problems, s, 2, seed=0) for s in range(6)]
  assert a == [trainer.problems_for_step(problems, s, 2, seed=0) for s in range(6)]
  positions = [pos for step in a for pos, _ in step]
  assert positions == list(range(12))
  first_epoch = {p.id for step in a[:2] for _, p in step} | {a[2][0][1].id}
  assert first_epoch == {str(i) for i in range(5)}  # Each epoch visits every problem once.
  assert a != [trainer.problems_for_step(problems, s, 2, seed=1) for s in range(6)]


ARGS = ["--config.rl.steps=3"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
  """An uninterrupted 3-step PedagogicalRL run on the testdata models."""
  workdir = tmp_path_factory.mktemp("straight")
  done = subprocess.run(_cmd("pedagogical_rl", workdir, *ARGS), cwd=ROOT, env=_env(),
                        capture_output=True, text=True, timeout=600)
  assert done.returncode == 0, done.stderr[-3000:]
  (workdir.parent / "straight_stderr.txt").write_text(done.stderr)
  return workdir


@pytest.mark.job
def test_a_rerun_of_a_finished_run_says_so_with_its_figures_and_where_they_are(straight,
                                                                              tmp_path):
  import shutil
  copy = tmp_path / "copy"
  shutil.copytree(straight, copy)
  r = subprocess.run(_cmd("pedagogical_rl", copy, *ARGS), cwd=ROOT, env=_env(),
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  lines = r.stdout.strip().splitlines()
  assert lines[0] == ("finished: the run had reached its last step, 3, before; nothing left "
                      "to run (its final figures follow)")
  assert f"reward_total={_metrics(straight)[-1]['reward/total']}" in lines
  assert lines[-1].startswith(f"results: {copy}/metrics.jsonl, {copy}/checkpoints, ")
  assert _metrics(copy) == _metrics(straight)


@pytest.mark.job
def test_a_tiny_run_is_quiet_at_the_default_verbosity(straight):
  """No jax TPU probe, orbax or httpx INFO lines (pedrl.logs); its own lines remain."""
  err = (straight.parent / "straight_stderr.txt").read_text()
  assert "Unable to initialize backend" not in err and "/orbax/" not in err
  assert "orbax" not in err.lower() and "HTTP Request" not in err
  assert err.count("rows loaded") == 1  # Said once, by the problems' loader.
  lines = [x.split("\r")[-1] for x in err.splitlines() if x.strip()]
  assert not [x for x in lines if re.match(r"[IWE]\d{4} ", x)]  # Short lines, not absl's.


@pytest.mark.job
def test_training_killed_and_restarted_resumes_with_the_same_data(straight, tmp_path):
  killed, args = tmp_path / "killed", ARGS
  for sub in ("checkpoints", "tensorboard", "samples", "metrics.jsonl"):
    assert os.path.exists(straight / sub)
  assert sorted(os.listdir(straight / "checkpoints")) == ["1", "2", "3"]
  assert any(f.startswith("events.out") for f in os.listdir(straight / "tensorboard"))
  assert "] Teacher (" in (straight / "samples" / "step_000001.txt").read_text()
  ref = _metrics(straight)
  assert [m["step"] for m in ref] == [1, 2, 3]
  assert ref[0]["first_pass_ratio"] == pytest.approx(1.0, abs=1e-4)
  # The sampler's log-probs against the training forward's old ones, at every step: rounding
  # only (a float32 CPU run). After step 1 the tutor has moved from the reference (KL
  # ~1e-2), so old log-probs read from the reference's params would be ~0.1 off.
  assert all(0 < m["sampler_trainer_logp_diff"] < 1e-4 for m in ref), ref
  for key in ("reward/total", "reward/pedagogy", "kl", "clip_fraction", "advantage/std",
              "seconds/rollout", "seconds/rewards", "seconds/update", "tokens_per_second",
              "seconds/tutor_compile",
              "signal/zero_spread_groups"):
    assert key in ref[0]
  assert [m["lr"] for m in ref] == [1e-4] * 3  # The tiny configs' constant rl.lr.
  times = [m["time"] for m in ref]
  assert times == sorted(times) and time.time() - 86400 < times[0] <= time.time()
  ref_records = _records(straight)
  assert [d.step for d in ref_records] == [1] * 4 + [2] * 4 + [3] * 4  # rl.dialogues_every=1.

  proc = subprocess.Popen(_cmd("pedagogical_rl", killed, *args), cwd=ROOT, env=_env(),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 600
  while not (killed / "checkpoints" / "1").exists() and proc.poll() is None:
    assert time.time() < deadline
    time.sleep(0.2)
  proc.send_signal(signal.SIGKILL)
  assert proc.wait() == -signal.SIGKILL  # Killed mid-run, not finished.
  assert not (killed / "checkpoints" / "3").exists()
  again = subprocess.run(_cmd("pedagogical_rl", killed, *args), cwd=ROOT, env=_env(),
                         capture_output=True, text=True, timeout=600)
  assert again.returncode == 0, again.stderr[-3000:]
  assert "resumed from" in again.stderr
  resumed = _metrics(killed)
  assert [m["step"] for m in resumed][-1] == 3
  assert [m["step"] for m in resumed] == [1, 2, 3]  # Rows of redone steps replaced.
  by_step = {m["step"]: m["problem_uids"] for m in resumed}
  assert by_step == {m["step"]: m["problem_uids"] for m in ref}
  # Restored params and optimizer state: the same updates as the uninterrupted run.
  for got, want in zip(resumed, ref):
    assert got["reward/total"] == pytest.approx(want["reward/total"], abs=1e-6)
    assert got["kl"] == pytest.approx(want["kl"], rel=1e-3, abs=1e-7)
  # Each step's dialogue records once, those of redone steps replaced.
  records = _records(killed)
  assert [(d.step, d.uid) for d in records] == [(d.step, d.uid) for d in ref_records]
  assert [d.rewards.total for d in records] == pytest.approx(
      [d.rewards.total for d in ref_records], abs=1e-6)


@pytest.mark.job
def test_bad_configs_fail_before_any_compute(tmp_path):
  cases = [
      (["--config.tutor.path=/nonexistent/model"], "not a checkpoint directory"),
      (["--config.group_size=1", "--config.batch_problems=2"], "group_size must be at least 2"),
      (["--config.rl.lr=nan"], "--config.rl.lr=nan: must be a finite number > 0"),
      (["--config.rl.adam_eps=0"], "--config.rl.adam_eps=0.0: must be a finite number > 0"),
      (["--config.rl.max_grad_norm=-1"], "--config.rl.max_grad_norm=-1.0: must be"),
      (["--config.rl.logits_chunk=-1"], "--config.rl.logits_chunk=-1: must be an integer >= 0"),
  ]
  for overrides, message in cases:
    r = subprocess.run(_cmd("pedagogical_rl", tmp_path / "bad", *overrides), cwd=ROOT,
                       env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and message in r.stderr, r.stderr[-2000:]
  r = subprocess.run(_cmd("pedagogical_rl", tmp_path / "bad", "--config.batch_problems=3",
                          "--config.group_size=3"), cwd=ROOT, capture_output=True, text=True,
                     timeout=300, env=dict(_env(), XLA_FLAGS=_xla_flags(2)))
  assert r.returncode != 0 and "do not split over the mesh" in r.stderr, r.stderr[-2000:]


@pytest.mark.job
def test_export_writes_a_transformers_directory_of_the_trained_tutor(straight, tmp_path, testdata):
  import torch
  import transformers
  from pedrl import models
  from pedrl.tools import export
  out = tmp_path / "exported"
  assert export.export(str(straight), str(out)) == 3
  cfg, model, params = models.load(str(out), scan_layers=False)
  _, _, base = models.load(testdata("qwen2"), scan_layers=False)
  moved = [not np.array_equal(a, b) for a, b in zip(jax_leaves(params), jax_leaves(base))]
  assert any(moved)  # The trained tutor, not the initial one.
  hf = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
  tokens = np.random.default_rng(0).integers(3, 900, size=(2, 12))
  with torch.no_grad():
    want = hf(input_ids=torch.tensor(tokens)).logits.numpy()
  hidden, _ = model.apply({"params": params}, tokens, np.ones_like(tokens, bool))
  got = np.asarray(model.apply({"params": params}, hidden, method=type(model).logits))
  np.testing.assert_allclose(got, want, atol=1e-4)
  assert (out / "tokenizer.json").exists() and (out / "generation_config.json").exists()


def jax_leaves(tree):
  import jax
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


@pytest.mark.job
def test_plots_from_metrics(straight):
  pytest.importorskip("matplotlib")
  from pedrl.tools import plot
  paths = plot.plot(str(straight))
  assert {os.path.basename(p) for p in paths} >= {"rewards.png", "training.png"}
  assert all(os.path.getsize(p) > 1000 for p in paths)


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
  import jax.numpy as jnp
  from pedrl.rl import checkpoint
  ckpt = checkpoint.Checkpoints(str(tmp_path))
  state = {"params": {"w": jnp.ones(3)}, "opt_state": {"m": jnp.zeros(3)}}
  ckpt.save(1, state, {"step": 1, "model": {"model_type": "qwen2", "hidden_size": 64}})
  with pytest.raises(checkpoint.CheckpointError, match="another model"):
    ckpt.restore(state, {"model_type": "llama", "hidden_size": 64})
  step, restored, meta = ckpt.restore(state, {"model_type": "qwen2", "hidden_size": 64})
  assert step == 1 and meta["step"] == 1
  np.testing.assert_array_equal(restored["params"]["w"], 1.0)
  ckpt.close()


# -- Failures and recovery (issue 12) ------------------------------------------------------------

def _copy(straight, tmp_path):
  """A copy of the uninterrupted run's workdir, to damage."""
  import shutil
  workdir = tmp_path / "copy"
  shutil.copytree(straight, workdir)
  return workdir


def _tree_bytes(path):
  return {p: open(p, "rb").read() for p in sorted(path.rglob("*")) if p.is_file()}


def _tb_steps(workdir, tag):
  """The steps of every `tag` scalar in the workdir's TensorBoard event files."""
  import struct
  from tensorboardX.proto import event_pb2
  steps = []
  for path in sorted((workdir / "tensorboard").glob("events.out.*")):
    data = path.read_bytes()
    pos = 0
    while pos < len(data):  # TFRecord: length, crc, payload, crc.
      (length,) = struct.unpack("<Q", data[pos:pos + 8])
      event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
      pos += 12 + length + 4
      steps += [event.step for v in event.summary.value if v.tag == tag]
  return sorted(steps)


def _records(workdir):
  return dialogue.load_jsonl(str(workdir / "dialogues.jsonl"))


@pytest.mark.job
def test_tiny_runs_exercise_the_policy(straight):
  ref = _metrics(straight)
  # Reward and advantage spread within groups: GRPO has a signal, not only the KL term.
  assert max(m["reward_std/total"] for m in ref) > 0
  assert max(m["advantage/std"] for m in ref) > 0
  assert min(m["signal/zero_spread_groups"] for m in ref) < 1
  text = (straight / "samples" / "step_000001.txt").read_text()
  tutor = [b for b in text.split("\n\n") if "] Teacher (" in b.split("\n")[0]]
  assert tutor and not any(samples.EMPTY in b for b in tutor)  # Visible text, not only thinking.


@pytest.mark.job
def test_samples_show_different_problems_with_rewards_verdicts_and_attempts(straight):
  """Each step's samples: one dialogue of each of the batch's 2 problems, its reference
  answer, every reward component, the advantage, the judges' verdicts and the solve
  attempts, then its messages."""
  records = _records(straight)
  for step in (1, 2, 3):
    text = (straight / "samples" / f"step_{step:06d}.txt").read_text(encoding="utf-8")
    heads = [line for line in text.splitlines() if line.startswith("## problem ")]
    problems = {line.split()[2].rstrip(",") for line in heads}
    assert len(heads) == len(problems) == 2, heads
    assert {d.problem_id for d in records if d.step == step} == problems
    for d in records:
      if d.step == step and f"## problem {d.problem_id}, rollout {d.rollout}," in text:
        assert f"Reference answer: {d.answer}" in text
        assert f"Reward {d.rewards.total:+.3f} = r_sol {d.rewards.components['r_sol']:+.3f} " \
               f"pedagogy {d.rewards.components['pedagogy']:+.3f} template " in text
    assert text.count("; advantage ") == 2
    assert text.count("Judges: leakage ") == 2 and text.count("Solve attempts after") == 2
    assert text.count("] Teacher (") >= 2 and text.count("] Student (") >= 2


@pytest.mark.job
def test_a_diverging_run_stops_and_leaves_the_last_checkpoint_intact(straight, tmp_path):
  workdir = _copy(straight, tmp_path)
  before = _tree_bytes(workdir / "checkpoints")
  # A resume with another learning rate: allowed here, as a user would (resume_mismatch).
  r = subprocess.run(_cmd("pedagogical_rl", workdir, "--config.rl.steps=9", "--config.rl.lr=1e3",
                          "--config.rl.max_bad_steps=2", "--config.resume_mismatch=allow"),
                     cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
  assert r.returncode == 3, r.stderr[-3000:]
  assert "Traceback" not in r.stderr
  error = [line for line in r.stderr.splitlines() if line.startswith("error:")]
  assert len(error) == 1 and "training diverged" in error[0] and "last checkpoint is step 3" in error[0]
  assert "updates skipped, non-finite" in r.stderr
  assert _tree_bytes(workdir / "checkpoints") == before  # Nothing saved, nothing deleted by keep.
  rows = _metrics(workdir)
  assert [m["step"] for m in rows] == [1, 2, 3, 4, 5] and rows[-1]["skipped_updates"] > 0


@pytest.mark.job
def test_a_corrupt_checkpoint_falls_back_and_bookkeeping_stays_exact(straight, tmp_path):
  """Flipped bytes in the latest step, a save cut short by a kill (orbax's temporary
  directory), a metrics row of the unsaved step and a half-written line."""
  import shutil
  workdir = _copy(straight, tmp_path)
  ckpt = workdir / "checkpoints"
  data = max((p for p in (ckpt / "3" / "state").rglob("*") if p.is_file() and p.parent.name == "d"),
             key=lambda p: p.stat().st_size)
  raw = bytearray(data.read_bytes())
  for i in range(len(raw) // 2, len(raw) // 2 + 64):
    raw[i] ^= 0xFF
  data.write_bytes(bytes(raw))
  shutil.copytree(ckpt / "2", ckpt / "4.orbax-checkpoint-tmp-1234")
  with open(workdir / "metrics.jsonl", "a") as f:
    f.write(json.dumps(dict(_metrics(straight)[-1], step=4)) + "\n" + '{"step": 5, "kl"')
  r = subprocess.run(_cmd("pedagogical_rl", workdir, "--config.rl.steps=4"), cwd=ROOT,
                     env=_env(), capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  assert f"checkpoint {ckpt / '3'} cannot be used" in r.stderr
  assert "resumed from" in r.stderr and "at step 2" in r.stderr
  assert [p.name.split(".")[0] for p in (tmp_path / "copy" / "checkpoints.broken").iterdir()] == ["3"]
  rows = _metrics(workdir)
  assert [m["step"] for m in rows] == [1, 2, 3, 4]
  for got, want in zip(rows, _metrics(straight)):  # Step 3 redone from step 2's checkpoint.
    assert got["problem_uids"] == want["problem_uids"]
    assert got["reward/total"] == pytest.approx(want["reward/total"], abs=1e-6)
    assert got["kl"] == pytest.approx(want["kl"], rel=1e-3, abs=1e-7)
  assert _tb_steps(workdir, "kl") == [1, 2, 3, 4]
  assert sorted(p for p in os.listdir(ckpt) if p.isdigit()) == ["2", "3", "4"]  # keep=3.
  records = _records(workdir)  # Step 3's records written once, by the redone step.
  assert [d.step for d in records] == [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4
  assert [d.uid for d in records[:12]] == [d.uid for d in _records(straight)]


@pytest.mark.job
def test_a_restart_before_the_first_checkpoint_keeps_each_step_once(straight, tmp_path):
  """A run killed at step 3 of a run that saves every 10: rows, events and samples exist,
  no checkpoint. The trainer's restore (the path `build` takes) starts over cleanly."""
  import shutil
  workdir = _copy(straight, tmp_path)
  shutil.rmtree(workdir / "checkpoints")

  class NoCheckpoint:
    def restore(self, *args):
      return None
  run = object.__new__(trainer.Trainer)  # Only what restore_if_any touches.
  run.tutor, run.opt_state = types.SimpleNamespace(params=None), None
  run.fingerprint, run.step = {}, 0
  run.ckpt = NoCheckpoint()
  run.writer = metric_log.MetricsWriter(str(workdir), dialogues=True)
  assert run.restore_if_any() is False and run.step == 0
  assert _metrics(workdir) == [] and _tb_steps(workdir, "kl") == []
  assert os.listdir(workdir / "samples") == [] and _records(workdir) == []
  run.writer.write(1, dict(_metrics(straight)[0]))  # The redone step 1, recorded once.
  run.writer.close()
  assert [m["step"] for m in _metrics(workdir)] == [1] and _tb_steps(workdir, "kl") == [1]

