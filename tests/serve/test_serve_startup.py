"""A server that answers before its model is ready: /health says `loading`, `ready` or
`failed`, /v1/models answers throughout, a request waits for the model (bounded: then
503 + Retry-After) and gets a clear 500 when loading failed, never a hang; and an idle
keep-alive connection is never closed under a client that is reusing it. The loads
here are held by the test (an event), so every state is reached on purpose, not by
timing."""
import json
import os
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

pytest.importorskip("fastapi")

from tests.helpers.jobs import ROOT
from pedrl.serve import app as app_lib, server, sockets
from pedrl.serve.prometheus import Metrics
from pedrl.serve.startup import Startup

pytestmark = pytest.mark.job  # Every test here talks to a server.

MODEL = os.path.join(ROOT, "testdata", "models", "qwen2")
NAME = "tiny-qwen"
QUICK = server.Options(max_num_seqs=1, max_model_len=64, warmup=False)


def _get(url, body=None, timeout=60):
  """(status, headers, JSON body) of a GET, or a POST with `body`."""
  request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                   headers={"Content-Type": "application/json"})
  try:
    with urllib.request.urlopen(request, timeout=timeout) as r:
      return r.status, {k.lower(): v for k, v in r.headers.items()}, json.loads(r.read())
  except urllib.error.HTTPError as e:
    return e.code, {k.lower(): v for k, v in e.headers.items()}, json.loads(e.read())


@pytest.fixture
def held():
  """A server whose model loads only once the test sets `release` (`load` raising
  `fail` when set); yields (base URL, startup, release, fail)."""
  startup, release, fail = Startup(wait_s=0.2), threading.Event(), []
  api = app_lib.make_app(startup, app_lib.ServeSettings(served_name=NAME), Metrics())
  url, stop = server.start(api)

  def load(s):
    assert release.wait(60)
    if fail:
      raise fail[0]
    return server.load(MODEL, options=QUICK, startup=s)
  startup.run(load)
  yield url.removesuffix("/v1"), startup, release, fail
  release.set()
  stop()
  if startup.served:
    startup.served.backend.close()


def _complete(base):
  return _get(base + "/v1/completions", {"model": NAME, "prompt": "Hi", "max_tokens": 2})


def test_while_loading_health_says_so_models_answer_and_requests_are_told_to_retry(held):
  base, startup, release, _ = held
  code, headers, body = _get(base + "/health")
  assert (code, body["status"], headers["retry-after"]) == (503, "loading", "5")
  code, _, models = _get(base + "/v1/models")
  assert code == 200 and models["data"][0]["id"] == NAME
  code, headers, reply = _complete(base)  # Waits 0.2 s, then is told to come back.
  assert code == 503 and headers["retry-after"] == "5"
  assert reply["error"]["code"] == "model_loading" and "still loading" in reply["error"]["message"]
  # A request that waits longer is answered once the model is there.
  startup.wait_s = 60
  answer = []
  waiting = threading.Thread(target=lambda: answer.append(_complete(base)))
  waiting.start()
  time.sleep(0.5)
  assert not answer  # Still waiting, not refused.
  release.set()
  waiting.join(60)
  assert answer[0][0] == 200 and answer[0][2]["choices"]
  assert _get(base + "/health")[::2] == (200, {"status": "ready"})
  assert _get(base + "/v1/models")[2]["data"][0]["max_model_len"] == 64
  code, _, reply = _get(base + "/tokenize", {"model": NAME, "prompt": "Hi"})
  assert code == 200 and reply["tokens"]


def test_a_failed_load_is_reported_and_no_request_hangs(held):
  base, startup, release, fail = held
  startup.wait_s = 60
  answer = []
  waiting = threading.Thread(target=lambda: answer.append(_complete(base)))
  waiting.start()
  time.sleep(0.5)
  fail.append(RuntimeError("injected: the checkpoint is corrupt"))
  release.set()
  waiting.join(30)  # The waiting request is answered at once, not after its 60 s.
  code, _, reply = answer[0]
  assert code == 500 and reply["error"]["code"] == "model_load_failed"
  assert "RuntimeError: injected: the checkpoint is corrupt" in reply["error"]["message"]
  code, _, health = _get(base + "/health")
  assert code == 500 and health == {"status": "failed",
                                    "error": "RuntimeError: injected: the checkpoint is corrupt"}
  assert _complete(base)[0] == 500 and _get(base + "/v1/models")[0] == 200


async def _tiny(scope, receive, send):
  """An ASGI app answering every request with a models list (no model behind it)."""
  if scope["type"] != "http":
    return
  body = b'{"object": "list", "data": []}'
  await send({"type": "http.response.start", "status": 200, "headers": [
      (b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]})
  await send({"type": "http.response.body", "body": body})


def test_a_connection_reused_at_the_clients_pool_limit_is_answered(monkeypatch):
  """The openai package's httpx pool keeps an idle connection 5 s. A client that takes it
  4.95 s after the last answer (no close seen yet) and is then held off the CPU for
  80 ms before writing (a loaded machine) must still be answered: the server keeps
  idle connections longer than clients do (with uvicorn's 5 s this fails every time:
  `Server disconnected without sending a response`)."""
  http11 = pytest.importorskip("httpcore2._sync.http11")
  url, stop = sockets.start(_tiny)
  client = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
  real = http11.HTTP11Connection._send_request_headers

  def stalled(self, request):
    time.sleep(0.08)
    return real(self, request)
  try:
    client.models.list()
    time.sleep(4.95)
    monkeypatch.setattr(http11.HTTP11Connection, "_send_request_headers", stalled)
    client.models.list()  # The pooled connection, not a new one.
  finally:
    client.close()
    stop()
