"""What this machine can do: peak matmul FLOP/s and memory bandwidth, measured with XLA."""
import time

from typing import Any

import jax
import jax.numpy as jnp

# Datasheet figures of accelerators by device_kind substring (the longest that matches
# wins: "NVIDIA H100 PCIe" is not the SXM part that "NVIDIA H100 80GB HBM3" names).
# HBM bandwidth in bytes/s.
HBM_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "H100 PCIe": 2.0e12, "A100": 2.0e12}
# Dense (no sparsity) tensor-core FLOP/s by compute dtype; float32 matmuls run as TF32 at
# XLA's default precision on these GPUs. NVIDIA's H100/H200 and A100 datasheets.
PEAK_FLOPS = {
    "H200": {"bfloat16": 989e12, "float32": 495e12},
    "H100": {"bfloat16": 989e12, "float32": 495e12},
    "H100 PCIe": {"bfloat16": 756e12, "float32": 378e12},
    "A100": {"bfloat16": 312e12, "float32": 156e12},
}
# Memory in bytes (the 80 GB A100 and H100; the H200's 141 GB).
DEVICE_MEMORY = {"H200": 141e9, "H100": 80e9, "A100": 80e9, "A100-SXM4-40GB": 40e9}


def by_kind(table: dict, kind: str | None = None) -> Any:
  """The entry of `table` for a device kind (default: the first device's), or None."""
  kind = jax.local_devices()[0].device_kind if kind is None else kind
  names = [name for name in table if name in kind]
  return table[max(names, key=len)] if names else None


def _best_time(fn, *args, repeats: int = 5) -> float:
  jax.block_until_ready(fn(*args))
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    best = min(best, time.perf_counter() - t)
  return best


def peak_matmul_flops(n: int = 2048, dtype: jnp.dtype = jnp.float32) -> float:
  """FLOP/s of one large square matmul (the best this backend does)."""
  a = jnp.ones((n, n), dtype)
  return 2 * n ** 3 / _best_time(jax.jit(lambda x: x @ x), a)


def memory_bandwidth(num_bytes: int = 1 << 29) -> float:
  """Bytes/s read by a reduction over a large array (device memory on GPU, RAM on CPU)."""
  x = jnp.ones((num_bytes // 4,), jnp.float32)
  return num_bytes / _best_time(jax.jit(jnp.sum), x)


def hbm_bandwidth() -> float | None:
  """Peak HBM bandwidth of the first device from its kind, or None if unknown."""
  return by_kind(HBM_BANDWIDTH)


def peak_flops(dtype: str) -> float | None:
  """Datasheet matmul FLOP/s of the first device in `dtype`, or None if unknown."""
  return (by_kind(PEAK_FLOPS) or {}).get(str(jnp.dtype(dtype)))
