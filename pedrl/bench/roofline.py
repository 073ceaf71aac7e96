"""What this machine can do: peak matmul FLOP/s and memory bandwidth, measured with XLA."""
import time

import jax
import jax.numpy as jnp

# Peak HBM bandwidth (bytes/s) of accelerators by device_kind substring.
HBM_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}


def _best_time(fn, *args, repeats: int = 5) -> float:
  jax.block_until_ready(fn(*args))
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - t)
  return best


def peak_matmul_flops(n: int = 2048, dtype=jnp.float32) -> float:
  """FLOP/s of one large square matmul (the best this backend does)."""
  a = jnp.ones((n, n), dtype)
  return 2 * n ** 3 / _best_time(jax.jit(lambda x: x @ x), a)


def memory_bandwidth(num_bytes: int = 1 << 29) -> float:
  """Bytes/s read by a reduction over a large array (device memory on GPU, RAM on CPU)."""
  x = jnp.ones((num_bytes // 4,), jnp.float32)
  return num_bytes / _best_time(jax.jit(jnp.sum), x)


def hbm_bandwidth() -> float | None:
  """Peak HBM bandwidth of the first device from its kind, or None if unknown."""
  kind = jax.devices()[0].device_kind
  return next((bw for name, bw in HBM_BANDWIDTH.items() if name in kind), None)
