"""The evaluation job end to end on the testdata models: records, metrics, shards, kills, errors."""
import glob
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from tests.helpers import jobs
from tests.helpers.chat_server import ChatServer
from pedrl.eval import records as records_lib, shards

pytestmark = pytest.mark.job  # Every test here starts a job.

METRICS = ("n_problems", "pre_solve_rate", "post_solve_rate", "delta_solve_rate", "leak_rate",
           "leak_any_rate", "helpful_rate", "pedrm_micro", "pedrm_macro")


def _run(workdir, *overrides, timeout=600):
  return subprocess.run(jobs.cmd("evaluate", workdir, *overrides), cwd=jobs.ROOT, env=jobs.env(),
                        capture_output=True, text=True, timeout=timeout)


def _lines(path):
  with open(path, encoding="utf-8") as f:
    return f.read().splitlines()


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
  """The tiny evaluation, unsharded: 4 problems, 2 batches of 2, 2 dialogues each."""
  workdir = tmp_path_factory.mktemp("eval") / "whole"
  r = _run(workdir)
  assert r.returncode == 0, r.stderr[-3000:]
  return workdir, r


def test_tiny_evaluation_writes_records_and_metrics(whole):
  workdir, r = whole
  records = records_lib.load(str(workdir / "eval_dialogues.jsonl"))
  assert len(records) == 4 * 2 and len({r.problem_id for r in records}) == 4
  for rec in records:
    assert rec.pre_solve_rate is not None and rec.post_solve_rate is not None
    assert len(rec.leak_decisions) == len(rec.helpful_decisions) == 2  # judge_samples.
    assert set(rec.leak_decisions + rec.helpful_decisions) <= {"OK", "REJECT", None}
    tutor_turns = sum(m.role == "tutor" for m in rec.dialogue.messages)
    assert len(rec.pedrm_turn_scores) == tutor_turns >= 1
    assert any(m.text.strip() for m in rec.dialogue.messages)  # Visible text, not plumbing.
  assert len({round(x, 4) for rec in records for x in rec.pedrm_turn_scores}) > 4  # Spread.
  m = json.loads((workdir / "metrics.json").read_text())
  for name in METRICS:
    assert name in m and f"{name}_ci" in m or name == "n_problems"
  assert m["n_problems"] == 4 and m["n_dialogues"] == 8
  assert m["thinking_score"] is None  # No thinking judge: null, not 0.
  assert m["counts"]["judge/requests"] == 8 * 2 * 2
  assert m["config"] == "experiments/evaluate.py:tiny" and "config" not in m["protocol"]
  assert f"delta_solve_rate={m['delta_solve_rate']}" in r.stdout
  assert "pedrm_macro=" in r.stdout


def test_two_shards_merge_to_the_unsharded_metrics(whole, tmp_path):
  workdir, _ = whole
  sharded = tmp_path / "sharded"
  for i in (2, 0, 1):  # 2 batches, 3 shards: shard 2 has none and finishes at once.
    r = _run(sharded, f"--config.eval.shard={i}", "--config.eval.num_shards=3")
    assert r.returncode == 0, r.stderr[-3000:]
    if i == 2:
      assert "shard 2 of 3 has no batch" in r.stderr
  assert "pedrm_macro=" in r.stdout  # The last shard to finish merges.
  want = json.loads((workdir / "metrics.json").read_text())
  got = json.loads((sharded / "metrics.json").read_text())
  for k in want:
    if k not in ("counts", "protocol"):
      assert got[k] == want[k], k
  assert _lines(sharded / "eval_dialogues.jsonl") == _lines(workdir / "eval_dialogues.jsonl")

  # The report tool merges again, tabulates both runs and refuses mixed or partial sets.
  from pedrl.tools import report
  runs = report.report([str(workdir), str(sharded)], str(tmp_path / "out"))
  assert len(runs) == 2 and (tmp_path / "out" / "report.md").exists()
  assert (tmp_path / "out" / "report.csv").read_text().count("\n") == 3
  assert (tmp_path / "out" / "pareto.png").stat().st_size > 0
  mixed = tmp_path / "mixed"
  shutil.copytree(sharded, mixed)
  status = mixed / "shards" / "status-00001-of-00003.json"
  s = json.loads(status.read_text())
  s["protocol"]["solve"]["k"] = 4
  status.write_text(json.dumps(s))
  with pytest.raises(shards.ShardError, match=r"mixes evaluation protocols.*solve"):
    shards.merge(str(mixed))
  status.unlink()
  with pytest.raises(shards.ShardError, match=r"missing shards \[1\]"):
    shards.merge(str(mixed))
  # A finished shard whose records were cut or lost afterwards is not merged short.
  cut = tmp_path / "cut"
  shutil.copytree(sharded, cut)
  records = cut / "shards" / "records-00000-of-00003.jsonl"
  lines = records.read_text().splitlines(keepends=True)
  records.write_text("".join(lines[:-1]))
  with pytest.raises(shards.ShardError, match=r"00000-of-00003.jsonl: batches \[0\] are "
                                              r"missing or incomplete.*rerun shard 0 of 3"):
    shards.merge(str(cut))
  (cut / "shards" / "records-00001-of-00003.jsonl").unlink()
  records.write_text("".join(lines))
  with pytest.raises(shards.ShardError, match=r"00001-of-00003.jsonl: batches \[1\] are"):
    shards.merge(str(cut))


def test_rerunning_a_finished_evaluation_changes_nothing(whole, tmp_path):
  workdir, _ = whole
  again = tmp_path / "again"
  shutil.copytree(workdir, again)
  r = _run(again)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "resuming shard 0 of 1: 2 of 2 batches" in r.stderr and "pedrm_macro=" in r.stdout
  # It says so, prints the run's figures and ends with where they are.
  assert "finished: shard 0 of 1 had written all its 2 batches before" in r.stdout
  assert r.stdout.strip().splitlines()[-1].startswith(f"results: {again}/metrics.json, ")
  assert _lines(again / "eval_dialogues.jsonl") == _lines(workdir / "eval_dialogues.jsonl")
  # The tutor's training step an earlier shard fixed is what a later one reads.
  # (The config's own relative paths are resolved against its repository: absolute.)
  assert shards.recorded(str(again), ("tutor", "path")) == os.path.join(
      jobs.ROOT, "testdata", "models", "qwen2")
  assert shards.recorded(str(again), ("tutor", "nothing")) is None


def test_sigkilled_shard_reruns_to_the_same_records(whole, tmp_path):
  workdir, _ = whole
  killed = tmp_path / "killed"
  path = shards.records_path(str(killed), 0, 1)
  p = subprocess.Popen(jobs.cmd("evaluate", killed), cwd=jobs.ROOT, env=jobs.env(),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.time() + 300
    while not (os.path.exists(path) and os.path.getsize(path)) and p.poll() is None:
      assert time.time() < deadline, "no batch written in 300 s"
      time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)  # After batch 0, during batch 1.
  finally:
    p.wait()
  assert p.returncode == -signal.SIGKILL, "the job ended before the kill"
  assert not (killed / "metrics.json").exists()
  r = _run(killed)
  assert r.returncode == 0, r.stderr[-3000:]
  assert "resuming shard 0 of 1: 1 of 2 batches" in r.stderr
  assert _lines(path) == _lines(shards.records_path(str(workdir), 0, 1))
  assert _lines(killed / "eval_dialogues.jsonl") == _lines(workdir / "eval_dialogues.jsonl")


def test_bad_inputs_fail_with_one_clear_line(tmp_path, testdata):
  r = _run(tmp_path / "a", "--config.eval.shard=2", "--config.eval.num_shards=2")
  assert r.returncode == 1 and "shard=2 is not in [0, num_shards=2)" in r.stderr
  assert "Traceback" not in r.stderr
  r = _run(tmp_path / "b", f"--config.eval.pedrm.path={testdata('qwen2')}")
  assert r.returncode == 1 and "not a one-label sequence classifier" in r.stderr
  assert not (tmp_path / "b" / "shards").exists() or not os.listdir(tmp_path / "b" / "shards")


def _weights(directory) -> dict:
  """A checkpoint directory's tensors by name, as float32 numpy arrays."""
  from safetensors.numpy import load_file
  out = {}
  for path in sorted(glob.glob(os.path.join(directory, "*.safetensors"))):
    out.update({k: v.astype(np.float32) for k, v in load_file(path).items()})
  assert out, f"no safetensors in {directory}"
  return out


def test_tutor_from_a_training_workdir_equals_its_export(tmp_path):
  """The tutor read from a tiny training run's orbax checkpoint gives the records of the
  same weights exported to a directory (same seed), and they are not the base model's."""
  train = tmp_path / "train"
  r = subprocess.run(jobs.cmd("pedagogical_rl", train, "--config.rl.steps=1"), cwd=jobs.ROOT,
                     env=jobs.env(), capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  from pedrl.tools import export
  assert export.export(str(train), str(tmp_path / "exported")) == 1
  few = ("--config.problems.limit=2", "--config.eval.samples_per_problem=1")
  # The trained weights, not the base model's (else equal records would prove nothing).
  base_dir = os.path.join(jobs.ROOT, "testdata", "models", "qwen2")
  trained, base = (_weights(d) for d in (tmp_path / "exported", base_dir))
  assert trained.keys() == base.keys()
  assert any(not np.array_equal(trained[k], base[k]) for k in base)
  runs = {"run": (f"--config.tutor.workdir={train}",),
          "exported": (f"--config.tutor.path={tmp_path / 'exported'}",)}
  lines = {}
  for name, args in runs.items():
    r = _run(tmp_path / f"eval_{name}", *few, *args)
    assert r.returncode == 0, r.stderr[-3000:]
    lines[name] = _lines(tmp_path / f"eval_{name}" / "eval_dialogues.jsonl")
  assert lines["run"] == lines["exported"]
  shard = tmp_path / "eval_run" / "shards" / "status-00000-of-00001.json"
  status = json.loads(shard.read_text())
  assert status["protocol"]["tutor"]["step"] == 1  # "Latest", fixed when the run started.
  assert status["provenance"]["versions"]["pedrl"] and status["provenance"]["started"]
  config = json.loads((tmp_path / "eval_run" / "config.json").read_text())  # The run record.
  assert config["tutor"]["workdir"] == str(train)
  assert os.path.isabs(config["problems"]["path"]) and os.path.exists(config["problems"]["path"])
  r = _run(tmp_path / "bad", *few, f"--config.tutor.workdir={train}", "--config.tutor.step=7")
  assert r.returncode == 1 and "no checkpoint at step 7; saved steps: [1]" in r.stderr
  # The run recorded its training problems (the testdata pool's first 4 rows); an evaluation
  # on problems among them stops with one line before any model loads.
  pool = "testdata/problems/bigmath_sample.jsonl"
  recorded = json.loads((train / "train_problems.json").read_text())
  assert recorded["problems"] == 4 and recorded["sources"] == [os.path.join(jobs.ROOT, pool)]
  r = _run(tmp_path / "overlap", f"--config.tutor.workdir={train}",
           f"--config.problems.path={pool}", "--config.problems.split=all",
           "--config.problems.limit=0")
  assert r.returncode == 1 and "Traceback" not in r.stderr
  assert (f"error: 4 of the 24 problems of --config.problems.path={pool} are training problems "
          f"of {train}") in r.stderr
  assert not (tmp_path / "overlap" / "shards").exists()


def _tutor_endpoint(actions=()):
  """A scripted OpenAI-compatible tutor: thinks inside <think> tags, then asks a question,
  and reports usage; `actions` first (e.g. a 401 for every request)."""
  turn = lambda body: sum(m["role"] == "assistant" for m in body["messages"])
  return ChatServer(actions, reply=lambda body: (f"<think>secret plan {turn(body)}</think>"
                                                 f"What do we know first? Step {turn(body)}."),
                    usage=lambda body: {"prompt_tokens": 100 + turn(body), "completion_tokens": 9,
                                        "total_tokens": 109 + turn(body)})


def _endpoint_run(workdir, url, *more):
  env = dict(jobs.env(), PEDRL_TEST_TUTOR_KEY="sk-test", NO_PROXY="127.0.0.1,localhost")
  cmd = jobs.cmd("evaluate", workdir, "--config.problems.limit=2",
                 "--config.eval.samples_per_problem=1", "--config.tutor.endpoint.model=scripted",
                 f"--config.tutor.endpoint.base_url={url}",
                 "--config.tutor.endpoint.api_key_env=PEDRL_TEST_TUTOR_KEY", *more)
  return subprocess.run(cmd, cwd=jobs.ROOT, env=env, capture_output=True, text=True, timeout=600)


def test_endpoint_tutor_thinks_out_of_sight(tmp_path):
  server = _tutor_endpoint()
  try:
    r = _endpoint_run(tmp_path / "api", server.url)
  finally:
    server.close()
  assert r.returncode == 0, r.stderr[-3000:]
  records = records_lib.load(str(tmp_path / "api" / "eval_dialogues.jsonl"))
  assert len(records) == 2
  for rec in records:
    tutor = [m for m in rec.dialogue.messages if m.role == "tutor"]
    assert tutor and all(m.text.startswith("What do we know first?") for m in tutor)
    assert all(m.thinking.startswith("secret plan") and "secret" not in m.text for m in tutor)
    assert all(m.num_tokens == 9 for m in tutor)  # The endpoint's usage.
    assert len(rec.pedrm_turn_scores) == len(tutor)
  # Its own view: the system prompt, its earlier turns as sampled (thinking kept) and the
  # student's visible messages; the preflight first.
  later = [b for b, _ in server.bodies[1:] if len(b["messages"]) > 2]
  assert later, "no dialogue went past the tutor's first turn"
  roles = [m["role"] for m in later[0]["messages"]]
  assert roles[0] == "system" and "assistant" in roles and roles[-1] == "user"
  assert any("secret plan" in m["content"] for m in later[0]["messages"]
             if m["role"] == "assistant")
  status = json.loads((tmp_path / "api" / "shards" / "status-00000-of-00001.json").read_text())
  assert status["protocol"]["tutor"]["endpoint"] == ["scripted", server.url]


def test_endpoint_tutor_refused_or_down_stops_before_any_work(tmp_path):
  server = _tutor_endpoint([("status", 401)] * 5)
  try:
    r = _endpoint_run(tmp_path / "refused", server.url)
  finally:
    server.close()
  assert r.returncode == 1 and "refused the API key" in r.stderr, r.stderr[-2000:]
  assert "tutor endpoint" in r.stderr and "Traceback" not in r.stderr
  assert not os.path.exists(shards.records_path(str(tmp_path / "refused"), 0, 1))
  r = _endpoint_run(tmp_path / "down", "http://127.0.0.1:9/v1")
  assert r.returncode == 1 and "cannot be reached" in r.stderr, r.stderr[-2000:]
