"""Checkpoint I/O: round trips through transformers, and clear errors on bad input."""
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from safetensors import safe_open

from tests.helpers import reference
from pedrl import models
from pedrl.models import decoder
from pedrl.models.config import ConfigError
from pedrl.models.hf_checkpoint import CheckpointError, INDEX_FILE
from pedrl.tokenizer import TokenizerError, load_tokenizer


def copy(testdata, name, tmp_path):
  dst = str(tmp_path / name)
  shutil.copytree(testdata(name), dst)
  return dst


def edit_config(path, edit):
  """Rewrites path/config.json with edit(raw_dict) applied."""
  with open(os.path.join(path, "config.json")) as f:
    raw = json.load(f)
  edit(raw)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(raw, f)


@pytest.mark.parametrize("name,max_shard_bytes", [("qwen2", 4 << 30), ("qwen3", 200_000),
                                                  ("llama3", 300_000)])
def test_save_round_trip_reproduces_transformers_logits(testdata, tmp_path, name, max_shard_bytes):
  cfg, model, params = models.load(testdata(name))
  out = str(tmp_path / "export")
  models.save_params(params, cfg, out, max_shard_bytes=max_shard_bytes)
  assert os.path.isfile(os.path.join(out, INDEX_FILE)) == (max_shard_bytes < 1 << 20)
  tokens, mask = reference.left_padded(np.random.default_rng(0), cfg.vocab_size, [0, 4], 12)
  positions = reference.mask_positions(mask)
  original = reference.forward(reference.load(testdata(name)), tokens, mask, positions)
  exported = reference.forward(reference.load(out), tokens, mask, positions)
  np.testing.assert_array_equal(exported, original)  # Same float32 weights, same program.
  # And pedrl reads its own export back to the same params.
  _, _, again = models.load(out)
  jax.tree_util.tree_map(np.testing.assert_array_equal, params, again)
  # Every file gets the process umask's mode (a group can read an export), not safetensors' 0600.
  umask = os.umask(0)
  os.umask(umask)
  modes = {f: os.stat(os.path.join(out, f)).st_mode & 0o777 for f in os.listdir(out)}
  assert set(modes.values()) == {0o666 & ~umask}, modes


def test_unrolled_layout_loads_and_exports_the_same_tensors(testdata, tmp_path):
  cfg, _, stacked = models.load(testdata("qwen3"))
  ucfg, _, unrolled = models.load(testdata("qwen3"), scan_layers=False)
  assert "layers_1" in unrolled and "layers" not in unrolled
  jax.tree_util.tree_map(np.testing.assert_array_equal, decoder.unstack_layers(stacked), unrolled)
  jax.tree_util.tree_map(np.testing.assert_array_equal, decoder.stack_layers(unrolled), stacked)
  out = str(tmp_path / "export")
  models.save_params(unrolled, ucfg, out)
  _, _, again = models.load(out)
  jax.tree_util.tree_map(np.testing.assert_array_equal, stacked, again)


def test_bert_export_loads_in_transformers(testdata, tmp_path):
  cfg, _, params = models.load(testdata("bert"))
  out = str(tmp_path / "bert")
  models.save_params(params, cfg, out)
  rng = np.random.default_rng(1)
  tokens = rng.integers(5, cfg.vocab_size, (2, 12)).astype(np.int32)
  mask = np.ones((2, 12), bool)
  mask[1, 7:] = False
  original = reference.forward(reference.load(testdata("bert"), "embed"), tokens, mask)
  exported = reference.forward(reference.load(out, "embed"), tokens, mask)
  np.testing.assert_array_equal(exported[mask], original[mask])


def test_tied_embeddings_export_without_lm_head(testdata, tmp_path):
  cfg, _, params = models.load(testdata("qwen2_tied"))
  out = str(tmp_path / "tied")
  models.save_params(params, cfg, out)
  with safe_open(os.path.join(out, "model.safetensors"), framework="numpy") as f:
    assert "lm_head.weight" not in f.keys() and "model.embed_tokens.weight" in f.keys()
  _, _, again = models.load(out)
  jax.tree_util.tree_map(np.testing.assert_array_equal, params, again)


def test_eos_ids_include_generation_config(testdata, tmp_path):
  path = copy(testdata, "qwen2", tmp_path)
  first = models.from_hf(path).eos_token_ids
  with open(os.path.join(path, "generation_config.json"), "w") as f:
    json.dump({"eos_token_id": [first[0], 7]}, f)
  assert models.from_hf(path).eos_token_ids == (first[0], 7)


def test_bfloat16_checkpoint_loads_exactly(testdata, tmp_path):
  hf = reference.load(testdata("qwen2")).to(torch.bfloat16)
  hf.save_pretrained(str(tmp_path))
  assert models.from_hf(str(tmp_path)).dtype == "bfloat16"  # The checkpoint's own dtype.
  assert models.from_hf(str(tmp_path), dtype="float32").dtype == "float32"
  cfg, _, params = models.load(str(tmp_path))
  q = np.asarray(params["layers"]["attn"]["q"]["kernel"][1].astype(jnp.float32))
  ref = hf.model.layers[1].self_attn.q_proj.weight.detach().float().numpy().T
  np.testing.assert_array_equal(q, ref)


def test_missing_shard_is_named(testdata, tmp_path):
  cfg, _, params = models.load(testdata("qwen3"))
  out = str(tmp_path / "sharded")
  models.save_params(params, cfg, out, max_shard_bytes=200_000)
  victim = sorted(f for f in os.listdir(out) if f.endswith(".safetensors"))[1]
  os.remove(os.path.join(out, victim))
  with pytest.raises(CheckpointError, match=victim + ".*missing"):
    models.load(out)


def test_truncated_shard_is_named(testdata, tmp_path):
  path = copy(testdata, "qwen2", tmp_path)
  shard = os.path.join(path, "model.safetensors")
  with open(shard, "r+b") as f:
    f.truncate(os.path.getsize(shard) // 2)
  with pytest.raises(CheckpointError, match="model.safetensors.*corrupt or truncated"):
    models.load(path)


def test_garbage_shard_is_named(testdata, tmp_path):
  path = copy(testdata, "qwen2", tmp_path)
  with open(os.path.join(path, "model.safetensors"), "wb") as f:
    f.write(b"\x00" * 64)
  with pytest.raises(CheckpointError, match="model.safetensors"):
    models.load(path)


def test_wrong_tensor_shape_names_file_and_tensor(testdata, tmp_path):
  path = copy(testdata, "llama3", tmp_path)
  edit_config(path, lambda raw: raw.update(intermediate_size=200))
  with pytest.raises(CheckpointError, match=r"model.safetensors: tensor 'model.layers.0.mlp"
                                            r"\.(gate|up|down)_proj.weight' has shape"):
    models.load(path)


def test_missing_tensor_is_named(testdata, tmp_path):
  cfg, _, params = models.load(testdata("qwen2"))
  del params["layers"]["attn"]["q"]["bias"]
  out = str(tmp_path / "partial")
  models.save_params(params, cfg, out)
  with pytest.raises(CheckpointError, match="q_proj.bias"):
    models.load(out)


@pytest.mark.parametrize("edit,message", [
    ({"model_type": "gpt2"}, "model_type 'gpt2' is not supported"),
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 1e4}},
     "rope type 'dynamic' is not supported"),
    ({"use_sliding_window": True, "sliding_window": 16}, "sliding-window"),
])
def test_unsupported_configs_are_named(testdata, tmp_path, edit, message):
  path = copy(testdata, "qwen2", tmp_path)
  edit_config(path, lambda raw: raw.update(edit))
  with pytest.raises(ConfigError, match="config.json: .*" + message):
    models.load(path)


def test_missing_files_are_named(testdata, tmp_path):
  with pytest.raises(FileNotFoundError, match="config.json"):
    models.from_hf(str(tmp_path))
  path = copy(testdata, "qwen2", tmp_path)
  os.remove(os.path.join(path, "model.safetensors"))
  with pytest.raises(CheckpointError, match="no model.safetensors"):
    models.load(path)


def test_transformers_v4_style_config_loads(testdata, tmp_path):
  """Checkpoints on the hub carry rope_theta / rope_scaling, not rope_parameters."""
  path = copy(testdata, "llama3", tmp_path)

  def to_v4(raw):
    rope = raw.pop("rope_parameters")
    raw["rope_theta"] = rope.pop("rope_theta")
    raw["rope_scaling"] = rope
  edit_config(path, to_v4)
  assert models.from_hf(path) == models.from_hf(testdata("llama3"))


def test_real_model_configs_parse(shared_data, tmp_path):
  """The papers' model shapes, from the real config.json files in ../shared/data."""
  root = shared_data("model_configs")
  expect = {"Qwen3-8B_config.json": ("qwen3", 36, 32, 8, 128, True),
            "Meta-Llama-3.1-8B_config.json": ("llama", 32, 32, 8, 128, False),
            "Qwen2.5-7B_base_config.json": ("qwen2", 28, 28, 4, 128, False),
            "Qwen2.5-14B_base_config.json": ("qwen2", 48, 40, 8, 128, False)}
  for name, (mt, layers, heads, kv, hd, qk_norm) in expect.items():
    d = tmp_path / name
    d.mkdir()
    shutil.copy(os.path.join(root, name), d / "config.json")
    cfg = models.from_hf(str(d))
    assert (cfg.model_type, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
            cfg.qk_norm) == (mt, layers, heads, kv, hd, qk_norm)
    assert cfg.qkv_bias == (mt == "qwen2")
    if mt == "llama":
      assert dict(cfg.rope_scaling)["original_max_position_embeddings"] == 8192
      assert cfg.rope_theta == 5e5


def test_tokenizer_without_chat_template_is_named(testdata):
  with pytest.raises(TokenizerError, match="bert: the tokenizer has no chat template"):
    load_tokenizer(testdata("bert"), require_chat_template=True)
  assert load_tokenizer(testdata("qwen2"), require_chat_template=True).chat_template
  with pytest.raises(TokenizerError, match="does not exist"):
    load_tokenizer(testdata("nope"))


def test_testdata_tokenizers_carry_markers_and_templates(testdata):
  for name, eos in (("qwen2", "<|im_end|>"), ("llama3", "<|eot_id|>")):
    tok = load_tokenizer(testdata(name), require_chat_template=True)
    assert tok.eos_token == eos
    for marker in ("<think>", "</think>", "<end_of_conversation>"):
      assert len(tok(marker, add_special_tokens=False)["input_ids"]) == 1, (name, marker)
    text = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text.endswith("assistant\n" if name == "qwen2" else "assistant<|end_header_id|>\n\n")


def test_a_tensor_axis_that_splits_heads_is_named(testdata, caplog):
  """The testdata Qwen2's 4 query and 2 KV heads: tensor=2 keeps heads whole, tensor=4
  splits the KV heads (loaded all the same, with a warning naming them)."""
  from pedrl import sharding
  path = testdata("qwen2")
  for tensor, warned in ((2, False), (4, True)):
    caplog.clear()
    mesh = sharding.make_mesh(fsdp=1, tensor=tensor, devices=jax.devices()[:tensor])
    with caplog.at_level("WARNING"):
      models.load(path, shardings=mesh)
    said = [r.getMessage() for r in caplog.records if "mesh.tensor" in r.getMessage()]
    assert said == ([f"mesh.tensor=4 does not divide the 2 KV heads of {path}: its attention "
                     "weights are split inside heads and gathered back in every layer; a "
                     "tensor size that divides them (or the fsdp axis) avoids it"]
                    if warned else []), said
