"""Model FLOPs, MFU and memory formulas against hand-computed values; the train-step
benchmark and the memory plan run at tiny shapes (never timed)."""
import re
import subprocess
import sys

import pytest

from tests.helpers import jobs, reference
from pedrl import models
from pedrl.bench import roofline, train_step
from pedrl.models import architectures, costs
from pedrl.rl import memory
from pedrl.tools import plan

# Qwen2.5-7B (config.json on the Hugging Face hub): hidden E, MLP F, L layers, H query and
# KV heads of Q dimensions, vocabulary V, untied head.
E, F, L, H, KV, Q, V = 3584, 18944, 28, 28, 4, 128, 152064


@pytest.mark.parametrize("name", ["qwen2", "qwen2_tied", "qwen3", "llama3"])
def test_parameter_count_is_transformers(testdata, name):
  cfg = models.from_hf(testdata(name))
  assert costs.param_count(cfg) == reference.load(testdata(name)).num_parameters()


def test_model_flops_and_mfu_of_qwen2_5_7b_by_hand():
  cfg = architectures.get("qwen2.5-7b").config()
  layer = E * Q * (2 * H + 2 * KV) + 3 * E * F  # q, o (H heads), k, v (KV heads), gate, up, down.
  assert layer == 29_360_128 + 203_685_888
  n = L * layer + E * V  # The LM head; the input embedding is a lookup.
  assert costs.matmul_params(cfg) == n == 7_070_285_824
  assert costs.param_count(cfg) == 7_615_616_512  # "7.61B" on the model card.
  # PaLM's 6N + 12·L·H·Q·T at T = 4096, and a third of it forward.
  assert costs.train_flops_per_token(cfg, 4096) == 6 * n + 12 * L * H * Q * 4096 == 47_354_216_448
  assert costs.forward_flops_per_token(cfg, 4096) == 47_354_216_448 // 3
  # 16 rows of 4096 tokens trained in 10 s on an H100 SXM (989 dense bf16 TFLOP/s): 31.4%.
  peak = roofline.by_kind(roofline.PEAK_FLOPS, "NVIDIA H100 80GB HBM3")["bfloat16"]
  p = train_step.Pass("update", 10.0, 16 * 4096, 16 * 4096 * 47_354_216_448, 0, 0, 1, None)
  assert p.mfu(peak) == pytest.approx(16 * 4096 * 47_354_216_448 / 10.0 / 989e12)
  assert round(p.mfu(peak), 4) == 0.3138
  assert roofline.by_kind(roofline.PEAK_FLOPS, "NVIDIA H100 PCIe")["bfloat16"] == 756e12
  assert p.mfu(None) is None


def test_memory_of_paper_003_on_four_devices_by_hand():
  """Qwen2.5-7B weights in float32 over fsdp=4: matrices and the embedding split four ways,
  biases and norm scales replicated; Llama-3.1-8B's KV cache in bfloat16."""
  mesh = memory.MeshShape(fsdp=4)
  cfg = architectures.get("qwen2.5-7b").config()
  replicated = L * ((H + 2 * KV) * Q + 2 * E) + E  # q/k/v biases, two norms a layer, the last.
  split = costs.param_count(cfg) - replicated
  assert memory.param_bytes(cfg, "float32", mesh) == 4 * (split // 4 + replicated) == 7_616_616_448
  llama = architectures.get("llama-3.1-8b").config()
  per_token = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bfloat16.
  assert memory.kv_cache_bytes(llama, 128, 10496, "bfloat16", mesh) == 32 * 10496 * per_token
  # The tiny shape's update activations, 2 rows of 64 tokens in bfloat16: per layer and token
  # 2·(4E + 2(H + KV)Q + 3F) + 12·H·T bytes, and 3 float32 [T, V] buffers per row.
  tiny = architectures.get("tiny").config()
  layer = 2 * (4 * 64 + 2 * (4 + 2) * 16 + 3 * 176) + 12 * 4 * 64
  assert layer == 5024
  logits = 3 * 2 * 64 * 1024 * 4
  assert memory.activation_bytes(tiny, 2, 64, "bfloat16", remat=False) == 2 * 128 * layer + logits
  assert memory.activation_bytes(tiny, 2, 64, "bfloat16", remat=True) == (
      2 * 128 * 64 * 2 + 128 * layer + logits)
  # A fused attention keeps 4·H bytes of float32 softmax statistics per token instead of
  # 12·H·T; its scoring pass holds no [T, T] probabilities.
  fused = 2 * (4 * 64 + 2 * (4 + 2) * 16 + 3 * 176) + 4 * 4
  assert memory.activation_bytes(tiny, 2, 64, "bfloat16", remat=False, fused=True) == (
      2 * 128 * fused + logits)
  assert memory.scoring_bytes(tiny, 2, 64) == 2 * 64 * (2 * 1024 * 4 + 4 * 4 * 64)
  assert memory.scoring_bytes(tiny, 2, 64, fused=True) == 2 * 64 * 2 * 1024 * 4


def test_fsdp_gathered_weights_by_hand():
  """Over fsdp=8 a device gathers the vocabulary matrix and one layer whole: the tiny
  shape's V·E = 1024·64 and a layer's q, k, v, o (64·64 + 2·64·32 + 64·64, q/k/v biases
  64 + 2·32), gate, up, down (3·64·176) and two norms (2·64), float32; none on one device."""
  tiny = architectures.get("tiny").config()
  layer = 64 * 64 + 2 * 64 * 32 + 64 * 64 + (64 + 2 * 32) + 3 * 64 * 176 + 2 * 64
  assert memory.gathered_bytes(tiny, "float32", memory.MeshShape(fsdp=8)) == (
      1024 * 64 + layer) * 4
  assert memory.gathered_bytes(tiny, "float32", memory.MeshShape()) == 0
  p = memory.plan(tiny, tiny, memory.MeshShape(fsdp=8), memory.RunShape(), float("inf"))
  assert p.phases["update"] == sum(p.parts[k] for k in (
      "tutor params", "AdamW moments", "reference", "student params", "gradients",
      "activations", "gathered weights"))


def test_a_plan_says_what_fits(capsys):
  tutor, student = (architectures.get(n).config() for n in ("qwen2.5-7b", "llama-3.1-8b"))
  run = memory.RunShape()
  p = memory.plan(tutor, student, memory.MeshShape(fsdp=8), run, 141e9 * 0.9)
  assert p.phases["rollout"] == sum(p.parts[k] for k in (
      "tutor params", "AdamW moments", "reference", "student params", "tutor KV cache",
      "student KV cache", "window copies"))
  # The caches as the sampler allocates them: 10,496 slots bucketed to 11,264; a call's
  # widest window short of the whole cache is 10,240 slots, held twice.
  assert run.cache_slots == 10496
  mesh = memory.MeshShape(fsdp=8)
  assert p.parts["tutor KV cache"] == memory.kv_cache_bytes(tutor, 128, 11264, "float32", mesh)
  biggest = max(p.parts["tutor KV cache"], p.parts["student KV cache"])
  assert p.parts["window copies"] == 2 * biggest * 10240 // 11264
  assert p.peak == ("update", p.phases["update"]) and not p.fits  # 8192-token attention.
  lean = memory.plan(tutor, student, memory.MeshShape(fsdp=8), plan.lean(run, 8), 141e9 * 0.9)
  assert lean.fits
  with pytest.raises(ValueError, match="has 8 devices, --devices=4"):
    plan.mesh_shape(4, ["2", "4", "1"])
  with pytest.raises(ValueError, match="--gpu=B200: unknown"):
    plan.device_bytes("B200", 0, 0.9)


@pytest.mark.job
def test_the_plan_command(tmp_path):
  out = subprocess.run([sys.executable, "-m", "pedrl.tools.plan", "--tutor=qwen2.5-0.5b",
                        "--student=qwen2.5-0.5b", "--devices=1", "--gpu=H100", "--cache_slots=4096",
                        "--seq_len=2048", "--micro_batch=1", "--remat"],
                       capture_output=True, text=True, env=jobs.env(), cwd=tmp_path, check=True)
  assert re.search(r"peak: \w+, [\d.]+ of 67\.1 GiB usable per device", out.stdout)
  assert out.stdout.strip().splitlines()[-1] == "fits=yes"
  bad = subprocess.run([sys.executable, "-m", "pedrl.tools.plan", "--tutor=qwen9"],
                       capture_output=True, text=True, env=jobs.env(), cwd=tmp_path)
  assert bad.returncode != 0 and "unknown architecture 'qwen9'" in bad.stderr


@pytest.mark.job
@pytest.mark.parametrize("attention", ["einsum", "xla"])
def test_the_train_step_benchmark_at_tiny_within_its_memory_estimate(tmp_path, attention):
  """One update and its scoring pass on CPU: each made one program (none for the timed
  calls), and pedrl.rl.memory's estimate is within 25% of XLA's accounting, with the
  einsum attention and with jax.nn.dot_product_attention's XLA form (the fused path's
  row packing; [T, T] probabilities held as by the einsum)."""
  out = subprocess.run([sys.executable, "-m", "pedrl.bench.train_step", "--size=tiny",
                        "--seq_len=128", "--rows=4", "--micro_batch=2", "--repeats=2",
                        "--compilation_cache=off", f"--full_attention={attention}"],
                       capture_output=True, text=True, env=jobs.env(), cwd=tmp_path, check=True)
  lines = out.stdout.strip().splitlines()
  assert lines[-2:] == ["step_mfu=n/a", "train_step_mfu=n/a"]  # No datasheet peak for a CPU.
  rows = {}
  for name in ("score", "update"):
    row = rows[name] = next(line.split() for line in lines if line.startswith(name + " "))
    xla, estimate, programs = float(row[5]), float(row[6]), int(row[8])
    assert programs == 1, row
    assert 0.75 < estimate / xla < 1.25, row
  # The default step (rl.old_logprobs=trainer) scores twice: reference and old policy.
  # And μ = 2 updates (rl.passes, paper 003).
  assert lines[-3].startswith("step: 2 x score + 2 x update (rl.old_logprobs=trainer, "
                              "rl.passes=2)")
  step = next(line.split() for line in lines if line.startswith("step "))
  assert float(step[1]) == pytest.approx(
      2 * float(rows["score"][1]) + 2 * float(rows["update"][1]), abs=3e-3)
  assert float(step[5]) == max(float(rows["score"][5]), float(rows["update"][5]))


@pytest.mark.job
def test_the_train_step_benchmark_on_a_mesh_gives_memory_per_device(tmp_path):
  """16 rows over fsdp=8 simulated devices: XLA's per-device accounting against the plan's
  for that mesh (2 rows a device, the weights split, a layer and the vocabulary gathered)."""
  env = dict(jobs.env(), XLA_FLAGS=jobs.xla_flags(8))
  out = subprocess.run([sys.executable, "-m", "pedrl.bench.train_step", "--size=tiny",
                        "--seq_len=128", "--rows=16", "--micro_batch=16", "--repeats=1",
                        "--mesh=1,8,1", "--compilation_cache=off"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
  assert "mesh {'data': 1, 'fsdp': 8, 'tensor': 1}, memory per device" in out.stdout
  for name in ("score", "update"):
    row = next(line.split() for line in out.stdout.splitlines() if line.startswith(name + " "))
    assert 0.6 < float(row[6]) / float(row[5]) < 1.5, row
  bad = subprocess.run([sys.executable, "-m", "pedrl.bench.train_step", "--mesh=1,4,1"],
                       capture_output=True, text=True, env=jobs.env(), cwd=tmp_path)
  assert bad.returncode != 0 and "--mesh=1,4,1: mesh" in bad.stderr, bad.stderr[-500:]


def test_a_shape_over_the_devices_memory_is_refused_before_compiling(monkeypatch):
  """The plan's bytes against a device reporting a 1 GiB limit: refused in one line that
  names the shape and the way out; a device reporting no limit (CPU) passes."""
  from absl import app
  from pedrl.bench import train_step

  class Device:
    def memory_stats(self):
      return {"bytes_limit": 2**30}
  monkeypatch.setattr(train_step.jax, "local_devices", lambda: [Device()])
  with pytest.raises(app.UsageError, match=r"qwen2\.5-0\.5b at 2048 tokens x micro-batch 4 "
                     r"\(remat False\) needs about 2\.0 GiB .* can allocate 1\.0 GiB: try a "
                     r"smaller --micro_batch or --remat"):
    train_step.check_fits("qwen2.5-0.5b", 2 * 2**30, 2048, 4, False)
  train_step.check_fits("qwen2.5-0.5b", 2**30 - 1, 2048, 4, True)
  monkeypatch.setattr(train_step.jax, "local_devices", lambda: [type("Cpu", (), {
      "memory_stats": lambda self: None})()])
  train_step.check_fits("qwen2.5-0.5b", 2**50, 2048, 4, False)
