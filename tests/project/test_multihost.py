"""Two processes on one CPU machine stand in for two hosts of a pod (gloo collectives)."""
import json
import os
import pty
import select
import socket
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from tests.helpers import checkpoint_worker, jobs, multihost_worker


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


@pytest.mark.job
def test_two_processes_agree_with_one(tmp_path, testdata):
  port = _free_port()
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
  procs = [subprocess.Popen([sys.executable, "-m", "tests.helpers.multihost_worker", str(i),
                             str(port), str(tmp_path / f"{i}.json")], env=env, cwd=jobs.ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
           for i in range(2)]
  logs = [p.communicate(timeout=300)[0] for p in procs]
  for p, log in zip(procs, logs):
    assert p.returncode == 0, log[-3000:]
  first, second = (json.loads((tmp_path / f"{i}.json").read_text()) for i in range(2))
  assert first["main"] and not second["main"] and first["batch_spans_processes"]
  assert first["stop"] and second["stop"]
  # Replies of process 0's API calls on both, its failures as failures.
  assert first["replies"] == second["replies"] == ["a from 0", "b from 0",
                                                   "error: JudgeError: TimeoutError: gave up"]
  assert first["crash"] == second["crash"] == "RuntimeError: unexpected reply type"
  assert first["stats"] == {"calls": 1} and second["stats"] == {}
  want = multihost_worker.compute(testdata("qwen2"), None)  # One process, one device.
  for got in (first, second):
    assert got["tokens"] == want["tokens"]
    np.testing.assert_allclose(got["logp"], want["logp"], atol=1e-5)
    for k, v in want["metrics"].items():
      assert got["metrics"][k] == pytest.approx(v, rel=1e-4, abs=1e-6), k
    np.testing.assert_allclose(got["embedding_row"], want["embedding_row"], atol=1e-7)


def _checkpoint_workers(workdir, phase: str) -> list[str]:
  """The last output line of each of the two processes of tests/helpers/checkpoint_worker."""
  port = _free_port()
  env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
  procs = [subprocess.Popen([sys.executable, "-m", "tests.helpers.checkpoint_worker", str(i),
                             str(port), str(workdir), phase], env=env, cwd=jobs.ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i in range(2)]
  outs = [p.communicate(timeout=120) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  return [out.strip().splitlines()[-1] if out.strip() else "" for out, _ in outs]


@pytest.mark.job
def test_a_step_only_one_process_cannot_read_is_passed_over_by_both(tmp_path):
  _checkpoint_workers(tmp_path, "save")
  # Damage process 1's share of step 2 only: process 0 reads its rows of that step well.
  step_2 = tmp_path / "checkpoints" / "2"
  shares = [f for f in step_2.glob("state/ocdbt.process_1/d/*") if f.is_file()]
  assert shares, sorted(str(p.relative_to(step_2)) for p in step_2.rglob("*"))
  for f in shares:
    os.truncate(f, f.stat().st_size // 2)
  lines = _checkpoint_workers(tmp_path, "restore")
  assert [line.split()[:2] for line in lines] == [["restored", "1"]] * 2, lines
  want = checkpoint_worker.weights(1).sum(dtype=np.float64)  # Step 1's weights, whole.
  for line in lines:
    assert float(line.split()[2]) == pytest.approx(want, abs=1e-2), line
  assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit()) == ["1"]
  assert [p.name.split(".")[0] for p in (tmp_path / "checkpoints.broken").iterdir()] == ["2"]


# A job's stop request around a step that takes a while: it saves unless stopped at once.
_STEPPING = """
import sys, time
from pedrl import stopping
with stopping.StopRequest("the step") as stop:
  print("ready", flush=True)
  while stop.requested is None:
    time.sleep(0.01)
  time.sleep(1.0)  # The rest of the step; a second SIGINT now would stop it unsaved.
  print("saved on", stop.requested, flush=True)
sys.exit(130)
"""


def _read_until(fd: int, text: bytes, seen: bytearray, timeout: float = 60) -> None:
  """Reads the terminal `fd` into `seen` until `text` is in it (or it closes)."""
  deadline = time.monotonic() + timeout
  while text not in seen:
    assert time.monotonic() < deadline, bytes(seen)
    if select.select([fd], [], [], 0.2)[0]:
      try:
        chunk = os.read(fd, 4096)
      except OSError:  # The terminal closed: every process of its session has ended.
        return
      if not chunk:
        return
      seen += chunk


@pytest.mark.job
def test_one_ctrl_c_at_the_local_launcher_saves_every_process(tmp_path):
  """The launcher run on a terminal of its own (a pseudo-terminal), and one Ctrl-C typed
  at it: the terminal's SIGINT goes to its foreground process group."""
  logs = tmp_path / "logs"
  pid, fd = pty.fork()
  if pid == 0:  # The child: the launcher, leading the terminal's session.
    os.chdir(jobs.ROOT)
    os.execvpe("bash", ["bash", os.path.join(jobs.ROOT, "launch", "local.sh"), "2",
                        sys.executable, "-c", _STEPPING],
               dict(os.environ, PEDRL_LOCAL_LOGS=str(logs)))
  seen = bytearray()
  try:
    _read_until(fd, b"ready", seen)  # Process 0's output is the terminal's.
    deadline = time.monotonic() + 60
    while "ready\n" not in ((logs / "process_1.log").read_text()
                            if (logs / "process_1.log").exists() else ""):
      assert time.monotonic() < deadline, bytes(seen)
      time.sleep(0.05)
    os.write(fd, b"\x03")  # Ctrl-C.
    _read_until(fd, b"never printed", seen, timeout=60)
  finally:
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    for left in psutil.process_iter():  # A launcher that failed to stop them: no orphans.
      try:
        if left.environ().get("PEDRL_LOCAL_LOGS") == str(logs):
          left.kill()
      except psutil.Error:
        continue
  out = bytes(seen).decode(errors="replace")
  assert os.waitstatus_to_exitcode(status) == 130, out
  assert "saved on SIGINT" in out and "KeyboardInterrupt" not in out, out
  lines = (logs / "process_1.log").read_text().splitlines()  # Its stdout and stderr.
  assert lines[0] == "ready" and lines[-1] == "saved on SIGINT", lines


def test_auto_mode_reads_the_cluster_environment(monkeypatch):
  from pedrl import distributed
  assert not distributed.multiple_processes({})
  assert not distributed.multiple_processes({"SLURM_NTASKS": "1", "TPU_WORKER_HOSTNAMES": "h0"})
  assert distributed.multiple_processes({"SLURM_NTASKS": "4"})
  assert distributed.multiple_processes({"TPU_WORKER_HOSTNAMES": "h0,h1,h2,h3"})
  assert distributed.multiple_processes({"JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234"})
  with pytest.raises(ValueError, match="multihost mode"):
    distributed.initialize("sometimes")
  for name in ("JAX_COORDINATOR_ADDRESS", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
    monkeypatch.delenv(name, raising=False)
  assert not distributed.starts_runtime("auto", distributed.environ.Launch())


def test_a_launch_is_all_three_settings_or_none():
  from pedrl import environ
  assert environ.launch(env={}) == environ.Launch()
  assert environ.launch("127.0.0.1:5", 2, 1, env={}) == environ.Launch("127.0.0.1:5", 2, 1)
  env = {"JAX_COORDINATOR_ADDRESS": "h0:5", "JAX_NUM_PROCESSES": "4", "JAX_PROCESS_ID": "3"}
  assert environ.launch(env=env) == environ.Launch("h0:5", 4, 3)
  assert environ.launch(None, None, 0, env=env) == environ.Launch("h0:5", 4, 0)  # Flag first.
  # An address alone is enough where a cluster manager gives the rest (JAX reads it there).
  assert environ.launch(env={"JAX_COORDINATOR_ADDRESS": "h0:5", "SLURM_NTASKS": "4"}).given
  for kwargs, why in [
      (dict(env={"JAX_COORDINATOR_ADDRESS": "h0:5"}), "--num_processes and --process_id are missing"),
      (dict(num_processes=2, env={}), "--coordinator_address and --process_id are missing"),
      (dict(coordinator_address="h0", num_processes=2, process_id=0, env={}), "HOST:PORT"),
      (dict(coordinator_address="h0:5", num_processes=2, process_id=2, env={}), "not below"),
      (dict(env={**env, "JAX_PROCESS_ID": "-1"}), "JAX_PROCESS_ID='-1': expected an integer >= 0"),
      (dict(env={**env, "JAX_NUM_PROCESSES": "two"}), "expected an integer >= 1")]:
    with pytest.raises(ValueError, match=why):
      environ.launch(**kwargs)


def test_explicit_launches_start_the_runtime_only_for_several_processes():
  from pedrl import distributed, environ
  one, two = environ.Launch("127.0.0.1:5", 1, 0), environ.Launch("127.0.0.1:5", 2, 0)
  assert distributed.starts_runtime("auto", two) and not distributed.starts_runtime("auto", one)
  assert distributed.starts_runtime("on", one) and not distributed.starts_runtime("off", two)
