"""pedrl.bench.profile: the op table of a traced call, and its arithmetic by hand."""
import os

import jax
import jax.numpy as jnp
import pytest

from pedrl.bench import profile


def test_busy_seconds_is_the_union_of_intervals():
  # [0, 15) and [20, 25) once overlaps are merged; a zero-length event adds nothing.
  assert profile.busy_seconds([(5, 10), (0, 10), (20, 5), (22, 0)]) == pytest.approx(20e-9)
  assert profile.busy_seconds([]) == 0.0


def test_leaves_drop_events_that_hold_others():
  # A `while` spanning two body ops, then an op after it.
  events = [("while.1", "while.1", 0, 100), ("dot.2", "dot.2", 10, 20),
            ("fusion.3", "fusion.3", 40, 20), ("copy.4", "copy.4", 200, 5)]
  assert [e[0] for e in profile.leaves(events)] == ["dot.2", "fusion.3", "copy.4"]
  # Ending with its last body op still holds it; overlapping is not holding, and an
  # empty event holds nothing.
  assert [e[0] for e in profile.leaves([("while.1", "", 0, 100), ("dot.2", "", 50, 50)])] == [
      "dot.2"]
  assert [e[0] for e in profile.leaves([("a", "", 0, 100), ("b", "", 90, 50)])] == ["a", "b"]
  assert [e[0] for e in profile.leaves([("a", "", 0, 100), ("m", "", 0, 0)])] == ["a", "m"]


@pytest.mark.parametrize("op,kernel,expected", [
    ("custom-call.3", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "matmul"),
    ("custom-call.9", "nvjet_hsh_128x256_64x4_1x2_h_bz_coopA_NTN", "matmul"),
    ("gemm_fusion_dot.3", "gemm_fusion_dot_3", "matmul"),
    ("custom-call.7", "cudnn_generated_fort_native_sdpa_sm90_knob_7_64x128x128", "attention"),
    ("fusion.12", "loop_multiply_fusion", "fusion"),
    ("input_reduce_fusion.2", "input_reduce_fusion_2", "reduce"),
    ("loop_dynamic_update_slice_fusion", "", "copy"),
    ("all-reduce.1", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "collective"),
    ("sort.4", "", "sort"),
    ("triton_softmax.2", "triton_softmax_2", "reduce"),
    ("rng-bit-generator.1", "", "other"),
])
def test_kind(op, kernel, expected):
  assert profile.kind(op, kernel) == expected


def test_trace_counts_each_loop_iteration_once(tmp_path):
  f = jax.jit(lambda x, w: jax.lax.fori_loop(0, 7, lambda i, x: jnp.tanh(x @ w), x))
  x = jnp.ones((64, 256))
  w = jnp.full((256, 256), 1e-3)
  f(x, w).block_until_ready()
  keep = str(tmp_path / "loop.xplane.pb")
  p = profile.trace(lambda: f(x, w), keep=keep)
  assert p.ops, p.where
  # The loop's body ran 7 times (its condition 8); on a CPU the `while` holding them is
  # not an op (a GPU's copies the loop's predicate to the host under the `while`'s name).
  assert max(o.runs for o in p.ops) in (7, 8), p.table()
  if p.where.startswith("/host"):
    assert not any(o.op.startswith("while") for o in p.ops), p.table()
  assert 0 < p.busy_s <= p.wall_s
  assert p.table().splitlines()[0].startswith("traced call")
  assert os.path.getsize(keep) > 0
  assert [o.kernel for o in profile.read(keep, p.wall_s).ops] == [o.kernel for o in p.ops]
