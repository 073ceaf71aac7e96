"""A forward pass sharded over 8 simulated devices equals the single-device one."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from tests.helpers import reference
from pedrl import models, sharding
from pedrl.engine.sampling import generate_greedy
from pedrl.models.decoder import Decoder

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")


def test_make_mesh_fills_one_axis_and_rejects_bad_sizes():
  mesh = sharding.make_mesh(data=2, fsdp=-1, tensor=2)
  assert dict(mesh.shape) == {"data": 2, "fsdp": 2, "tensor": 2}
  with pytest.raises(ValueError, match="needs 6 devices"):
    sharding.make_mesh(data=3, fsdp=1, tensor=2)
  with pytest.raises(ValueError, match="do not split"):
    sharding.make_mesh(data=3, fsdp=-1, tensor=1)


def test_a_hosts_devices_are_the_most_cores_that_divide_every_models_kv_heads():
  assert sharding.host_devices(2, [4, 4]) == 2  # The bench models on a 2-core machine.
  assert sharding.host_devices(8, [4, 8]) == 4
  assert sharding.host_devices(3, [4]) == 2
  assert sharding.host_devices(16, [2, 8]) == 2  # Qwen2.5-0.5B's 2 KV heads.
  assert sharding.host_devices(4, [3]) == 3
  assert sharding.host_devices(1, [4]) == sharding.host_devices(0, [4]) == 1


def test_rules_shard_what_divides_and_replicate_the_rest():
  mesh = sharding.make_mesh(data=1, fsdp=2, tensor=4)
  assert sharding.spec_for("layers/attn/q/kernel", (2, 64, 128), mesh) == P(None, "fsdp", "tensor")
  assert sharding.spec_for("layers/attn/k/kernel", (2, 64, 6), mesh) == P(None, "fsdp", None)
  assert sharding.spec_for("layers/mlp/down/kernel", (2, 176, 64), mesh) == P(None, "tensor", "fsdp")
  assert sharding.spec_for("embed/embedding", (1024, 64), mesh) == P("tensor", "fsdp")
  assert sharding.spec_for("layers/input_norm/scale", (2, 64), mesh) == P()
  # Unrolled layers: the same rules without the leading layer axis.
  assert sharding.spec_for("layers_1/attn/q/kernel", (64, 128), mesh) == P("fsdp", "tensor")
  assert sharding.spec_for("layers_0/mlp/down/kernel", (176, 64), mesh) == P("tensor", "fsdp")
  assert sharding.spec_for("layers_0/attn/q/bias", (128,), mesh) == P("tensor")


@pytest.mark.parametrize("name", ["qwen2", "llama3", "bert"])
def test_sharded_forward_equals_single_device(testdata, name):
  cfg, model, params = models.load(testdata(name))
  mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
  _, _, sharded = models.load(testdata(name), shardings=mesh)
  q = sharded["layers"]["q" if name == "bert" else "attn"]
  q = q["kernel"] if name == "bert" else q["q"]["kernel"]
  assert q.sharding.spec == P(None, "fsdp", "tensor")
  assert len(q.addressable_shards) == 8 and q.addressable_shards[0].data.shape[1:] == (32, 32)

  rng = np.random.default_rng(0)
  if cfg.is_decoder:
    tokens, mask = reference.left_padded(rng, cfg.vocab_size, [0, 3, 5, 9], 16)
    apply = lambda p, t, m: model.apply({"params": p}, t, m, method=Decoder.forward)[0]
  else:
    tokens, mask = reference.left_padded(rng, cfg.vocab_size, [0, 0, 0, 0], 16)
    apply = lambda p, t, m: model.apply({"params": p}, t, m)
  single = np.asarray(jax.jit(apply)(params, tokens, mask))
  batch = sharding.batch_sharding(mesh)
  t, m = jax.device_put(tokens, batch), jax.device_put(mask, batch)
  out = jax.jit(apply)(sharded, t, m)
  assert len(out.sharding.device_set) == 8
  # fsdp splits contractions, so partial sums add in another order: float32 rounding only.
  np.testing.assert_allclose(np.asarray(out)[mask], single[mask], atol=1e-4, rtol=0)


def test_sharded_greedy_generation_equals_single_device(testdata):
  cfg, model, params = models.load(testdata("qwen3"))
  mesh = sharding.make_mesh(data=1, fsdp=4, tensor=2)
  _, _, sharded = models.load(testdata("qwen3"), shardings=mesh)
  tokens, mask = reference.left_padded(np.random.default_rng(1), cfg.vocab_size, [0, 2, 4, 6], 10)
  single = np.asarray(generate_greedy(model, params, tokens, mask, 12))
  batch = sharding.batch_sharding(mesh)
  ours = generate_greedy(model, sharded, jax.device_put(tokens, batch),
                         jax.device_put(jnp.asarray(mask), batch), 12)
  np.testing.assert_array_equal(np.asarray(ours), single)
