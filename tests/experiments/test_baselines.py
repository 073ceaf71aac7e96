"""The offline baselines end to end on the testdata models: one tiny baseline data run feeds
an SFT run (its NLL falls; SIGKILL and resume give the same weights; the evaluation job
reads it) and an MDPO run (its preference margin and accuracy rise)."""
import json
import signal
import subprocess
import time

import numpy as np
import pytest

from tests.helpers import jobs
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


def _steps(data, config: str, key: str) -> int:
  """The updates a tiny offline run makes of the data's `key` items (summary.json): its
  epochs over them in batches, the last one short."""
  from pedrl import paths
  n = json.loads((data[0] / "summary.json").read_text())[key]
  train = paths.load_config(f"{config}.py", "tiny").train
  return -(-n * train.epochs // train.batch)


@pytest.fixture(scope="module")
def sft_run(data, tmp_path_factory):
  workdir = tmp_path_factory.mktemp("sft") / "run"
  r = _run("sft", workdir, f"--config.data.workdir={data[0]}")
  assert r.returncode == 0, r.stderr[-3000:]
  return workdir


@pytest.mark.job
def test_baseline_data_refuses_a_tutor_view_without_its_earlier_thinking(tmp_path):
  """Its dialogues' records would hold each one's last view and turn only, and SFT and MDPO
  train on those records: refused before anything loads, and nothing written."""
  r = _run("baseline_data", tmp_path / "data", "--config.rollout.tutor_history_thinking=drop",
           config="baselines")
  assert r.returncode != 0, r.stdout[-2000:]
  assert "the SFT and MDPO baselines train on one sequence" in r.stderr, r.stderr[-2000:]
  assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


@pytest.mark.job
def test_baseline_data_writes_typed_pairs_and_accepted_dialogues(data):
  workdir, stdout = data
  summary = json.loads((workdir / "summary.json").read_text())
  for key in ("problems", "dialogues", "pairs", "accepted", "ties", "duplicates"):
    assert f"{key}={summary[key]}" in stdout
  assert summary["split_problems"] == 8 and summary["problems"] == 4
  assert summary["dialogues"] == 8 and summary["accepted"] > 0
  dialogues = {d.uid: d for d in dialogue.load_jsonl(str(workdir / "dialogues.jsonl"))}
  pairs = offline_data.load(str(workdir / "pairs.jsonl"), offline_data.PreferencePair)
  accepted = offline_data.load(str(workdir / "accepted.jsonl"), offline_data.AcceptedDialogue)
  assert (len(pairs), len(accepted)) == (summary["pairs"], summary["accepted"])
  # The sets, derived here from A.3's rules and the dialogues written (not by
  # offline_data.build): G = 2, so a problem (uids 2g, 2g + 1) gives one pair when one
  # dialogue every judge accepted and the other a judge rejected (each by its own reply),
  # the accepted one rewarded more, else none (`unordered` where the accepted one is not
  # rewarded more); the accepted ones are those every judge accepted by its own reply, one
  # per problem and tutor text.
  groups = {}
  for d in dialogues.values():
    groups.setdefault(d.uid // 2, []).append(d)
  assert sorted(groups) == [0, 1, 2, 3] and all(len(g) == 2 for g in groups.values())
  own = lambda d, x: [v is x and not f for name, vs in d.judgement.decisions.items()
                      for v, f in zip(vs, d.judgement.filled.get(name, [False] * len(vs)))]
  accepted_by_judges = lambda d: d.judgement.r_ped == 1.0 and all(own(d, True))
  rejected_by_judges = lambda d: any(own(d, False))
  want_pairs, unordered = [], 0
  for g, (a, b) in sorted(groups.items()):
    assert a.problem_id == b.problem_id and not (a.dropped or b.dropped)
    for win, lose in ((a, b), (b, a)):
      if accepted_by_judges(win) and rejected_by_judges(lose):
        if win.rewards.total > lose.rewards.total:
          want_pairs.append((a.problem_id, g, win.uid, lose.uid, win.rewards.total,
                             lose.rewards.total))
        else:
          unordered += 1
  assert [(p.problem_id, p.group, p.chosen, p.rejected, p.chosen_reward, p.rejected_reward)
          for p in pairs] == want_pairs and summary["unordered"] == unordered
  assert summary["pair_rule"] == "accepted_rejected"
  seen, want_accepted = set(), []
  for d in sorted(dialogues.values(), key=lambda d: d.uid):
    v = d.judgement
    own = all(x is False for name in v.decisions for x in v.filled.get(name, []))
    text_ = (d.problem_id, tuple(m.raw.strip() for m in d.messages if m.role == "tutor"))
    if v.r_ped == 1.0 and own and text_ not in seen:
      seen.add(text_)
      want_accepted.append((d.uid, d.rewards.total))
  assert [(a.uid, a.reward) for a in accepted] == want_accepted


@pytest.mark.job
def test_sft_lowers_the_nll_of_its_accepted_dialogues(data, sft_run):
  rows = jobs.metrics(sft_run)
  epochs = [r["epoch"] for r in rows]
  assert [r["step"] for r in rows] == list(range(1, _steps(data, "sft", "accepted") + 1))
  assert epochs == sorted(epochs) and (epochs[0], epochs[-1]) == (1, 3)
  first, last = (np.mean([r["loss"] for r in rows if r["epoch"] == e]) for e in (1, 3))
  print(f"SFT NLL per tutor token, epoch 1 {first:.4f} -> epoch 3 {last:.4f}")
  assert last < first - 0.3  # The same 4 dialogues, seen a third time.
  assert all(r["skipped_updates"] == 0 and r["tutor_tokens"] > 0 for r in rows)


@pytest.mark.job
def test_sft_killed_and_resumed_ends_with_the_uninterrupted_weights(data, sft_run, tmp_path):
  from pedrl import runs
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
  steps = _steps(data, "sft", "accepted")
  assert not (killed / "checkpoints" / str(steps)).exists()
  r = _run("sft", killed, f"--config.data.workdir={data[0]}")
  assert r.returncode == 0, r.stderr[-3000:]
  assert "resumed from" in r.stderr
  want, got = jobs.metrics(sft_run), jobs.metrics(killed)
  assert [m["step"] for m in got] == list(range(1, steps + 1))  # Rows of redone steps replaced.
  for a, b in zip(got, want):
    assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
  resumed = runs.trained_tutor(str(killed))
  params, step, straight = resumed.params, resumed.step, runs.trained_tutor(str(sft_run)).params
  assert step == steps
  for a, b in zip(jax_leaves(params), jax_leaves(straight)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.job
def test_sft_resumed_with_another_length_is_refused(data, sft_run, tmp_path):
  """The run's length sets its cosine schedule: a resume with other epochs or steps would
  jump along it. One line, before any step (in process, on a copy of the 3-epoch run)."""
  import shutil
  from pedrl import paths
  from pedrl.jobs import offline
  from pedrl.experiments import sft as sft_job
  from pedrl.rl import checkpoint
  run = tmp_path / "run"
  shutil.copytree(sft_run, run)
  for key, value in (("epochs", 4), ("steps", 8)):
    c = paths.load_config("sft.py", "tiny")
    c.data.workdir = str(data[0])
    c.train[key] = value
    with pytest.raises(checkpoint.CheckpointError,
                       match=rf"the run was started with {key}={3 if key == 'epochs' else 0}, "
                             rf"this config has {value}; resuming would change its data order "
                             r"or schedule"):
      offline.build(c, sft_job.SFT(), str(run))


def jax_leaves(tree):
  import jax
  return [np.asarray(x) for x in jax.tree.leaves(tree)]


@pytest.mark.job
def test_the_evaluation_job_reads_an_sft_run_as_a_trained_tutor(data, sft_run, tmp_path):
  # The run's training problems are its data's: the subset the dialogues were sampled on.
  from pedrl.env import problems
  from pedrl.jobs import trained_on
  record = trained_on.read(str(sft_run))
  assert record == trained_on.read(str(data[0])) and len(record.ids) == 4
  pool = problems.load(problems.ProblemSettings(path="testdata/problems/bigmath_sample.jsonl",
                                                split="all", filter=False))[0]
  assert record.ids < {p.id for p in pool[:8]}  # baselines.py:tiny's 8 rows.
  with pytest.raises(problems.DataError, match=f"4 of the 24 problems of pool are training "
                                               f"problems of {sft_run}"):
    trained_on.check_disjoint(str(sft_run), pool, "pool")
  r = _run("evaluate", tmp_path / "eval", f"--config.tutor.workdir={sft_run}",
           "--config.problems.limit=2", "--config.eval.samples_per_problem=1")
  assert r.returncode == 0, r.stderr[-3000:]
  status = json.loads((tmp_path / "eval" / "shards" / "status-00000-of-00001.json").read_text())
  assert status["protocol"]["tutor"]["step"] == _steps(data, "sft", "accepted")
  assert "n_dialogues=2" in r.stdout
  from pedrl.tools import report  # Its row is named as paper 003's tables name it.
  (name,) = report.report([str(tmp_path / "eval")], str(tmp_path / "report"))
  assert name.endswith(f"(eval) [SFT tutor: run step {_steps(data, 'sft', 'accepted')}]"), name


@pytest.mark.job
def test_mdpo_raises_the_margin_and_accuracy_on_its_pairs(data, tmp_path):
  workdir = tmp_path / "mdpo"
  r = _run("mdpo", workdir, f"--config.data.workdir={data[0]}")
  assert r.returncode == 0, r.stderr[-3000:]
  rows = jobs.metrics(workdir)
  steps = _steps(data, "mdpo", "pairs")
  assert [r["step"] for r in rows] == list(range(1, steps + 1))
  first, last = rows[0], rows[-1]
  # Step 1 is measured before any update: the policy is the reference (margin 0 up to the
  # rounding between the scorer's and the update's programs), the loss log 2.
  assert abs(first["rewards/margins"]) < 1e-4 and first["loss"] == pytest.approx(np.log(2), 1e-4)
  print(f"MDPO on its pairs: margin {first['rewards/margins']:.2e} -> {last['rewards/margins']:.4f}"
        f", accuracy {first['rewards/accuracies']} -> {last['rewards/accuracies']}")
  assert last["rewards/margins"] > 0.5 and last["rewards/accuracies"] == 1.0
  assert last["loss"] < first["loss"] and last["rewards/chosen"] > last["rewards/rejected"]
  assert f"rewards/accuracies={last['rewards/accuracies']}" in r.stdout
  # Resumed (in process), the run continues from its last checkpoint's weights, with the
  # frozen reference still the initial tutor's, not the restored ones (MDPO's own state
  # on resume; a kill at any step goes through the loop SFT's kill test covers).
  from pedrl import models, paths, runs
  from pedrl.jobs import offline
  from pedrl.experiments import mdpo as mdpo_job
  c = paths.load_config("mdpo.py", "tiny")
  c.data.workdir = str(data[0])
  trainer, writer, ckpt = offline.build(c, mdpo_job.MDPO(), str(workdir))
  writer.close()
  ckpt.close()
  trained = runs.trained_tutor(str(workdir), scan_layers=False)
  saved, step = trained.params, trained.step
  _, _, initial = models.load(offline.data_tutor(str(data[0])), scan_layers=False)
  assert trainer.step == step == steps
  leaves = lambda tree: [np.asarray(x, np.float32) for x in jax_leaves(tree)]
  for ref, first, now, kept in zip(leaves(trainer.ref_params), leaves(initial),
                                   leaves(trainer.params), leaves(saved)):
    np.testing.assert_array_equal(ref, first)
    np.testing.assert_array_equal(now, kept)
  assert any(not np.array_equal(a, b) for a, b in zip(leaves(saved), leaves(initial)))
