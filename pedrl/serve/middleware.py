"""What every HTTP request passes through before and after its route (plain ASGI, so
streaming responses and disconnects pass untouched):

- an access log line per request (`access method=POST path=/v1/completions status=200
  ms=41.2 in=97 out=512 client=127.0.0.1:50312`) and the request metrics;
- the API key (`Authorization: Bearer …`, compared in constant time) on every path
  but /health, /docs and /openapi.json included;
- the body-size limit: a declared Content-Length past it is refused (413) before a
  byte is read, a chunked body as soon as it grows past it;
- the last resort: an exception no route turned into a response becomes a 500 with
  an OpenAI-style body, and the connection stays open for the caller's next request
  (Starlette's own handler re-raises, which makes the server drop the connection).
"""
import hmac
import json
import os
import time

import starlette.exceptions
import starlette.types
from absl import logging

from pedrl.serve.prometheus import Metrics
from pedrl.serve.openai_types import APIError

OPEN_PATHS = ("/health",)


def api_key(variable: str | None) -> str | None:
  """The key in $variable (None: no key asked); a ValueError when it is unset or empty,
  checked before any model loads."""
  if not variable:
    return None
  key = os.environ.get(variable)
  if not key:
    raise ValueError(f"${variable} is empty or unset: --api_key_env names the variable that "
                     "holds the server's API key")
  return key


class BodyTooLarge(starlette.exceptions.HTTPException):
  """A chunked body that grew past the limit while a route read it. An HTTPException, so
  FastAPI passes it on from its body parsing (any other error there becomes a 400
  "There was an error parsing the body") to the app's handler, which answers 413."""

  def __init__(self, message: str) -> None:
    super().__init__(413, message)


async def send_error(send: starlette.types.Send, e: APIError) -> None:
  body = json.dumps(e.body()).encode()
  headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
  headers += [(k.lower().encode(), str(v).encode()) for k, v in e.headers.items()]
  await send({"type": "http.response.start", "status": e.status, "headers": headers})
  await send({"type": "http.response.body", "body": body})


class Gate:
  """The ASGI middleware described in the module docstring."""

  def __init__(self, app, metrics: Metrics, key: str | None, max_body: int, routes=(),
               access_log: bool = True) -> None:
    self.app, self.metrics, self.max_body, self.access_log = app, metrics, max_body, access_log
    self.key = f"Bearer {key}".encode() if key else None
    self.routes = set(routes)  # Paths labelled in the metrics; others count as "other".

  def _refusal(self, scope) -> APIError | None:
    headers = dict(scope["headers"])
    if self.key and scope["path"] not in OPEN_PATHS:
      if not hmac.compare_digest(headers.get(b"authorization", b""), self.key):
        return APIError(401, "invalid or missing API key (Authorization: Bearer ...)",
                        type="authentication_error", code="invalid_api_key")
    try:
      declared = int(headers.get(b"content-length", 0))
    except ValueError:
      return APIError(400, "Content-Length is not a number")
    if declared > self.max_body:
      return self._too_large()
    return None

  def _too_large(self) -> APIError:
    return APIError(413, f"the request body exceeds this server's limit of {self.max_body} "
                    "bytes (--max_body_mb)", code="request_too_large")

  async def __call__(self, scope: starlette.types.Scope, receive: starlette.types.Receive,
                     send: starlette.types.Send) -> None:
    if scope["type"] != "http":
      return await self.app(scope, receive, send)
    start, state = time.perf_counter(), {"status": None, "in": 0, "out": 0}

    async def counted_send(message) -> None:
      if message["type"] == "http.response.start":
        state["status"] = message["status"]
      elif message["type"] == "http.response.body":
        state["out"] += len(message.get("body", b""))
      await send(message)

    async def limited_receive():
      message = await receive()
      if message["type"] == "http.request":
        state["in"] += len(message.get("body", b""))
        if state["in"] > self.max_body:
          raise BodyTooLarge(self._too_large().message)
      return message

    try:
      refusal = self._refusal(scope)
      if refusal:
        await send_error(counted_send, refusal)
      else:
        await self.app(scope, limited_receive, counted_send)
    except BodyTooLarge:
      if state["status"] is None:
        await send_error(counted_send, self._too_large())
    except OSError:  # The client left while we wrote.
      state["status"] = state["status"] or 499
    except Exception as e:  # noqa: BLE001 — the last resort: a 500, the connection kept.
      logging.exception("unhandled error on %s %s", scope["method"], scope["path"])
      if state["status"] is None:
        await send_error(counted_send, APIError(
            500, f"internal error: {type(e).__name__}: {e}", type="server_error"))
    finally:
      self._record(scope, state, time.perf_counter() - start)

  def _record(self, scope, state, seconds: float) -> None:
    status = state["status"] or 499  # No response: the client left first.
    path = scope["path"] if scope["path"] in self.routes else "other"
    self.metrics.requests.labels(path, str(status)).inc()
    self.metrics.latency.labels(path).observe(seconds)
    if self.access_log:
      client = scope.get("client") or ("-", 0)
      logging.info("access method=%s path=%s status=%d ms=%.1f in=%d out=%d client=%s:%s",
                   scope["method"], scope["path"], status, 1000 * seconds, state["in"],
                   state["out"], client[0], client[1])
