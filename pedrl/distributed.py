"""Multi-host start: one process per host, all of them running the same command.

`jax.distributed.initialize()` must run before anything touches the devices.
With no arguments JAX finds the cluster itself (Cloud TPU metadata, SLURM,
Open MPI, Kubernetes); "auto" calls it only where the environment shows
more than one process, so single-host runs never wait for a coordinator.
"""
import json
import os

import jax
import numpy as np
from absl import logging
from jax.experimental import multihost_utils

MODES = ("auto", "on", "off")


def _count(value: str | None) -> int:
  """How many processes an env value describes: an integer, or a comma-separated host list."""
  if not value:
    return 0
  return int(value) if value.strip().isdigit() else len(value.split(","))


def multiple_processes(env=os.environ) -> bool:
  """Whether the environment describes a multi-process job (the markers JAX reads)."""
  return bool(env.get("JAX_COORDINATOR_ADDRESS") or env.get("MEGASCALE_COORDINATOR_ADDRESS")
              or _count(env.get("TPU_PROCESS_ADDRESSES") or env.get("TPU_WORKER_HOSTNAMES")) > 1
              or _count(env.get("SLURM_NTASKS")) > 1 or _count(env.get("OMPI_COMM_WORLD_SIZE")) > 1)


def initialize(mode: str = "auto") -> None:
  """Starts the multi-process runtime: "on" always, "auto" when `multiple_processes()`."""
  if mode not in MODES:
    raise ValueError(f"multihost mode {mode!r} is not one of {MODES}")
  if mode == "on" or (mode == "auto" and multiple_processes()):
    jax.distributed.initialize()
    logging.info("process %d of %d; %d local of %d devices", jax.process_index(),
                 jax.process_count(), jax.local_device_count(), jax.device_count())


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


def broadcast_json(value):
  """Process 0's `value` (anything json.dumps takes) on every process; others pass None."""
  if jax.process_count() == 1:
    return value
  data = json.dumps(value).encode() if is_main_process() else b""
  size = int(multihost_utils.broadcast_one_to_all(np.int32(len(data))))
  # Padded to a power of two: each buffer shape is one compiled broadcast program.
  buffer = np.zeros(1 << max(size - 1, 1).bit_length(), np.uint8)
  buffer[:len(data)] = np.frombuffer(data, np.uint8)
  return json.loads(bytes(np.asarray(multihost_utils.broadcast_one_to_all(buffer))[:size]))
