"""Run folders protect themselves: every job records what it is and its settings in
run.json; another job's folder, a resume with other settings and another job's config file
are refused before anything is written (the folder's files hashed before and after)."""
import fcntl
import hashlib
import json
import os
import subprocess
import sys

import pytest

from pedrl import cli
from pedrl.jobs import settings, workdir
from tests.helpers import jobs


@pytest.fixture
def in_root(monkeypatch):
  monkeypatch.chdir(jobs.ROOT)  # The configs' testdata paths are relative.


def _training_run(path, variant="tiny"):
  """A folder as a uco:tiny training run leaves it (its record, config, a checkpoint file and
  metrics), made without training: the refusals under test come before any model loads."""
  c = jobs.config("uco", variant)
  s = settings.read_settings(c, settings.TrainingSettings)
  name = f"experiments/uco.py:{variant}"
  changed = workdir.guard(str(path), "train", c, name)
  workdir.claim(str(path), s, "train", name)
  workdir.record_start(str(path), "train", c, name, changed, claimed=True)
  workdir.write_config(str(path), c)
  (path / "checkpoints" / "3").mkdir(parents=True)
  (path / "checkpoints" / "3" / "state").write_bytes(b"weights")
  (path / "metrics.jsonl").write_text('{"step": 3, "reward/total": 0.5}\n')
  return c


def _digest(folder) -> dict:
  """Every file under `folder` by relative path -> sha256 of its bytes."""
  out = {}
  for root, _, names in os.walk(folder):
    for n in names:
      p = os.path.join(root, n)
      out[os.path.relpath(p, folder)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
  return out


def test_another_jobs_folder_is_refused_naming_its_job_and_the_way_out(tmp_path, in_root):
  run = tmp_path / "uco"
  _training_run(run)
  before = _digest(run)
  for job, config in (("evaluate", jobs.config("evaluate", "tiny")),
                      ("mathtutorbench", jobs.config("mathtutorbench", "tiny")),
                      ("analyze", jobs.config("analyze", "tiny"))):
    with pytest.raises(workdir.WorkdirError) as e:
      workdir.guard(str(run), job, config, f"experiments/{job}.py:tiny")
    message = str(e.value)
    assert f"holds a train run of experiments/uco.py:tiny; this {job} run" in message
    assert f"--config.tutor.workdir={run} evaluates it" in message
  assert _digest(run) == before
  # An evaluation's folder (its run.json, or only its shards from before run.json) is no
  # training run's either.
  evaluation = tmp_path / "eval"
  c = jobs.config("evaluate", "tiny")
  workdir.record_start(str(evaluation), "evaluate", c, "experiments/evaluate.py:tiny", {})
  assert json.load(open(evaluation / "run.json"))["identity"] == {"job": "evaluate"}
  old = tmp_path / "old_eval" / "shards"
  old.mkdir(parents=True)
  (old / "status-00000-of-00001.json").write_text(json.dumps({"protocol": {"kind": "tutoring"}}))
  for folder in (evaluation, old.parent):
    with pytest.raises(workdir.WorkdirError, match="holds an evaluate run"):
      workdir.guard(str(folder), "train", jobs.config("uco", "tiny"), "experiments/uco.py:tiny")


def test_a_resume_with_other_settings_is_refused_listing_them_unless_allowed(tmp_path, in_root):
  run = tmp_path / "uco"
  c = _training_run(run)
  assert workdir.guard(str(run), "train", c, "experiments/uco.py:tiny") == {}  # Same: resumes.
  other = jobs.config("uco", "tiny,lam=0.3")
  other.mesh.fsdp = 1  # The mesh may change on a resume (checkpoints restore onto any),
  other.rl.steps = 5  # and a GRPO run be extended.
  before = _digest(run)
  with pytest.raises(workdir.WorkdirError) as e:
    workdir.guard(str(run), "train", other, "experiments/uco.py:tiny,lam=0.3")
  assert "rewards.uco.lam: 0.5 -> 0.3" in str(e.value)
  assert "resume_mismatch=allow" in str(e.value) and "mesh" not in str(e.value)
  assert _digest(run) == before
  other.resume_mismatch = "allow"
  changed = workdir.guard(str(run), "train", other, "experiments/uco.py:tiny,lam=0.3")
  assert changed == {"rewards.uco.lam": [0.5, 0.3]}
  workdir.record_start(str(run), "train", other, "experiments/uco.py:tiny,lam=0.3", changed)
  record = json.load(open(run / "run.json"))
  assert record["starts"][-1]["changed"] == {"rewards.uco.lam": [0.5, 0.3]}
  assert record["settings"]["rewards.uco.lam"] == 0.3 and len(record["starts"]) == 2


def test_a_config_file_names_its_job_and_other_jobs_refuse_it():
  for path in sorted(os.listdir(os.path.join(jobs.ROOT, "experiments"))):
    if path.endswith(".py"):
      full = os.path.join(jobs.ROOT, "experiments", path)
      module = cli.config_entry_point(full)
      assert module and f"python -m {module} --config=experiments/{path}" in open(full).read()
  uco = os.path.join(jobs.ROOT, "experiments", "uco.py")
  cli.check_config_job(uco + ":tiny", "pedrl.experiments.uco")  # Its own: fine.
  with pytest.raises(SystemExit):
    cli.check_config_job(uco + ":tiny", "pedrl.experiments.thinking")
  # The GRPO job runs the config of any training entry point, and no other job's.
  for name in ("uco", "pedagogical_rl", "thinking"):
    cli.check_config_job(os.path.join(jobs.ROOT, "experiments", f"{name}.py:tiny"),
                         "pedrl.experiments.grpo")
  with pytest.raises(SystemExit):
    cli.check_config_job(os.path.join(jobs.ROOT, "experiments", "sft.py:tiny"),
                         "pedrl.experiments.grpo")


@pytest.mark.job
def test_refused_starts_leave_every_file_of_the_run_as_it_was(tmp_path, monkeypatch):
  """The commands themselves: evaluation into a training run (which once overwrote its
  config.json), a resume with another λ, another job's config file."""
  monkeypatch.chdir(jobs.ROOT)
  run = tmp_path / "uco"
  _training_run(run)
  before = _digest(run)
  starts = [
      (jobs.cmd("evaluate", run), "holds a train run of experiments/uco.py:tiny"),
      ([*jobs.cmd("uco", run)[:-2], "--config=experiments/uco.py:tiny,lam=0.3", f"--workdir={run}"],
       "rewards.uco.lam: 0.5 -> 0.3"),
      ([sys.executable, "-m", "pedrl.experiments.thinking", "--config=experiments/uco.py:tiny",
        f"--workdir={run}"], "is a config of pedrl.experiments.uco, not of"),
  ]
  for command, says in starts:
    r = subprocess.run(command, cwd=tmp_path, env=jobs.env(), capture_output=True, text=True,
                       timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and lines[-1].startswith("error: ") and says in lines[-1], r.stderr
    assert "Traceback" not in r.stderr
  assert _digest(run) == before


# A start that holds its workdir until its stdin closes: the folder as a running job has it.
_HOLDER = """
import sys
from tests.helpers import jobs
from pedrl.jobs import workdir
config = jobs.config(sys.argv[1], "tiny")
if sys.argv[3] != "1":
  config.eval.num_shards = int(sys.argv[3])
name, job = f"experiments/{sys.argv[1]}.py:tiny", sys.argv[4]
workdir.record_start(sys.argv[2], job, config, name, workdir.guard(sys.argv[2], job, config, name))
print("holding", flush=True)
sys.stdin.read()
"""


def _holder(folder, file="uco", job="train", num_shards=1) -> subprocess.Popen:
  holder = subprocess.Popen([sys.executable, "-c", _HOLDER, file, str(folder), str(num_shards),
                             job],
                            cwd=jobs.ROOT, env=jobs.env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
  assert holder.stdout.readline() == "holding\n"
  return holder


@pytest.mark.job
def test_a_second_start_while_the_first_runs_is_refused_naming_it(tmp_path):
  run = tmp_path / "run"
  holder = _holder(run)
  try:
    before = _digest(run)
    # The same command again, as a second terminal would start it: one line, nothing written.
    r = subprocess.run(jobs.cmd("uco", run), cwd=tmp_path, env=jobs.env(),
                       capture_output=True, text=True, timeout=300)
    start = json.loads((run / "run.json").read_text())["starts"][-1]
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
        f"error: {run} is in use by the start of {start['started']} (pid {holder.pid} on "
        f"{start['host']}): wait for it to end, or give this start its own --workdir"), r.stderr
    assert _digest(run) == before
  finally:
    holder.communicate(timeout=60)  # Ends it: the kernel lets its lock go.
  workdir.guard(str(run), "train", jobs.config("uco", "tiny"), "experiments/uco.py:tiny")
  workdir.release(str(run))
  fd = os.open(run, os.O_RDONLY)  # Another descriptor's lock: taken only if none is held.
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  finally:
    os.close(fd)


@pytest.mark.job
def test_the_shards_of_one_evaluation_share_its_workdir(tmp_path):
  run = tmp_path / "eval"
  holder = _holder(run, "evaluate", "evaluate", num_shards=2)
  try:
    config = jobs.config("evaluate", "tiny")
    config.eval.update(num_shards=2, shard=1)
    workdir.guard(str(run), "evaluate", config, "experiments/evaluate.py:tiny")  # Shard 1 too.
  finally:
    holder.communicate(timeout=60)
