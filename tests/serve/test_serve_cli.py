"""`python -m pedrl.serve` from the command line: a mistake is one `error:` line within
2 s (before JAX loads), a port in use is found before the model loads, and a server
answers while its model loads, then says where it serves."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import openai
import pytest

from tests.helpers import jobs

pytestmark = pytest.mark.job
MODEL = os.path.join(jobs.ROOT, "testdata", "models", "qwen2")


def _serve(*args, env=None, **kw):
  return subprocess.run([sys.executable, "-m", "pedrl.serve", *args], cwd=jobs.ROOT,
                        env=env or jobs.env(), capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture
def taken_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]


@pytest.mark.parametrize("args, says", [
    (["--model=/models/nope"], "--model=/models/nope is not a directory"),
    (["--workdir=/tmp/nope"], "--workdir=/tmp/nope is not a directory"),
    ([f"--model={jobs.ROOT}"], "has no config.json"),
    ([], "give --model=DIR or --workdir=RUN"),
    ([f"--model={MODEL}", "--api_key_env=PEDRL_NO_SUCH_KEY"],
     "$PEDRL_NO_SUCH_KEY is empty or unset"),
    ([f"--model={MODEL}", "--port=70000"], "not an integer in the range [0, 65535]"),
    ([f"--model={MODEL}", "--host=no.such.host.invalid"], "--host=no.such.host.invalid"),
])
def test_a_mistake_is_one_line_at_once(args, says):
  start = time.perf_counter()
  out = _serve(*args)
  took = time.perf_counter() - start
  lines = out.stderr.strip().splitlines()
  assert out.returncode == 1 and len(lines) == 1 and lines[0].startswith("error: "), out.stderr
  assert says in lines[0]
  assert took < 2, f"{took:.1f} s"  # Checked before JAX is imported.


def test_a_port_in_use_is_found_before_the_model_loads(taken_port):
  start = time.perf_counter()
  out = _serve(f"--model={MODEL}", f"--port={taken_port}")
  assert out.returncode == 1 and out.stderr.strip().splitlines() == [
      f"error: cannot listen on 127.0.0.1:{taken_port}: Address already in use"]
  assert time.perf_counter() - start < 2


def _get(url):
  """(status, JSON body) of a GET."""
  try:
    with urllib.request.urlopen(url, timeout=30) as r:
      return r.status, json.loads(r.read())
  except urllib.error.HTTPError as e:
    return e.code, json.loads(e.read())


def test_the_port_answers_while_loading_then_says_where_it_serves_and_stops_on_sigterm():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  proc = subprocess.Popen(
      [sys.executable, "-m", "pedrl.serve", f"--model={MODEL}", f"--port={port}",
       "--served_name=tutor", "--max_num_seqs=1", "--max_model_len=64", "--nowarmup",
       "--compilation_cache=off"],
      cwd=jobs.ROOT, env=jobs.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  base = f"http://127.0.0.1:{port}"
  try:
    # The port answers before JAX is imported: the loader starts as this line is written,
    # and JAX's import alone takes longer than two requests on 127.0.0.1.
    for _ in range(100):  # Past any warning a library prints at import.
      line = proc.stderr.readline()
      if not line or line.startswith("answering at"):
        break
    assert line.startswith(f"answering at {base}/v1 while tutor loads"), line
    assert _get(base + "/health") == (503, {"status": "loading"})
    assert _get(base + "/v1/models")[1]["data"][0]["id"] == "tutor"
    line = proc.stdout.readline()  # Blocks until the server is ready (or exits).
    assert line == f"serving tutor at {base}/v1\n", proc.stderr.read()
    assert _get(base + "/health") == (200, {"status": "ready"})
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=60)
    assert client.completions.create(model="tutor", prompt="Hi", max_tokens=2).choices
  finally:
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(30)
  # uvicorn shuts down, then lets the signal end the process as it would have.
  assert rc in (0, -signal.SIGTERM) and "Traceback" not in proc.stderr.read()
