"""The server's listening socket, bound before anything slow (JAX, the model) starts, so
a port in use is reported at once."""
import socket


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
