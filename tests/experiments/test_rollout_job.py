"""The rollout job end to end on the testdata models: JSONL, summary, resume, bad rows."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from pedrl.env import dialogue
from pedrl.rewards import uco
from tests.helpers import jobs

pytestmark = pytest.mark.job  # Every test here starts a job.

ROOT = jobs.ROOT
GOOD = [{"problem": f"What is {i} + {i}?", "answer": str(2 * i), "source": "written",
         "llama8b_solve_rate": 0.3} for i in range(1, 4)]


def _problems_file(tmp_path):
  """Rows 2-5 are bad: no answer, an answer math-verify cannot read, not UTF-8, not JSON."""
  lines = [json.dumps(GOOD[0]).encode(),
           json.dumps({"problem": "What is 5 + 5?"}).encode(),
           json.dumps({"problem": "What is 6 + 6?", "answer": "}{"}).encode(),
           b'{"problem": "What is 7 + 7?", "answer": "14\xff"}',
           b'{"problem": "What is 8 + 8?", "answer": ',
           json.dumps(GOOD[1]).encode(), json.dumps(GOOD[2]).encode()]
  path = tmp_path / "problems.jsonl"
  path.write_bytes(b"\n".join(lines) + b"\n")
  return str(path)


def _run(workdir, *overrides):
  cmd = [sys.executable, "-m", "pedrl.experiments.rollout",
         "--config=experiments/rollout.py:tiny", f"--workdir={workdir}", *overrides]
  env = dict(os.environ, XLA_FLAGS=jobs.xla_flags(), JAX_PLATFORMS="cpu")
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_rollout_job_writes_records_and_summary_and_resumes(tmp_path):
  problems = _problems_file(tmp_path)
  workdir = tmp_path / "run"
  args = (f"--config.problems.path={problems}", "--config.problems.limit=3",
          "--config.batch_problems=1")
  r = _run(workdir, *args)
  assert r.returncode == 0, r.stderr[-3000:]
  # Bad rows are counted and named by row number, the good ones run.
  assert "3 of 7 rows loaded, 4 skipped" in r.stderr
  for n in (2, 3, 4, 5):
    assert f"row {n}:" in r.stderr
  path = workdir / "dialogues.jsonl"
  lines = path.read_text(encoding="utf-8").splitlines()
  records = dialogue.load_jsonl(str(path))
  assert len(records) == 3 * 2  # 3 problems x G=2.
  assert [d.to_json() for d in records] == lines  # Loads back into the same records.
  for d in records:
    assert d.turns >= 1 and d.end_reason in ("max_turns", "end_of_conversation", "token_limit")
    assert len(d.post_correct) == 2 and d.r_sol is not None and d.pre_solve_rate is not None
    assert sum(d.tutor_mask) == sum(m.num_tokens for m in d.messages if m.role == "tutor")
    # The tiny variant's rewards: r_sol + pedagogy (rule judges) + template.
    assert set(d.rewards.components) == {"r_sol", "pedagogy", "template"}
    assert d.judgement.r_ped in (0.0, 1.0) and d.rewards.components["r_sol"] == d.r_sol
    assert d.rewards.total == pytest.approx(sum(d.rewards.components.values()))
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["dialogues"] == 6 and summary["problems"] == 3
  assert summary["skipped_problem_rows"] == 4
  assert summary["mean_turns"] == sum(d.turns for d in records) / 6
  for key in ("seconds_tutor", "seconds_student", "seconds_solve", "truncation_rate",
              "pre_solve_rate", "post_solve_rate", "reward_total", "reward_pedagogy"):
    assert key in summary
  assert "mean_turns=" in r.stdout

  rows = (workdir / "metrics.jsonl").read_text().splitlines()
  assert len(rows) == 3  # One problem per batch (--config.batch_problems=1).
  assert summary["reward_pipeline"]["judge/requests"] == 3 * 2 * 2 * 2  # Dialogues x judges x samples.

  # A kill while batch 1's dialogues were written (its row is there, one of its two
  # dialogues and half of the other), with batch 2's row written but none of its dialogues
  # (worse than one kill leaves). Batch 0 stays; batches 1 and 2 run again whole, and the
  # files end as the uninterrupted run left them.
  path.write_text("\n".join(lines[:3]) + "\n" + lines[3][:40], encoding="utf-8")
  again = _run(workdir, *args)
  assert again.returncode == 0, again.stderr[-3000:]
  assert "removed a partly written last line" in again.stderr
  assert "dropping 1 dialogues and 2 metric rows of batches not completely written" in again.stderr
  assert "2 of 3 problems left" in again.stderr
  assert path.read_text(encoding="utf-8").splitlines() == lines
  assert _batch_rows(workdir) == _batch_rows_of(rows)
  # The counts cover every batch in the workdir, not the last invocation's only.
  summary = json.loads((workdir / "summary.json").read_text())
  assert summary["reward_pipeline"]["judge/requests"] == 24 and summary["dialogues"] == 6

  # A workdir from before the shared metric names (batch_problem_uids, {component: {mean,
  # std}}, pipeline: {…}) resumes with nothing to redo: its rows are rewritten in today's
  # names and no dialogue is lost.
  metrics = workdir / "metrics.jsonl"
  new = [json.loads(x) for x in metrics.read_text().splitlines()]
  old = [{"batch_problem_uids": r["problem_uids"],
          **{k[7:]: {"mean": r[k], "std": r["reward_std/" + k[7:]]} for k in r
             if k.startswith("reward/")},
          "pipeline": {k[9:]: v for k, v in r.items() if k.startswith("pipeline/")}}
         for r in new]
  metrics.write_text("".join(json.dumps(r) + "\n" for r in old))
  again = _run(workdir, *args)
  assert again.returncode == 0, again.stderr[-3000:]
  assert "3 metric rows of an older pedrl rewritten" in again.stderr
  assert path.read_text(encoding="utf-8").splitlines() == lines
  assert [json.loads(x) for x in metrics.read_text().splitlines()] == new


def _batch_rows_of(lines):
  """Metric rows without the pipeline's counts (a redone batch has the same rewards)."""
  return [{k: v for k, v in json.loads(x).items() if not k.startswith("pipeline/")}
          for x in lines]


def _batch_rows(workdir):
  return _batch_rows_of((workdir / "metrics.jsonl").read_text().splitlines())


def test_rollout_job_fatal_bad_row_names_it_before_any_work(tmp_path):
  workdir = tmp_path / "run"
  r = _run(workdir, f"--config.problems.path={_problems_file(tmp_path)}",
           "--config.problems.on_error=fatal")
  assert r.returncode != 0
  assert "row 2: no 'answer'" in r.stderr
  assert not (workdir / "dialogues.jsonl").exists()


def test_rollout_job_with_uco_rewards_writes_per_turn_rewards(tmp_path):
  workdir = tmp_path / "uco"
  r = subprocess.run(
      [sys.executable, "-m", "pedrl.experiments.rollout", "--config=experiments/rollout.py:tiny_uco",
       f"--workdir={workdir}", "--config.problems.limit=1"],
      cwd=ROOT, env=dict(os.environ, XLA_FLAGS=jobs.xla_flags(), JAX_PLATFORMS="cpu"), capture_output=True,
      text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  records = dialogue.load_jsonl(str(workdir / "dialogues.jsonl"))
  assert len(records) == 2
  for d in records:
    tutor_turns = [i for i, m in enumerate(d.messages) if m.role == "tutor"]
    assert [t.message for t in d.turn_rewards] == tutor_turns
    for t in d.turn_rewards:
      assert t.reward == pytest.approx(t.progress + t.scaffold)
      assert len(t.level_logprobs) == 5 and 0 <= t.level <= 4
    returns = uco.discounted_returns([t.reward for t in d.turn_rewards], 0.95)
    assert d.rewards.components["uco"] == pytest.approx(returns[0])
    assert d.rewards.total == pytest.approx(d.rewards.components["uco"] +
                                            d.rewards.components["template"])
  metrics = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert len(metrics) == 1
  assert {k for k in metrics[0] if not k.startswith("pipeline/")} == {
      "step", "problem_uids", "reward/uco", "reward/template", "reward/total",
      "reward_std/uco", "reward_std/template", "reward_std/total"}
  assert metrics[0]["reward/uco"] == pytest.approx(
      np.mean([d.rewards.components["uco"] for d in records]))
  assert "reward_uco=" in r.stdout and np.isfinite(
      float(r.stdout.split("reward_uco=")[1].split()[0]))
