"""pedrl.bench.gpu_summary: launch/gpu_bench.sh's results file read into the table of
figures against goals (a results file written by hand in the script's format)."""
from pedrl.bench import gpu_summary

RESULTS = """pedrl GPU benchmark, 2026-11-28T220000Z
commit: abc1234
NVIDIA H200, 143771 MiB, 580.1
jax 0.11.2, jaxlib 0.11.2

=== sampling (limit 100s): python -m pedrl.bench.sampling --device_profile=gpu
 batch  slots  tokens/s
decode_hbm_utilization_batch1=0.812
decode_hbm_utilization_batch16=0.700
=== sampling: ok in 61 s

=== rollout_cold (limit 70s): python -m pedrl.bench.rollout
setup: pedrl's parties loaded at 3.0 s
=== rollout_cold: TIMED OUT in 70 s

=== rollout_warm (limit 30s): python -m pedrl.bench.rollout
rollout_warmup_s=1.50
rollout_compile_s=0.90
rollout_speedup_vs_transformers_kv=4.20
=== rollout_warm: ok in 22 s

=== train_step_1.5b (limit 80s): python -m pedrl.bench.train_step
train_step_mfu=0.431
=== train_step_1.5b: ok in 55 s

=== tests (limit 120s): pytest
========== 80 passed, 3 skipped in 97.12s (0:01:37) ==========
=== tests: ok in 101 s

=== summary (the benchmarks' last lines, in step order)
decode_hbm_utilization_batch1=0.100
"""


def rows():
  table = gpu_summary.table(gpu_summary.Results.read(RESULTS))
  return {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:]
          for line in table.splitlines() if line.startswith("| ") and "---" not in line}, table


def test_each_figure_is_judged_against_its_goal():
  got, table = rows()
  assert table.splitlines()[0] == "    pedrl GPU benchmark, 2026-11-28T220000Z"
  # 81% >= 80%: met; 70% < 75%: not; the summary's repeated lines are not read again.
  assert got["7B bf16 decode, batch 1, HBM bandwidth"][:3] == ["≥ 80%", "**81%**", "yes"]
  assert got["7B bf16 decode, batch 16, HBM bandwidth"][:3] == ["≥ 75%", "**70%**", "no"]
  assert got["rollout warm-up, warm caches (bench shape)"][:3] == ["≤ 2 s", "**1.50 s**", "yes"]
  assert got["rollout speed against transformers_kv, bench shape"][:3] == ["≥ 5×", "**4.20×**",
                                                                          "no"]
  assert got["GRPO update, Qwen2.5-1.5B, MFU"][:3] == ["≥ 40%", "**43%**", "yes"]


def test_a_step_that_timed_out_or_did_not_run_says_so():
  got, table = rows()
  cold = got["rollout warm-up, cold caches (bench shape)"]
  assert cold[1:3] == ["no figure", "no"] and cold[3].startswith("rollout_cold (TIMED OUT, 70 s)")
  assert got["the same, one matmul for q, k and v, batch 1"][1] == "not run"
  assert got["GPU test subset"][1:3] == ["80 passed, 3 skipped in 97.12s (0:01:37)", "yes"]
  assert table.rstrip().endswith("Steps: 5 ran in 309 s (sampling 61 s, rollout_cold 70 s, "
                                 "rollout_warm 22 s, train_step_1.5b 55 s, tests 101 s).")


def test_a_missing_results_file_is_one_line(tmp_path, capsys):
  assert gpu_summary.main(["gpu_summary", str(tmp_path / "none.txt")]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: cannot read the results file ") and err.count("\n") == 1
