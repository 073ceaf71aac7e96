"""pedrl's settings read from environment variables, parsed without importing JAX, so a
command can refuse a bad value before it loads anything."""
from collections.abc import Mapping
import dataclasses
import math
import os

PROGRAM_STORE_MAX_GIB = "PEDRL_PROGRAM_STORE_MAX_GIB"
PROGRAM_STORE_DEFAULT_GIB = 4.0


def program_store_max_bytes() -> int | None:
  """The program store's size limit in bytes: $PEDRL_PROGRAM_STORE_MAX_GIB in GiB
  (unset or empty: 4; 0: no limit, None)."""
  raw = os.environ.get(PROGRAM_STORE_MAX_GIB, "").strip()
  try:
    gib = float(raw) if raw else PROGRAM_STORE_DEFAULT_GIB
  except ValueError:
    gib = -1.0
  if not (math.isfinite(gib) and gib >= 0):
    raise ValueError(f"{PROGRAM_STORE_MAX_GIB}={raw!r}: expected the program store's size "
                     "limit in GiB (0: none)")
  return max(1, int(gib * 2**30)) if gib else None


# -- Several processes ---------------------------------------------------------------------
COORDINATOR, NUM_PROCESSES, PROCESS_ID = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES",
                                          "JAX_PROCESS_ID")


@dataclasses.dataclass(frozen=True)
class Launch:
  """How a job's processes find each other when no cluster manager says it: process 0's
  host:port, how many processes, and which one this is (all three, or none)."""
  coordinator_address: str | None = None
  num_processes: int | None = None
  process_id: int | None = None

  @property
  def given(self) -> bool:
    return self.coordinator_address is not None


def _count(value: str | None) -> int:
  """How many processes an env value describes: an integer, or a comma-separated host list."""
  if not value:
    return 0
  return int(value) if value.strip().isdigit() else len(value.split(","))


def cluster_processes(env: Mapping[str, str]=os.environ) -> int:
  """The process count a cluster manager's environment shows (SLURM, Open MPI, Cloud TPU;
  the markers jax.distributed reads), 0 when there is none."""
  return max(_count(env.get("TPU_PROCESS_ADDRESSES") or env.get("TPU_WORKER_HOSTNAMES")),
             _count(env.get("SLURM_NTASKS")), _count(env.get("OMPI_COMM_WORLD_SIZE")))


def _integer(name: str, raw, least: int) -> int | None:
  if raw is None or str(raw).strip() == "":
    return None
  try:
    value = int(str(raw).strip())
  except ValueError:
    value = least - 1
  if value < least:
    raise ValueError(f"{name}={raw!r}: expected an integer >= {least}")
  return value


def launch(coordinator_address: str | None = None, num_processes: int | None = None,
           process_id: int | None = None, env: Mapping[str, str] = os.environ) -> Launch:
  """The launch the flags give, each missing one taken from its JAX_* variable. A partial
  set is refused in one line, except an address alone inside a cluster manager's job
  (jax.distributed then reads the count and id from it)."""
  address = coordinator_address or env.get(COORDINATOR) or None
  count = _integer("--num_processes" if num_processes is not None else NUM_PROCESSES,
                   num_processes if num_processes is not None else env.get(NUM_PROCESSES), 1)
  index = _integer("--process_id" if process_id is not None else PROCESS_ID,
                   process_id if process_id is not None else env.get(PROCESS_ID), 0)
  given = {"--coordinator_address": address, "--num_processes": count, "--process_id": index}
  missing = [name for name, value in given.items() if value is None]
  address_only = missing == ["--num_processes", "--process_id"]
  if 0 < len(missing) < 3 and not (address_only and cluster_processes(env)):
    raise ValueError(
        f"a launch of several processes needs {', '.join(given)} (or {COORDINATOR}, "
        f"{NUM_PROCESSES}, {PROCESS_ID}); {' and '.join(missing)} "
        f"{'is' if len(missing) == 1 else 'are'} missing")
  if address is not None and not address.rpartition(":")[2].isdigit():
    raise ValueError(f"coordinator address {address!r}: expected HOST:PORT (process 0's host)")
  if count is not None and index is not None and index >= count:
    raise ValueError(f"process id {index} is not below the process count {count}")
  return Launch(address, count, index)


def multiple_processes(env: Mapping[str, str]=os.environ) -> bool:
  """Whether the environment describes a multi-process job (the markers JAX reads)."""
  return bool(env.get(COORDINATOR) or env.get("MEGASCALE_COORDINATOR_ADDRESS")
              or cluster_processes(env) > 1)
