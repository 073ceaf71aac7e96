"""Jobs run as several processes on one machine, as a pod's hosts run them: the entry
points themselves (launch flags, orbax, the metrics writer, the embedder), started as
launch/local.sh starts them, on 127.0.0.1 with one CPU device a process.

A 2-process run must equal a 1-process run over 2 devices bit for bit: the same mesh,
the same programs, only split over two processes."""
import json
import os
import signal
import socket
import subprocess
import time

import psutil
import pytest

from tests.helpers import jobs

pytestmark = pytest.mark.job  # Every test here starts jobs.

LOCAL = os.path.join(jobs.ROOT, "launch", "local.sh")
TIMEOUT = 600


def _port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(**extra):
  env = {k: v for k, v in jobs.env().items()
         if k not in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")}
  return dict(env, **extra)


class _Process:
  """One process of a job, its output in files (a pipe nobody reads would fill and stop it)."""

  def __init__(self, command, env, logs):
    self.out, self.err = open(f"{logs}.out", "w+"), open(f"{logs}.err", "w+")
    self.popen = subprocess.Popen(command, cwd=jobs.ROOT, stdout=self.out, stderr=self.err,
                                  text=True, env=env)

  def finish(self, timeout=TIMEOUT):
    """(exit code, stdout, stderr) once it has ended."""
    code = self.popen.wait(timeout=timeout)
    return code, *(open(f.name).read() for f in (self.out, self.err))


def _start(n: int, command, logs, per_process=None):
  """The processes of one n-process job, as launch/local.sh starts them; `per_process`:
  each one's extra arguments (to make one of them fail)."""
  port = _port()
  return [_Process([*command, *(per_process[i] if per_process else [])],
                   _env(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}", JAX_NUM_PROCESSES=str(n),
                        JAX_PROCESS_ID=str(i), JAX_NUM_CPU_DEVICES="1"), f"{logs}_{i}")
          for i in range(n)]


def _finish(procs, timeout=TIMEOUT):
  return [p.finish(timeout) for p in procs]


def _one_process(command, devices=2):
  r = subprocess.run(command, cwd=jobs.ROOT, env=_env(JAX_NUM_CPU_DEVICES=str(devices)),
                     capture_output=True, text=True, timeout=TIMEOUT)
  assert r.returncode == 0, r.stderr[-3000:]
  return r


def _steps(workdir):
  """metrics.jsonl's rows without their timings (the only thing that may differ)."""
  drop = lambda k: k.startswith("seconds/") or k in ("time", "tokens_per_second")
  return [{k: v for k, v in row.items() if not drop(k)} for row in jobs.metrics(workdir)]


def _dialogues(workdir):
  with open(os.path.join(workdir, "dialogues.jsonl")) as f:
    return [json.loads(line) for line in f]


def _wait_for_line(log, text, procs, timeout=TIMEOUT):
  """Waits until the file `log` holds `text` (while every process of `procs` runs)."""
  deadline = time.monotonic() + timeout
  while not (os.path.exists(log) and text in open(log).read()):
    if time.monotonic() > deadline or any(p.popen.poll() is not None for p in procs):
      raise AssertionError(f"no {text!r} in {log}: {[p.popen.poll() for p in procs]}")
    time.sleep(0.2)


# The tiny UCO run cut to 2 steps: stopped after the first and resumed, it still meets every
# case; a third step adds time only.
UCO_STEPS = "--config.rl.steps=2"


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
  """The tiny UCO run (2 steps), one process over two CPU devices: what the 2-process
  run equals."""
  workdir = tmp_path_factory.mktemp("uco") / "one"
  _one_process(jobs.cmd("uco", workdir, UCO_STEPS))
  return workdir


def _process_1_of(launcher: subprocess.Popen) -> psutil.Process:
  """launch/local.sh's process 1, found by the JAX_PROCESS_ID it was given."""
  deadline = time.monotonic() + 60
  while time.monotonic() < deadline:
    for child in psutil.Process(launcher.pid).children(recursive=True):
      try:
        if child.environ().get("JAX_PROCESS_ID") == "1" and "python" in child.name():
          return child
      except psutil.Error:
        continue
    time.sleep(0.2)
  raise AssertionError("launch/local.sh started no process 1")


def test_uco_as_two_processes_stopped_killed_and_resumed_equals_one_process(one_process,
                                                                          tmp_path):
  """One 2-process run through all it may meet, equal at the end to one process over two
  devices bit for bit (metrics without timings, dialogues): started by launch/local.sh
  and stopped by a SIGTERM to process 1 alone (both stop after the same step, saved);
  resumed, its process 1 killed once its training has begun (process 0 ends within
  seconds); resumed again to the end."""
  workdir = tmp_path / "two"
  command = jobs.cmd("uco", workdir, UCO_STEPS)
  out, logs = open(tmp_path / "local.err", "w+"), tmp_path / "logs"
  launcher = subprocess.Popen(["bash", LOCAL, "2", *command], cwd=jobs.ROOT,
                              env=_env(PEDRL_LOCAL_LOGS=str(logs)), stdout=subprocess.DEVNULL,
                              stderr=out, text=True)
  second = _process_1_of(launcher)
  deadline = time.monotonic() + TIMEOUT
  # Process 1's training has begun (its stop request is in place): step 1 is running.
  while not (logs / "process_1.log").exists() or "steps of" not in (
      logs / "process_1.log").read_text():
    assert launcher.poll() is None and time.monotonic() < deadline, open(out.name).read()
    time.sleep(0.2)
  second.send_signal(signal.SIGTERM)
  assert launcher.wait(timeout=TIMEOUT) == 128 + signal.SIGTERM, open(out.name).read()[-2000:]
  log = open(out.name).read()
  stopped = [line for line in log.splitlines() if line.startswith("stopped on SIGTERM")]
  assert stopped and all(line == stopped[0] for line in stopped), log[-2000:]
  assert len(_steps(workdir)) == 1

  procs = _start(2, command, tmp_path / "again")
  # Killed before it compiles anything: a killed host's programs are not what is tested,
  # and compiling them is most of a start (process 1 reads its engine programs from the
  # program store, the rest it compiles: jax's cache is process 0's).
  _wait_for_line(f"{tmp_path / 'again'}_1.err", "steps of", procs)
  procs[1].popen.kill()
  killed = time.monotonic()
  code0, _, err0 = _finish(procs[:1], timeout=120)[0]
  # Ended within seconds: through its collective's error (its last line then says another
  # process ended) or, where the runtime aborts first, by the runtime.
  assert code0 != 0 and time.monotonic() - killed < 60, err0[-2000:]

  results = _finish(_start(2, command, tmp_path / "last"))
  assert [c for c, _, _ in results] == [0, 0], results[0][2][-2000:]
  assert "step=2" in results[0][1]
  assert _steps(workdir) == _steps(one_process)
  assert _dialogues(workdir) == _dialogues(one_process)
  record = json.loads((workdir / "run.json").read_text())
  assert record["provenance"]["devices"]["processes"] == 2


def test_an_error_on_one_process_ends_both_within_seconds(tmp_path):
  """Process 1 alone is given a problem file that does not exist: it stops at its check,
  and process 0, already waiting for it, ends with process 1's error as its last line."""
  command = jobs.cmd("uco", tmp_path / "run")
  procs = _start(2, command, tmp_path / "log",
                 per_process=[[], ["--config.problems.path=/nonexistent.jsonl"]])
  code1, _, err1 = _finish(procs[1:])[0]
  ended = time.monotonic()
  code0, _, err0 = _finish(procs[:1], timeout=120)[0]
  assert code1 == 1 and "nonexistent.jsonl" in err1.strip().splitlines()[-1], err1[-2000:]
  assert time.monotonic() - ended < 20
  last = err0.strip().splitlines()[-1]
  assert code0 == 1 and last.startswith("error: process 1 of 2 failed:"), err0[-2000:]
  assert "nonexistent.jsonl" in last


def test_evaluation_as_two_processes_equals_one_process(tmp_path):
  one, two = tmp_path / "one", tmp_path / "two"
  limit = "--config.problems.limit=2"  # One batch: the path, not the count, is tested.
  _one_process(jobs.cmd("evaluate", one, limit))
  results = _finish(_start(2, jobs.cmd("evaluate", two, limit), tmp_path / "log"))
  assert [c for c, _, _ in results] == [0, 0], results[0][2][-2000:]
  want, got = (json.loads((d / "metrics.json").read_text()) for d in (one, two))
  drop = lambda m: {k: v for k, v in m.items() if not k.startswith(("seconds", "time"))
                    and k not in ("counts",)}
  assert drop(got) == drop(want)
  assert (two / "eval_dialogues.jsonl").read_text() == (one / "eval_dialogues.jsonl").read_text()


def test_baseline_data_then_sft_as_two_processes(tmp_path):
  """The baselines' data job as 2 processes, then SFT on its data: 2 processes equal 1."""
  data, one, two = tmp_path / "data", tmp_path / "one", tmp_path / "two"
  command = [*jobs.cmd("baseline_data", data)[:3], "--config=experiments/baselines.py:tiny",
             f"--workdir={data}"]
  results = _finish(_start(2, command, tmp_path / "data_log"))
  assert [c for c, _, _ in results] == [0, 0], results[0][2][-2000:]
  assert (data / "accepted.jsonl").stat().st_size > 0
  _one_process(jobs.cmd("sft", one, f"--config.data.workdir={data}"))
  results = _finish(_start(2, jobs.cmd("sft", two, f"--config.data.workdir={data}"),
                           tmp_path / "log"))
  assert [c for c, _, _ in results] == [0, 0], results[0][2][-2000:]
  assert _steps(two) == _steps(one)


def test_a_partial_launch_is_one_error_line(tmp_path):
  r = subprocess.run([*jobs.cmd("uco", tmp_path / "run"), "--num_processes=2"], cwd=jobs.ROOT,
                     env=_env(), capture_output=True, text=True, timeout=120)
  assert r.returncode == 1 and r.stderr.strip().splitlines() == [
      r.stderr.strip().splitlines()[-1]], r.stderr[-2000:]
  assert "--coordinator_address and --process_id are missing" in r.stderr
  assert not (tmp_path / "run").exists()


def test_a_job_of_host_side_work_refuses_several_processes(tmp_path):
  """analyze and cpa repeat their calls on every process: refused before the runtime
  starts (no coordinator is ever contacted at this address)."""
  r = subprocess.run(
      [*jobs.cmd("analyze", tmp_path / "run"), "--config.runs=A=/nonexistent",
       "--coordinator_address=127.0.0.1:1", "--num_processes=2", "--process_id=0"],
      cwd=jobs.ROOT, env=_env(), capture_output=True, text=True, timeout=120)
  lines = r.stderr.strip().splitlines()
  assert r.returncode == 1 and len(lines) == 1, r.stderr[-2000:]
  assert lines[0].startswith("error: analyze labels transcripts") and "--multihost=off" in lines[0]
