"""One process of a 2-process CPU "pod" (1 device each) saving or restoring training
checkpoints of a state sharded across both, run by tests/project/test_multihost.py from the
repository's root:

  python -m tests.helpers.checkpoint_worker PROCESS_ID PORT WORKDIR save|restore

`save` writes steps 1 and 2; `restore` prints `restored STEP SUM` (the global sum of the
restored weights), or `error: …` when no step could be restored.
"""
import os
import sys

import numpy as np

from tests.helpers import jobs  # Nothing heavy.

SHAPE = (256, 64)


def weights(step: int) -> np.ndarray:
  return np.random.default_rng(step).standard_normal(SHAPE).astype(np.float32)


def main(process_id: int, port: int, workdir: str, phase: str) -> None:
  os.environ["XLA_FLAGS"] = jobs.xla_flags(1)
  os.environ["JAX_PLATFORMS"] = "cpu"
  import jax
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
  import jax.numpy as jnp
  from jax.sharding import Mesh, NamedSharding, PartitionSpec
  from pedrl import sharding
  from pedrl.rl import checkpoint

  rows = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
  state = lambda step: {"params": {"w": jax.make_array_from_callback(
      SHAPE, rows, lambda index: weights(step)[index])}}
  model = {"model_type": "test"}
  ckpt = checkpoint.Checkpoints(workdir, keep=5)
  if phase == "save":
    for step in (1, 2):
      ckpt.save(step, state(step), {"step": step, "model": model})
  else:
    try:
      step, restored, _ = ckpt.restore(state(0), model)
    except checkpoint.CheckpointError as e:
      print(f"error: {e}", flush=True)
    else:
      total = sharding.to_host(jax.jit(jnp.sum)(restored["params"]["w"]))
      print(f"restored {step} {float(total):.6f}", flush=True)
  ckpt.close()


if __name__ == "__main__":
  main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
