"""The compiled decode loop reads the KV cache and updates it in place: no copy of a
cache-sized buffer per step, so a step's cost does not grow with the allocated slots;
on a tensor mesh its collectives are the layers' and one gather of the logits."""
import re

import jax
import numpy as np
import pytest

from pedrl import sharding
from pedrl.bench import hlo
from pedrl.engine import Sampler, SamplingParams, sampling, sequence_keys
from pedrl.models.config import ModelConfig
from pedrl.models.hf_checkpoint import build_model, random_params


@pytest.mark.parametrize("scan_layers", [True, False])
@pytest.mark.parametrize("slots", [512, 2048])
def test_decode_loop_holds_no_copy_of_the_cache(scan_layers, slots):
  # Shapes where the old layout (each layer writing its slot, then slicing the window
  # to attend) compiled to two copies of every layer's cache per step.
  batch, kv_heads, head_dim = 8, 2, 64
  cfg = ModelConfig("qwen2", "causal_lm", 256, 256, 2, 4, kv_heads, head_dim, 512, 1e-6, 32768,
                    dtype="float32", scan_layers=scan_layers, pad_token_id=0)
  sampler = Sampler(build_model(cfg))
  params = random_params(cfg)
  rows = np.random.default_rng(0).integers(1, 256, (batch, 400)).tolist()
  cache = sampler.extend(params, sampler.new_cache(batch, slots), [r[:-1] for r in rows])
  text, window = hlo.decode_hlo(sampler, params, cache, [r[-1:] for r in rows], SamplingParams(32))
  assert window == 512  # Prompts padded to 448 slots, plus 1 + 32: a 512-slot window.
  # Anything as large as one layer's keys over the window counts.
  assert hlo.loop_copies(text, batch * kv_heads * head_dim * window) == []


def test_loop_copies_finds_a_copy_in_a_loop_body():
  text = """HloModule m

%body (p: (s32[], f32[8,4,64,512])) -> (s32[], f32[8,4,64,512]) {
  %p = (s32[], f32[8,4,64,512]) parameter(0)
  %x = f32[8,4,64,512]{3,2,1,0} get-tuple-element(%p), index=1
  %copy.1 = f32[8,4,64,512]{3,2,1,0} copy(%x)
  %small = f32[8,4]{1,0} copy(%y)
}

ENTRY %main (a: f32[8,4,64,512]) -> f32[8,4,64,512] {
  %w = (s32[], f32[8,4,64,512]) while(%t), condition=%cond, body=%body
  %copy.2 = f32[8,4,64,512]{3,2,1,0} copy(%a)
}
"""
  assert hlo.loop_copies(text, 8 * 4 * 64 * 256) == ["copy [8,4,64,512]"]
  with pytest.raises(ValueError, match="no while loop"):
    hlo.loop_copies("HloModule m\n\nENTRY %main () -> f32[] {\n}\n", 1)


def test_resumed_decoding_copies_only_the_window_of_its_rows():
  """Going on with 8 of 16 rows takes and puts back the slots the call can reach (48 of
  4096), not the rows' whole cache (96 MiB of scratch for a 128 MiB cache before)."""
  cfg = ModelConfig("qwen2", "causal_lm", 256, 256, 2, 4, 2, 64, 512, 1e-6, 32768,
                    dtype="float32", scan_layers=True, pad_token_id=0)
  sampler = Sampler(build_model(cfg))
  model = sampler.model
  params, batch = random_params(cfg), 16
  cache = sampler.new_cache(batch, 4096)
  sp = SamplingParams(32, stop_token_ids=(5,))
  tokens, mask, window = sampler._chunk([[1, 2, 3]] * batch, cache, 32, need_token=True)
  keys, real = sequence_keys(0, np.arange(batch)), np.ones((batch,), bool)
  state, _ = sampling._generate.lower(model, params, cache, tokens, mask, real, keys, None, sp,
                                      window, None, 0).out_info
  state = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), state)
  rows = np.arange(8, dtype=np.int32)
  program = sampling._resume.lower(model, params, cache, state, keys, None, sp, window, None,
                                   rows, 0).compile()
  cache_bytes = sum(x.nbytes for x in jax.tree.leaves(cache))
  assert window == 48
  assert program.memory_analysis().temp_size_in_bytes < cache_bytes / 16


@pytest.mark.skipif(jax.default_backend() != "cpu" or jax.device_count() < 2,
                    reason="needs 2 (simulated) CPU devices")
def test_a_tensor_split_decode_step_gathers_its_logits_once():
  """On a `tensor` mesh the head splits the vocabulary; sampling from split logits made
  XLA all-reduce integers and floats of every row several times a step. The loop's
  collectives are the layers' (o and down projections), the embedding lookup's, and one
  gather of the logits."""
  layers, vocab, batch = 2, 256, 8
  cfg = ModelConfig("qwen2", "causal_lm", vocab, 128, layers, 4, 2, 32, 256, 1e-6, 32768,
                    dtype="float32", scan_layers=False, pad_token_id=0)
  mesh = sharding.make_mesh(1, 1, 2, devices=jax.devices()[:2])
  sampler = Sampler(build_model(cfg), mesh=mesh)
  params = random_params(cfg)
  params = jax.device_put(params, sharding.param_shardings(params, mesh))
  rows = np.random.default_rng(0).integers(1, vocab, (batch, 40)).tolist()
  cache = sampler.extend(params, sampler.new_cache(batch, 128), [r[:-1] for r in rows])
  text, _ = hlo.decode_hlo(sampler, params, cache, [r[-1:] for r in rows],
                           SamplingParams(8, temperature=1.0, top_k=20))
  ops = hlo.loop_ops(text, hlo.COLLECTIVES)
  gathered = [r for op, r in ops if op.startswith("all-gather")]
  assert len(gathered) == 1 and re.match(rf"f32\[{batch},(1,)?{vocab}\]", gathered[0]), ops
  assert sum(op.startswith("all-reduce") for op, _ in ops) <= 2 * layers + 1, ops
  assert not [r for _, r in ops if "s32" in r or "pred" in r], ops



def _lowered_matmuls(layers: int, scan_layers: bool) -> int:
  """Matmuls in the lowered (not compiled: cheap) program of a sampling call: its prefill,
  decode loop and head."""
  cfg = ModelConfig("llama", "causal_lm", 256, 64, layers, 4, 2, 16, 128, 1e-6, 32768,
                    dtype="float32", scan_layers=scan_layers, pad_token_id=0)
  sampler = Sampler(build_model(cfg))
  cache = sampler.new_cache(2, 64)
  sp = SamplingParams(4)
  tokens, mask, window = sampler._chunk([[1, 2, 3], [4, 5]], cache, sp.max_new_tokens, True)
  real, keys = np.ones((2,), bool), sequence_keys(0, np.arange(2))
  text = sampling._generate.lower(sampler.model, random_params(cfg), cache, tokens, mask, real,
                                  keys, None, sp, window, None, 0).as_text()
  return text.count("stablehlo.dot_general")


def test_a_scanned_sampling_program_holds_one_layer_body():
  """Scanned layers (the default layout, which the samplers load) trace one layer body into
  a loop over the layers: a 6-layer model's sampling program (prefill and decode loop)
  holds as many matmuls as a 2-layer one's, so its compile time does not grow with depth.
  Unrolled, every layer is a copy."""
  assert ModelConfig.scan_layers
  assert _lowered_matmuls(6, scan_layers=True) == _lowered_matmuls(2, scan_layers=True)
  assert _lowered_matmuls(6, scan_layers=False) > _lowered_matmuls(2, scan_layers=False)
