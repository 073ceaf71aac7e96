"""Several processes (one per host, or per GPU group), all running the same command.

`jax.distributed.initialize()` must run before anything touches the devices. The
processes find each other from a cluster manager's environment (Cloud TPU metadata,
SLURM, Open MPI, Kubernetes) or from an explicit launch (`pedrl.environ.Launch`:
--coordinator_address, --num_processes, --process_id or their JAX_* variables);
"auto" starts the runtime only where either shows more than one process, so
single-host runs never wait for a coordinator.

A failure on one process ends all of them (`fail_all` and the watch): without it, the
others would wait in their next collective until JAX's 300-second shutdown barrier.
"""
import atexit
from collections.abc import Callable
import json
import os
import sys
import threading
from typing import Any, TypeVar

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

from pedrl import environ

MODES = ("auto", "on", "off")
# A process that dies without a word (killed, out of memory) is noticed by the coordinator
# after this long without its heartbeat; JAX's own default is 100 s.
HEARTBEAT_TIMEOUT_S = 30
_FAILED = "pedrl/failed/"  # Key prefix in the coordination service: one key per failed process.
_POLL_S = 0.5
# Exit status of a process ended because another one failed.
EXIT_PEER_FAILED = 1

multiple_processes = environ.multiple_processes


def starts_runtime(mode: str, launch: environ.Launch) -> bool:
  """Whether `initialize(mode, launch)` starts the multi-process runtime."""
  if mode not in MODES:
    raise ValueError(f"multihost mode {mode!r} is not one of {MODES}")
  if mode == "off":
    return False
  if launch.num_processes is not None:  # An explicit launch says how many there are.
    return mode == "on" or launch.num_processes > 1
  return mode == "on" or multiple_processes()


def _loopback(address: str) -> bool:
  return address.rpartition(":")[0].strip("[]") in ("127.0.0.1", "localhost", "::1")


def initialize(mode: str = "auto", launch: environ.Launch = environ.Launch()) -> None:
  """Starts the multi-process runtime when `starts_runtime` says so, then the watch."""
  if not starts_runtime(mode, launch):
    return
  kwargs = {}
  if launch.given:
    kwargs = dict(coordinator_address=launch.coordinator_address,
                  num_processes=launch.num_processes, process_id=launch.process_id)
    if _loopback(launch.coordinator_address) and not os.environ.get(
        "JAX_COORDINATOR_BIND_ADDRESS"):
      # JAX binds the coordinator to every address by default; a job of one machine keeps
      # to the loopback interface it names.
      kwargs["coordinator_bind_address"] = launch.coordinator_address
  jax.distributed.initialize(**kwargs, heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S)
  logging.info("process %d of %d; %d local of %d devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())
  if jax.process_count() > 1:
    _Watch().start()


def is_main_process() -> bool:
  """The process that writes logs, metrics and files that every process would write alike."""
  return jax.process_index() == 0


def any_process(flag: bool) -> bool:
  """True on every process if `flag` is True on any (e.g. a SIGTERM seen by one host)."""
  if jax.process_count() == 1:
    return bool(flag)
  return bool(np.asarray(multihost_utils.process_allgather(np.int32(flag))).any())


def barrier(name: str) -> None:
  """Waits until every process reaches the barrier called `name` (no-op on one process)."""
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(name)


def broadcast_json(value: Any) -> Any:
  """Process 0's `value` (anything json.dumps takes) on every process; others pass None."""
  if jax.process_count() == 1:
    return value
  data = json.dumps(value).encode() if is_main_process() else b""
  size = int(multihost_utils.broadcast_one_to_all(np.int32(len(data))))
  # Padded to a power of two: each buffer shape is one compiled broadcast program.
  buffer = np.zeros(1 << max(size - 1, 1).bit_length(), np.uint8)
  buffer[:len(data)] = np.frombuffer(data, np.uint8)
  return json.loads(bytes(np.asarray(multihost_utils.broadcast_one_to_all(buffer))[:size]))


T = TypeVar("T")


def on_main_process(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
  """fn(*args, **kwargs) run on process 0 only, its result (JSON) on every process; an
  exception it raises is raised on every process alike, so all take the same branch (a
  decision that reads process 0's disk: a record, the free space, what exists)."""
  result, error = None, None
  if is_main_process():
    try:
      result = fn(*args, **kwargs)
    except Exception as e:  # Raised on every process below.
      error = e
  if jax.process_count() > 1:
    shared = broadcast_json({"value": result, "error": None if error is None else
                             [type(error).__name__, str(error)]})
    if not is_main_process():
      if shared["error"] is not None:
        raise _remote_error(*shared["error"])
      return shared["value"]
  if error is not None:
    raise error
  return result


# Exceptions raised again by their own class when process 0's `on_main_process` raised
# them (pedrl's expected errors, one line in every process's log); others: RuntimeError.
_ERROR_TYPES: dict[str, type] = {}


def register_error(*types: type) -> None:
  _ERROR_TYPES.update({t.__name__: t for t in types})


def _remote_error(name: str, message: str) -> Exception:
  kind = _ERROR_TYPES.get(name)
  try:
    return kind(message)
  except TypeError:  # None, or a type whose constructor wants more than a message.
    return RuntimeError(f"process 0: {name}: {message}")


register_error(ValueError, OSError)


# -- Failing together ----------------------------------------------------------------------
def _client():
  from jax._src import distributed as jax_distributed  # The runtime's key-value store.
  return jax_distributed.global_state.client


def started() -> bool:
  """Whether this process is one of several (the runtime started); asks no backend."""
  return _client() is not None


def fail_all(message: str) -> None:
  """Tells every process that this one failed (`message`: one line), so that each ends
  within a second instead of waiting for it in a collective; no-op on one process."""
  client = _client()
  if client is None:
    return
  try:
    client.key_value_set(f"{_FAILED}{jax.process_index()}", message[:2000],
                         allow_overwrite=True)
  except Exception as e:  # The coordinator is gone too: the others will notice that.
    logging.warning("could not tell the other processes of the failure: %s", e)


def exit_now(code: int) -> None:
  """Ends the process at once: flushed output, and no wait at JAX's shutdown barrier for
  processes that will never reach it."""
  logging.flush()
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  os._exit(code)


class _Watch(threading.Thread):
  """Ends this process when another one has reported a failure, or when the coordinator
  (process 0) is gone; the failure's line is this process's last."""

  def __init__(self) -> None:
    super().__init__(name="pedrl-failure-watch", daemon=True)
    self.finishing = threading.Event()
    # Registered after JAX's shutdown: atexit runs it first, and a normal end's shutdown
    # (the coordinator going away last) is not taken for a failure.
    atexit.register(self.finishing.set)

  def run(self) -> None:
    client, me = _client(), jax.process_index()
    lost = 0
    while not self.finishing.wait(_POLL_S):
      try:
        failed = client.key_value_dir_get(_FAILED)
        lost = 0
      except Exception as e:  # Unreachable coordinator: a few tries, then give up.
        lost += 1
        if lost * _POLL_S >= 5 and not self.finishing.is_set():
          why = (str(e).strip().splitlines() or [type(e).__name__])[0]
          self._end(f"error: lost the coordinator (process 0): {why}")
        continue
      others = sorted((int(k.rpartition("/")[2]), v) for k, v in failed
                      if int(k.rpartition("/")[2]) != me)
      if others and not self.finishing.is_set():
        process, message = others[0]
        self._end(f"error: process {process} of {jax.process_count()} failed: {message}")

  def _end(self, line: str) -> None:
    print(line, file=sys.stderr)
    exit_now(EXIT_PEER_FAILED)
