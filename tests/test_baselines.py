"""The offline baselines end to end on the testdata models: one tiny baseline data run feeds
an SFT run (its NLL falls; SIGKILL and resume give the same weights; the evaluation job
reads it) and an MDPO run (its preference margin and accuracy rise)."""
import json
import signal
import subprocess
import time

import numpy as np
import pytest

import jobs
from pedrl.env import dialogue
from pedrl.rl import offline_data


def _run(module, workdir, *overrides, config=None, timeout=600):
  cmd = jobs.cmd(module, workdir, *overrides)
  if config:
    cmd[3] = f"--config=experiments/{config}.py:tiny"
  return subprocess.run(cmd, cwd=jobs.ROOT, env=jobs.env(), capture_output=True, text=True,
                        timeout=timeout)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  """The tiny baseline data: 4 of 8 problems, 2 scored dialogues each."""
  workdir = tmp_path_factory.mktemp("baselines") / "data"
  r = _run("baseline_data", workdir, config="baselines")
  assert r.returncode == 0, r.stderr[-3000:]
  return workdir, r.stdout


@pytest.fixture(scope="module")
def sft_run(data, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("sft") / "run"
  r = _run("sft", workdir, f"--config.data.workdir={data[0]}")
  assert r.returncode == 0, r.stderr[-3000:]
  return workdir


@pytest.mark.job
def test_baseline_data_writes_typed_pairs_and_accepted_dialogues(data):
  workdir, stdout = data
  summary = json.loads((workdir / "summary.json").read_text())
  for key in ("problems", "dialogues", "pairs", "accepted", "ties", "duplicates"):
    assert f"{key}={summary[key]}" in stdout
  assert summary["split_problems"] == 8 and summary["problems"] == 4
  assert summary["dialogues"] == 8 and summary["pairs"] > 0 and summary["accepted"] > 0
  dialogues = {d.uid: d for d in dialogue.load_jsonl(str(workdir / "dialogues.jsonl"))}
  pairs = offline_data.load(str(workdir / "pairs.jsonl"), offline_data.PreferencePair)
  accepted = offline_data.load(str(workdir / "accepted.jsonl"), offline_data.AcceptedDialogue)
  assert (len(pairs), len(accepted)) == (summary["pairs"], summary["accepted"])
  # The sets are what the rules make of the dialogues written, each with its rewards.
  want = offline_data.build(list(dialogues.values()), group_size=2)
  assert (pairs, accepted) == want[:2] and summary["ties"] == want[2].ties
  for p in pairs:
    chosen, rejected = dialogues[p.chosen], dialogues[p.rejected]
    assert chosen.rewards.total == p.chosen_reward > p.rejected_reward == rejected.rewards.total
    assert chosen.uid // 2 == rejected.uid // 2 == p.group and chosen.problem_id == p.problem_id
  assert all(dialogues[a.uid].judgement.r_ped == 1.0 for a in accepted)


@pytest.mark.job
def test_sft_lowers_the_nll_of_its_accepted_dialogues(sft_run):
  rows = jobs.metrics(sft_run)
  assert [r["step"] for r in rows] == list(range(1, 7)) and [r["epoch"] for r in rows] == [
      1, 1, 2, 2, 3, 3]
  first, last = (np.mean([r["loss"] for r in rows if r["epoch"] == e]) for e in (1, 3))
  print(f"SFT NLL per tutor token, epoch 1 {first:.4f} -> epoch 3 {last:.4f}")
  assert last < first - 0.3  # The same 4 dialogues, seen a third time.
  assert all(r["skipped_updates"] == 0 and r["tutor_tokens"] > 0 for r in rows)


@pytest.mark.job
def test_sft_killed_and_resumed_ends_with_the_uninterrupted_weights(data, sft_run, tmp_path):
  from pedrl.rl import checkpoint
  killed = tmp_path / "killed"
  proc = subprocess.Popen(jobs.cmd("sft", killed, f"--config.data.workdir={data[0]}"),
                          cwd=jobs.ROOT, env=jobs.env(), stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  deadline = time.time() + 600
  while not (killed / "checkpoints" / "1").exists() and proc.poll() is None:
    assert time.time() < deadline
    time.sleep(0.05)
  proc.send_signal(signal.SIGKILL)
  assert proc.wait() == -signal.SIGKILL
  assert not (killed / "checkpoints" / "6").exists()
  r = _run("sft", killed, f"--config.data.workdir={data[0]}")
  assert r.returncode == 0, r.stderr[-3000:]
  assert "resumed from" in r.stderr
  want, got = jobs.metrics(sft_run), jobs.metrics(killed)
  assert [m["step"] for m in got] == list(range(1, 7))  # Rows of redone steps replaced.
  for a, b in zip(got, want):
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
  _, _, params, step = checkpoint.trained_tutor(str(killed))
  _, _, straight, _ = checkpoint.trained_tutor(str(sft_run))
  assert step == 6
  for a, b in zip(jax_leaves(params), jax_leaves(straight)):
    np.testing.assert_array_equal(a, b)


def jax_leaves(tree):
  import jax
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


@pytest.mark.job
def test_the_evaluation_job_reads_an_sft_run_as_a_trained_tutor(sft_run, tmp_path):
  r = _run("evaluate", tmp_path / "eval", f"--config.tutor.workdir={sft_run}",
           "--config.problems.limit=2", "--config.eval.samples_per_problem=1")
  assert r.returncode == 0, r.stderr[-3000:]
  status = json.loads((tmp_path / "eval" / "shards" / "status-00000-of-00001.json").read_text())
  assert status["protocol"]["tutor"]["step"] == 6 and "n_dialogues=2" in r.stdout
  from pedrl.tools import report  # Its row is named as paper 003's tables name it.
  (name,) = report.report([str(tmp_path / "eval")], str(tmp_path / "report"))
  assert name.endswith("(eval) [SFT tutor: run step 6]"), name


@pytest.mark.job
def test_mdpo_raises_the_margin_and_accuracy_on_its_pairs(data, tmp_path):
  workdir = tmp_path / "mdpo"
  r = _run("mdpo", workdir, f"--config.data.workdir={data[0]}")
  assert r.returncode == 0, r.stderr[-3000:]
  rows = jobs.metrics(workdir)
  assert [r["step"] for r in rows] == [1, 2, 3, 4]
  first, last = rows[0], rows[-1]
  # Step 1 is measured before any update: the policy is the reference (margin 0 up to the
  # rounding between the scorer's and the update's programs), the loss log 2.
  assert abs(first["rewards/margins"]) < 1e-4 and first["loss"] == pytest.approx(np.log(2), 1e-4)
  print(f"MDPO on its pairs: margin {first['rewards/margins']:.2e} -> {last['rewards/margins']:.4f}"
        f", accuracy {first['rewards/accuracies']} -> {last['rewards/accuracies']}")
  assert last["rewards/margins"] > 0.5 and last["rewards/accuracies"] == 1.0
  assert last["loss"] < first["loss"] and last["rewards/chosen"] > last["rewards/rejected"]
  assert f"rewards/accuracies={last['rewards/accuracies']}" in r.stdout
