"""Reading and writing Hugging Face safetensors checkpoints as pedrl params.

Loading never builds a full host copy of the model: each parameter is created
with `jax.make_array_from_callback`, and the callback reads from the
memory-mapped safetensors files only the slice that one device holds. On a pod
each host therefore reads just its own shards.

Layout. pedrl stacks per-layer weights on a leading layer axis (or, unrolled,
keeps them under layers_0, layers_1, ...) and stores Dense kernels as
[in, out]; transformers keeps one [out, in] tensor per layer. The tables below
name, for each pedrl leaf, its transformers tensor.
"""
import contextlib
import json
import os
import shutil
import re
import typing
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from absl import logging
from safetensors import safe_open
from safetensors.numpy import save_file

from pedrl.models.config import ModelConfig

if typing.TYPE_CHECKING:  # build_model imports them when called (they import this module).
  from pedrl.models.bert import Bert
  from pedrl.models.decoder import Decoder

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"


class CheckpointError(ValueError):
  """A checkpoint file is missing, unreadable or does not fit the config."""


# pedrl leaf path -> (transformers name, is a Dense kernel to transpose).
# "{i}" marks a per-layer tensor; "^" marks a name outside the base-model prefix.
_DECODER = {
    "embed/embedding": ("embed_tokens.weight", False),
    "final_norm/scale": ("norm.weight", False),
    "lm_head/kernel": ("^lm_head.weight", True),
    "score/kernel": ("^score.weight", True),
    "layers/input_norm/scale": ("layers.{i}.input_layernorm.weight", False),
    "layers/post_attn_norm/scale": ("layers.{i}.post_attention_layernorm.weight", False),
    "layers/attn/q_norm/scale": ("layers.{i}.self_attn.q_norm.weight", False),
    "layers/attn/k_norm/scale": ("layers.{i}.self_attn.k_norm.weight", False),
}
for _p in "qkvo":
  for _kind, _t in (("kernel", "weight"), ("bias", "bias")):
    _DECODER[f"layers/attn/{_p}/{_kind}"] = (f"layers.{{i}}.self_attn.{_p}_proj.{_t}", _kind == "kernel")
for _p in ("gate", "up", "down"):
  for _kind, _t in (("kernel", "weight"), ("bias", "bias")):
    _DECODER[f"layers/mlp/{_p}/{_kind}"] = (f"layers.{{i}}.mlp.{_p}_proj.{_t}", _kind == "kernel")

_BERT = {
    "word/embedding": ("embeddings.word_embeddings.weight", False),
    "position/embedding": ("embeddings.position_embeddings.weight", False),
    "token_type/embedding": ("embeddings.token_type_embeddings.weight", False),
    "embed_norm/scale": ("embeddings.LayerNorm.weight", False),
    "embed_norm/bias": ("embeddings.LayerNorm.bias", False),
}
for _p, _hf in (("q", "attention.self.query"), ("k", "attention.self.key"),
                ("v", "attention.self.value"), ("o", "attention.output.dense"),
                ("up", "intermediate.dense"), ("down", "output.dense")):
  _BERT[f"layers/{_p}/kernel"] = (f"encoder.layer.{{i}}.{_hf}.weight", True)
  _BERT[f"layers/{_p}/bias"] = (f"encoder.layer.{{i}}.{_hf}.bias", False)
for _p, _hf in (("attn_norm", "attention.output.LayerNorm"), ("mlp_norm", "output.LayerNorm")):
  _BERT[f"layers/{_p}/scale"] = (f"encoder.layer.{{i}}.{_hf}.weight", False)
  _BERT[f"layers/{_p}/bias"] = (f"encoder.layer.{{i}}.{_hf}.bias", False)

# Old BERT checkpoints name LayerNorm parameters gamma/beta.
_LEGACY_SUFFIXES = {".LayerNorm.weight": ".LayerNorm.gamma", ".LayerNorm.bias": ".LayerNorm.beta"}


def build_model(cfg: ModelConfig) -> "Decoder | Bert":
  """The Flax module for a config."""
  if cfg.is_decoder:
    from pedrl.models.decoder import Decoder
    return Decoder(cfg)
  from pedrl.models.bert import Bert
  return Bert(cfg)


def abstract_params(cfg: ModelConfig) -> Any:
  """Shapes and dtypes of the params of `cfg`'s model, without allocating them."""
  model = build_model(cfg)
  tokens = jnp.zeros((1, 2), jnp.int32)
  kwargs = {"method": "forward"} if cfg.is_decoder else {}
  return jax.eval_shape(
      lambda: model.init(jax.random.PRNGKey(0), tokens, jnp.ones_like(tokens), **kwargs))["params"]


def random_params(cfg: ModelConfig, seed: int = 0) -> Any:
  """normal(0, 0.02) params of `cfg`'s shapes, made leaf by leaf on the device (for
  benchmarks at sizes no test checkpoint has)."""
  leaves, treedef = jax.tree.flatten(abstract_params(cfg))
  keys = jax.random.split(jax.random.key(seed), len(leaves))
  make = jax.jit(lambda k, s: (0.02 * jax.random.normal(k, s.shape, jnp.float32)).astype(s.dtype),
                 static_argnums=1)
  return jax.tree.unflatten(treedef, [make(k, jax.ShapeDtypeStruct(s.shape, s.dtype))
                                      for k, s in zip(keys, leaves)])


def _leaf_paths(tree):
  flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
  paths = ["/".join(str(getattr(k, "key", k)) for k in path) for path, _ in flat]
  return paths, [leaf for _, leaf in flat], treedef


class _Tensors:
  """Name -> lazily readable tensor over all shard files of a checkpoint."""

  def __init__(self, ckpt_dir: str, stack: contextlib.ExitStack):
    index = os.path.join(ckpt_dir, INDEX_FILE)
    single = os.path.join(ckpt_dir, SINGLE_FILE)
    if os.path.isfile(index):
      try:
        with open(index) as f:
          weight_map = json.load(f)["weight_map"]
      except (json.JSONDecodeError, KeyError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{index}: unreadable shard index ({e!r}).") from e
      files = sorted(set(weight_map.values()))
    elif os.path.isfile(single):
      weight_map, files = None, [SINGLE_FILE]
    else:
      others = [f for f in os.listdir(ckpt_dir) if f.endswith((".bin", ".pt", ".pth"))]
      hint = f" It has {others}: convert them to safetensors first." if others else ""
      raise CheckpointError(f"{ckpt_dir}: no {SINGLE_FILE} or {INDEX_FILE}.{hint}")
    self.handles, self.where = {}, {}
    for name in files:
      path = os.path.join(ckpt_dir, name)
      if not os.path.isfile(path):
        needed = [k for k, v in (weight_map or {}).items() if v == name][:3]
        raise CheckpointError(f"{path}: shard listed in {INDEX_FILE} is missing (holds {needed}...).")
      try:
        handle = stack.enter_context(safe_open(path, framework="numpy"))
      except Exception as e:  # safetensors raises its own error types.
        raise CheckpointError(f"{path}: corrupt or truncated safetensors file ({e}).") from e
      self.handles[name] = handle
      for key in handle.keys():
        self.where[key] = name
    if weight_map is not None:
      for key, name in weight_map.items():
        if self.where.get(key) != name:
          raise CheckpointError(f"{os.path.join(ckpt_dir, name)}: lacks tensor {key!r} "
                                f"that {INDEX_FILE} places there.")

  def path(self, key):
    return self.where[key]

  def slice(self, key):
    return self.handles[self.where[key]].get_slice(key)


def _layer_of(path: str):
  """(table key, layer) of a leaf path: layer is 'all' for stacked leaves, an int
  for an unrolled layer's leaf (layers_3/...), None outside the layers."""
  if path.startswith("layers/"):
    return path, "all"
  m = re.match(r"layers_(\d+)/(.*)", path)
  if m:
    return "layers/" + m[2], int(m[1])
  return path, None


def _resolve(names: dict, cfg: ModelConfig, available) -> dict:
  """Adds the base-model prefix found in the files: none for a bare *Model (BGE-M3's
  XLMRobertaModel), 'model.', 'bert.' or 'roberta.' under a task head."""
  probe = "embed_tokens.weight" if cfg.is_decoder else "embeddings.word_embeddings.weight"
  prefix = next((p for p in ("", "model.", "bert.", "roberta.") if p + probe in available), None)
  if prefix is None:
    raise CheckpointError(f"no tensor named like '*{probe}': not a {cfg.model_type} checkpoint?")
  out = {}
  for leaf, (name, transpose) in names.items():
    name = name[1:] if name.startswith("^") else prefix + name
    if cfg.model_type == "bert":
      probe_name = name.replace("{i}", "0")
      for new, old in _LEGACY_SUFFIXES.items():
        if probe_name.endswith(new) and probe_name not in available and \
            probe_name[:-len(new)] + old in available:
          name = name[:-len(new)] + old
    out[leaf] = (name, transpose)
  return out


def _read(tensors: _Tensors, name: str, transpose: bool, index, layers, dtype):
  """The block `index` of one pedrl leaf, read slice by slice from the files."""
  def one(key, idx):
    sl = tensors.slice(key)
    if transpose:  # A pedrl [in, out] block is a transformers [out, in] block, transposed.
      return np.asarray(sl[idx[1], idx[0]]).T
    return np.asarray(sl[tuple(idx)])
  if layers is None:
    block = one(name, index)
  else:
    rows = range(layers)[index[0]]
    block = np.stack([one(name.format(i=i), index[1:]) for i in rows])
  return block.astype(dtype)


def warn_if_heads_split(ckpt_dir: str, cfg: ModelConfig, tensor: int) -> None:
  """The sharding rules split a projection's heads × head_dim columns wherever `tensor`
  divides them, inside a head if it must (28 query and 4 KV heads over tensor=8): correct,
  but XLA gathers the heads back in every layer at every step."""
  split = [f"{n} {what}" for n, what in ((cfg.num_heads, "query heads"),
                                         (cfg.num_kv_heads, "KV heads")) if n % tensor]
  if tensor > 1 and split:
    logging.warning("mesh.tensor=%d does not divide the %s of %s: its attention weights are "
                    "split inside heads and gathered back in every layer; a tensor size that "
                    "divides them (or the fsdp axis) avoids it", tensor, " and ".join(split),
                    ckpt_dir)


def load_params(ckpt_dir: str, cfg: ModelConfig, shardings: Any = None) -> Any:
  """Reads a checkpoint directory into a params pytree.

  Args:
    ckpt_dir: directory with model.safetensors or sharded files plus their index.
    cfg: the config read from the same directory (`config.from_hf`).
    shardings: None (this process's first device), a `Mesh` (sharded by `pedrl.sharding`
      rules), a single `Sharding` for all leaves, or a pytree of them.
  Returns:
    The params pytree, each leaf already placed with its sharding.
  """
  abstract = abstract_params(cfg)
  paths, leaves, treedef = _leaf_paths(abstract)
  if shardings is None:
    # This process's own device: on a pod, the global list's first belongs to process 0, and any
    # other process could not address the array (it has no shard to fill).
    shardings = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  if isinstance(shardings, jax.sharding.Mesh):
    from pedrl import sharding as sharding_lib
    warn_if_heads_split(ckpt_dir, cfg, shardings.shape.get("tensor", 1))
    shardings = sharding_lib.param_shardings(abstract, shardings)
  if isinstance(shardings, jax.sharding.Sharding):
    shard_leaves = [shardings] * len(leaves)
  else:
    shard_leaves = jax.tree_util.tree_leaves(
        shardings, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
  table = _DECODER if cfg.is_decoder else _BERT
  dtype = np.dtype(ml_dtypes.bfloat16) if cfg.dtype == "bfloat16" else np.dtype(cfg.dtype)

  out = []
  with contextlib.ExitStack() as stack:
    tensors = _Tensors(ckpt_dir, stack)
    table_keys = {_layer_of(p)[0] for p in paths}
    names = _resolve({k: table[k] for k in table_keys}, cfg, tensors.where)
    used = set()
    for path, leaf, sharding in zip(paths, leaves, shard_leaves):
      key, layer = _layer_of(path)
      name, transpose = names[key]
      stacked = layer == "all"
      if isinstance(layer, int):
        name = name.format(i=layer)
      keys = [name.format(i=i) for i in range(cfg.num_layers)] if stacked else [name]
      per_tensor = leaf.shape[1:] if stacked else leaf.shape
      want = tuple(reversed(per_tensor)) if transpose and len(per_tensor) == 2 else tuple(per_tensor)
      for key in keys:
        if key not in tensors.where:
          raise CheckpointError(f"{ckpt_dir}: tensor {key!r} (for {path}) is missing.")
        got = tuple(tensors.slice(key).get_shape())
        if got != want:
          raise CheckpointError(
              f"{os.path.join(ckpt_dir, tensors.path(key))}: tensor {key!r} has shape {got}, "
              f"config.json implies {want}.")
        used.add(key)
      layers = cfg.num_layers if stacked else None
      out.append(jax.make_array_from_callback(
          leaf.shape, sharding,
          lambda idx, n=name, t=transpose, l=layers: _read(tensors, n, t, idx, l, dtype)))
    unused = sorted(set(tensors.where) - used)
    if unused:  # Heads pedrl has no use for (BERT's pooler): shown with --verbosity=1.
      logging.debug("%s: %d tensors not used by pedrl (e.g. %s)", ckpt_dir, len(unused),
                    unused[:3])
  return jax.tree_util.tree_unflatten(treedef, out)


def _hf_tensors(params, cfg: ModelConfig):
  """Yields (transformers name, numpy array) for every leaf of params."""
  paths, leaves, _ = _leaf_paths(params)
  table = _DECODER if cfg.is_decoder else _BERT
  prefix = "model." if cfg.is_decoder else ""
  for path, leaf in zip(paths, leaves):
    key, layer = _layer_of(path)
    name, transpose = table[key]
    name = name[1:] if name.startswith("^") else prefix + name
    if isinstance(layer, int):
      name = name.format(i=layer)
    if layer == "all":
      for i in range(cfg.num_layers):
        x = np.asarray(jax.device_get(leaf[i]))
        yield name.format(i=i), np.ascontiguousarray(x.T if transpose else x)
    else:
      x = np.asarray(jax.device_get(leaf))
      yield name, np.ascontiguousarray(x.T if transpose else x)


def save_params(params: Any, cfg: ModelConfig, out_dir: str,
                max_shard_bytes: int = 4 << 30) -> None:
  """Writes params as a transformers-loadable directory (config.json + safetensors)."""
  os.makedirs(out_dir, exist_ok=True)
  shards, current, size = [], {}, 0
  for name, x in _hf_tensors(params, cfg):
    if current and size + x.nbytes > max_shard_bytes:
      shards.append(current)
      current, size = {}, 0
    current[name] = x
    size += x.nbytes
  shards.append(current)
  meta = {"format": "pt"}  # transformers refuses files without it.
  names = ([SINGLE_FILE] if len(shards) == 1 else
           [f"model-{n + 1:05d}-of-{len(shards):05d}.safetensors" for n in range(len(shards))])
  for fname, shard in zip(names, shards):
    save_file(shard, os.path.join(out_dir, fname), metadata=meta)
  if len(shards) > 1:
    weight_map = {k: fname for fname, shard in zip(names, shards) for k in shard}
    total = sum(x.nbytes for shard in shards for x in shard.values())
    with open(os.path.join(out_dir, INDEX_FILE), "w") as f:
      json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
  hf_config = json.loads(cfg.hf_config_json)
  if not hf_config:
    raise CheckpointError("cfg has no hf_config_json: build it with config.from_hf.")
  hf_config["torch_dtype"] = hf_config["dtype"] = cfg.dtype
  config_path = os.path.join(out_dir, "config.json")
  with open(config_path, "w") as f:
    json.dump(hf_config, f, indent=2)
  for fname in names:  # safetensors writes 0600; give the weights the umask's mode, as open() does.
    shutil.copymode(config_path, os.path.join(out_dir, fname))
