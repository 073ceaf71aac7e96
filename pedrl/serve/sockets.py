"""The server's listening socket, bound before anything slow (JAX, the model) starts, so
a port in use is reported at once, and the uvicorn server that answers on it (no JAX
here: it runs while the model loads).

Idle keep-alive connections are closed after KEEP_ALIVE_S, longer than HTTP clients keep
them pooled (httpx, under the openai package, 5 s; aiohttp 15 s; a load balancer's
usual 60 s). uvicorn's default, 5 s, equals httpx's: a client that takes a pooled
connection just before its 5 s are up, then is held off the CPU for a moment before it
writes, sends its request into a connection the server has just closed, and gets
"Server disconnected without sending a response" (reproduced by
tests/serve/test_serve_startup.py::test_a_connection_reused_at_the_clients_pool_limit_is_answered).
The client must close first; only then is no request lost.
"""
import socket
import threading
import time
from collections.abc import Callable

import starlette.types

KEEP_ALIVE_S = 120


def bind(host: str, port: int) -> socket.socket:
  """A listening socket on host:port (port 0: a free one); an OSError naming the address
  when it is taken or cannot be bound."""
  try:
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
  except socket.gaierror as e:
    raise OSError(f"--host={host} is not an address this machine has ({e.strerror})") from None
  sock = socket.socket(family, socket.SOCK_STREAM)
  sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # Not past a live listener.
  try:
    sock.bind((host, port))
    sock.listen(2048)
  except OSError as e:
    sock.close()
    raise OSError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
  return sock


def url_of(sock: socket.socket) -> str:
  """The socket's base URL, ending in /v1."""
  host, port = sock.getsockname()[:2]
  return f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"


def _server(api, on_started=None, log_level: str = "error",
            keep_alive_s: float = KEEP_ALIVE_S):
  import uvicorn

  class Server(uvicorn.Server):
    async def startup(self, sockets=None) -> None:
      await super().startup(sockets)
      if self.started and on_started:
        on_started()

  return Server(uvicorn.Config(api, log_level=log_level, timeout_graceful_shutdown=5,
                               timeout_keep_alive=keep_alive_s))


def serve(api: starlette.types.ASGIApp, sock: socket.socket,
          on_started: Callable[[], None] | None = None, keep_alive_s: float = KEEP_ALIVE_S) -> None:
  """Serves `api` on `sock` in this thread until Ctrl-C or SIGTERM; `on_started()` is
  called once it answers (the model may still be loading: `startup`)."""
  _server(api, on_started, "warning", keep_alive_s).run(sockets=[sock])


def start(api: starlette.types.ASGIApp, host: str = "127.0.0.1",
          port: int = 0) -> tuple[str, object]:
  """Serves `api` from a background thread (tests, benchmarks, notebooks); port 0 picks
  a free one. Returns (base URL ending in /v1, stop())."""
  sock = bind(host, port)
  server = _server(api)
  thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
  thread.start()
  while not server.started:
    if not thread.is_alive():
      raise RuntimeError(f"the server did not start on {host}:{port}")
    time.sleep(0.02)

  def stop() -> None:
    server.should_exit = True
    thread.join(10)
    sock.close()
  return url_of(sock), stop
