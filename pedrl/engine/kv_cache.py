"""KV caches as values: create, shard, select rows (the layout is in models/decoder.py)."""
import functools

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from pedrl import sharding as sharding_lib
from pedrl.models.config import ModelConfig
from pedrl.models.decoder import init_cache


def shardings(cfg: ModelConfig, mesh, batch: int):
  """NamedShardings of a cache: rows over (data, fsdp), KV heads over tensor where they divide."""
  rows = sharding_lib.BATCH if batch % sharding_lib.batch_shards(mesh) == 0 else None
  heads = "tensor" if cfg.num_kv_heads % mesh.shape["tensor"] == 0 else None
  kv = NamedSharding(mesh, P(None, rows, heads) if cfg.scan_layers else P(rows, heads))
  kv = kv if cfg.scan_layers else (kv,) * cfg.num_layers
  return {"k": kv, "v": kv, "mask": NamedSharding(mesh, P(rows)),
          "pos": NamedSharding(mesh, P(rows)), "end": NamedSharding(mesh, P())}


def create(cfg: ModelConfig, batch: int, size: int, mesh=None):
  """An empty cache, allocated directly with its sharding when a mesh is given."""
  return _creator(cfg, batch, size, mesh)()


@functools.lru_cache(maxsize=64)
def _creator(cfg, batch, size, mesh):
  out = None if mesh is None else shardings(cfg, mesh, batch)
  return jax.jit(lambda: init_cache(cfg, batch, size), out_shardings=out)


@jax.jit
def take(cache, rows):
  """The cache of rows `rows` (an int array; may repeat rows, e.g. G copies of a prompt)."""
  pick = lambda x: jnp.take(x, rows, axis=0)
  if isinstance(cache["k"], tuple):
    k, v = tuple(map(pick, cache["k"])), tuple(map(pick, cache["v"]))
  else:
    k, v = (jnp.take(x, rows, axis=1) for x in (cache["k"], cache["v"]))
  return {"k": k, "v": v, "mask": pick(cache["mask"]), "pos": pick(cache["pos"]),
          "end": cache["end"]}


def size(cache) -> int:
  return cache["mask"].shape[1]


def batch(cache) -> int:
  return cache["mask"].shape[0]


@functools.partial(jax.jit, donate_argnums=(0,))
def compact(cache):
  """Moves each row's filled slots to the front, in order, and the end back.

  Every chunk takes the same slots in all rows, so left padding and rows that
  stopped early leave masked gaps; a long dialogue packs them away when its
  cache runs out of room instead of needing a cache sized for the gaps.
  """
  order = jnp.argsort(~cache["mask"], axis=1, stable=True)  # Filled slots first, in order.
  gather_k = lambda x: jnp.take_along_axis(x, order[:, None, None, :], axis=3)  # [B, KV, D, S]
  gather_v = lambda x: jnp.take_along_axis(x, order[:, None, :, None], axis=2)  # [B, KV, S, D]
  if isinstance(cache["k"], tuple):
    k, v = tuple(map(gather_k, cache["k"])), tuple(map(gather_v, cache["v"]))
  else:
    k, v = jax.vmap(gather_k)(cache["k"]), jax.vmap(gather_v)(cache["v"])
  return {"k": k, "v": v, "mask": jnp.take_along_axis(cache["mask"], order, axis=1),
          "pos": cache["pos"], "end": jnp.max(jnp.sum(cache["mask"], axis=1, dtype=jnp.int32))}


def room(cache) -> int:
  """Slots left after the last chunk written."""
  return size(cache) - int(cache["end"])
