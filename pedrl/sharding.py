"""One device mesh for every model of a run, and the rules that shard params on it.

Axes: `data` (pure data parallel), `fsdp` (data parallel with params sharded
along their embedding dimension) and `tensor` (Megatron-style splits of heads,
MLP width and vocabulary). A dimension that an axis does not divide is left
replicated, so the same rules serve 0.5B and 14B models and any GQA ratio.
"""
from collections.abc import Iterable, Sequence
import contextlib
import math
import re
from typing import Any

import jax
import numpy as np
from numpy.typing import ArrayLike
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXES = ("data", "fsdp", "tensor")
BATCH = ("data", "fsdp")  # The batch dimension is split over both.

# (regex on the param path, one mesh axis or None per trailing dimension).
# Stacked layer params (layers/...) have one more, leading layer axis that is
# never sharded; unrolled ones (layers_3/...) do not.
RULES = (
    (r"(^|/)embedding$", ("tensor", "fsdp")),
    (r"^(lm_head|score)/kernel$", ("fsdp", "tensor")),
    (r"^layers(_\d+)?/(attn/|mlp/)?(q|k|v|gate|up)/kernel$", ("fsdp", "tensor")),
    (r"^layers(_\d+)?/(attn/|mlp/)?(q|k|v|gate|up)/bias$", ("tensor",)),
    (r"^layers(_\d+)?/(attn/|mlp/)?(o|down)/kernel$", ("tensor", "fsdp")),
)


def make_mesh(data: int = 1, fsdp: int = -1, tensor: int = 1,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A (data, fsdp, tensor) mesh; one size may be -1 to take the remaining devices."""
  devices = np.asarray(devices if devices is not None else jax.devices())
  sizes = [data, fsdp, tensor]
  if sizes.count(-1) > 1:
    raise ValueError("at most one mesh axis size may be -1")
  known = int(np.prod([s for s in sizes if s != -1]))
  if -1 in sizes:
    if devices.size % known:
      raise ValueError(f"{devices.size} devices do not split into mesh {sizes}")
    sizes[sizes.index(-1)] = devices.size // known
  if int(np.prod(sizes)) != devices.size:
    raise ValueError(f"mesh {dict(zip(AXES, sizes))} needs {int(np.prod(sizes))} devices, "
                     f"there are {devices.size}")
  return Mesh(devices.reshape(sizes), AXES)


def host_devices(cores: int, kv_heads: Iterable[int]) -> int:
  """How many devices to make of a CPU host's cores for tensor-parallel sampling
  (`jax_num_cpu_devices`, set before jax starts; a `tensor` mesh over them): the most, at
  most one per core, that divide every model's KV heads, so each device keeps whole
  heads of the caches. XLA:CPU runs the devices' programs side by side, where one
  device's decode attention keeps to one core (docs/performance.md)."""
  return max(n for n in range(1, max(cores, 1) + 1) if all(h % n == 0 for h in kv_heads))


def spec_for(path: str, shape: Sequence[int], mesh: Mesh) -> P:
  """The PartitionSpec of one param, by the first matching rule."""
  for pattern, axes in RULES:
    if re.search(pattern, path) and path.startswith("layers/"):
      axes = (None,) + axes
    if re.search(pattern, path) and len(axes) == len(shape):
      return P(*(a if a and dim % mesh.shape[a] == 0 else None for a, dim in zip(axes, shape)))
  return P()


def param_shardings(params: Any, mesh: Mesh) -> Any:
  """NamedShardings for a params pytree (arrays or ShapeDtypeStructs)."""
  def one(path, leaf):
    name = "/".join(str(getattr(k, "key", k)) for k in path)
    return NamedSharding(mesh, spec_for(name, leaf.shape, mesh))
  return jax.tree_util.tree_map_with_path(one, params)


def context(mesh: Mesh | None) -> contextlib.AbstractContextManager:
  """`jax.set_mesh(mesh)` (None: no mesh): programs traced inside see the mesh, so the
  decoder can ask that a batch's rows stay split (`shard_rows`)."""
  return contextlib.nullcontext() if mesh is None else jax.set_mesh(mesh)


def shard_rows(x: ArrayLike) -> jax.Array:
  """x [B, ...] constrained to its rows split over the context mesh's batch axes (a
  `context` around the jitted call; without one, x as it is; rows the axes do not
  divide are an error, as batches on a mesh are padded to them). The decoder's whole sequences need it: the embedding table's E axis is split
  over fsdp, and from the lookup on XLA's partitioner otherwise keeps every row on every
  device with E split, all-reducing each layer's [B, T, F] outputs and the [B, T, V]
  logits instead of gathering weights (a 1-layer Qwen2.5-0.5B update of 16 rows x 1024
  tokens over fsdp=8 on CPU: 21.0 GiB of temporaries per device, 4.6 GiB with its rows
  split)."""
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or not set(BATCH) <= set(mesh.axis_names):
    return x
  shards = math.prod(mesh.shape[a] for a in BATCH)
  if x.shape[0] % shards:
    raise ValueError(f"{x.shape[0]} rows do not split over the mesh's {shards} batch shards")
  return jax.lax.with_sharding_constraint(x, P(BATCH, *(None,) * (x.ndim - 1)))


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
  """Sharding of a [B, ...] batch: rows over data and fsdp, the rest replicated."""
  return NamedSharding(mesh, P(BATCH, *(None,) * (ndim - 1)))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_shards(mesh: Mesh | None) -> int:
  """How many pieces the batch dimension is split into (1 without a mesh)."""
  return 1 if mesh is None else int(np.prod([mesh.shape[a] for a in BATCH]))


def put(x: ArrayLike, sharding: NamedSharding) -> jax.Array:
  """A host array on the devices of `sharding`. On a multi-host mesh every process
  passes the same x and places only the shards its own devices hold."""
  if sharding.is_fully_addressable:
    return jax.device_put(x, sharding)
  if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):  # Typed PRNG keys.
    data = put(jax.random.key_data(x), NamedSharding(sharding.mesh, P(*sharding.spec, None)))
    return jax.random.wrap_key_data(data, impl=jax.random.key_impl(x))
  x = np.asarray(x)
  return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def on_device(x: ArrayLike) -> jax.Array:
  """A host array on the default device. A transfer (`jax.device_put`), where
  `jnp.asarray` would compile a program per shape: a rollout's dozens of them."""
  return x if isinstance(x, jax.Array) else jax.device_put(np.asarray(x))


def put_rows(x: ArrayLike, mesh: Mesh | None) -> jax.Array:
  """A host array [B, ...] on the devices: rows split over (data, fsdp), or one device."""
  if mesh is None:
    return on_device(x)
  return put(x, batch_sharding(mesh, np.ndim(x)))


def to_host(tree: Any) -> Any:
  """Device arrays → numpy. Arrays whose shards sit partly on other hosts' devices are
  gathered first, so every process reads the same whole values."""
  def one(x):
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
      x = multihost_utils.process_allgather(x, tiled=True)
    return np.asarray(x)
  return jax.tree.map(one, tree)
