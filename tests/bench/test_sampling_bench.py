"""The GPU profile of the sampling benchmark runs at the tiny shape on CPU (never timed),
with either q/k/v matmul; its options are refused where they would be ignored."""
import re
import subprocess
import sys

import pytest

from tests.helpers import jobs


def _bench(tmp_path, *flags):
  return subprocess.run([sys.executable, "-m", "pedrl.bench.sampling", *flags],
                        capture_output=True, text=True, env=jobs.env(), cwd=tmp_path)


@pytest.mark.job
def test_the_gpu_profile_runs_at_the_tiny_shape_with_fused_qkv_matmuls(tmp_path):
  out = _bench(tmp_path, "--device_profile=gpu", "--gpu_size=tiny", "--new_tokens=4",
               "--repeats=1", "--gpu_cache_slots=0", "--qkv_matmul=fused",
               "--compilation_cache=off")
  assert out.returncode == 0, out.stderr[-2000:]
  assert "tiny shape (2 layers), bf16, fused q/k/v matmuls" in out.stdout
  for batch in (1, 16):  # Its value is timing (4 tiny steps: noise, even below zero), not checked.
    assert re.search(rf"^decode_hbm_utilization_batch{batch}=-?\d+\.\d+$", out.stdout, re.M)


@pytest.mark.job
@pytest.mark.parametrize("flag", ["--qkv_matmul=fused", "--profile_top=5"])
def test_gpu_profile_options_are_refused_in_the_cpu_profile(tmp_path, flag):
  out = _bench(tmp_path, flag)
  assert out.returncode != 0 and f"{flag.split('=')[0]} " in out.stderr, out.stderr[-500:]
