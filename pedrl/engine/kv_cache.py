"""KV caches on devices: create with a sharding, select rows, clear rows, compact, grow (the type
and its layout are models.decoder.KVCache)."""
import functools

import jax

from pedrl import sharding as sharding_lib
from pedrl.models.config import ModelConfig
from pedrl.models.decoder import KVCache


def shardings(cfg: ModelConfig, mesh: jax.sharding.Mesh | None, batch: int) -> KVCache:
  """NamedShardings of a cache: rows over (data, fsdp), KV heads over tensor where they divide."""
  rows = sharding_lib.BATCH if batch % sharding_lib.batch_shards(mesh) == 0 else None
  heads = "tensor" if cfg.num_kv_heads % mesh.shape["tensor"] == 0 else None
  return KVCache.shardings(cfg, mesh, rows, heads)


def create(cfg: ModelConfig, batch: int, size: int,
           mesh: jax.sharding.Mesh | None = None) -> KVCache:
  """An empty cache, allocated directly with its sharding when a mesh is given."""
  return _creator(cfg, batch, size, mesh)()


@functools.lru_cache(maxsize=64)
def _creator(cfg, batch, size, mesh):
  out = None if mesh is None else shardings(cfg, mesh, batch)
  return jax.jit(lambda: KVCache.zeros(cfg, batch, size), out_shardings=out)


# The host's entry points: one compiled program each; compact updates the cache in place.
take = jax.jit(KVCache.take)
compact = jax.jit(KVCache.compact, donate_argnums=(0,))
clear = jax.jit(KVCache.cleared, donate_argnums=(0,))
grow = jax.jit(KVCache.grown, static_argnums=(1,))
