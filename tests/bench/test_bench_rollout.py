"""The rollout benchmark's core at a tiny size: equal workloads and the last line's
format (never timings)."""
import re

import jax
import pytest

from pedrl.bench import rollout as bench
from pedrl.env import rollout

pytestmark = pytest.mark.job  # The benchmark's report end to end, in-process.


def test_engines_roll_out_the_same_workload(capsys):
  results = bench.report(bench.SIZES["tiny"], dialogues=2, lengths=[4], new_tokens=8, repeats=1)
  work = {name: r["work"] for name, r in results[4].items()}
  assert set(work) == set(bench.ENGINES)
  assert {(w.messages, w.sampled) for w in work.values()} == {(2 * 4, 2 * 4 * 8)}
  # Carrying the cache feeds each turn's new tokens only; re-encoding feeds whole views.
  assert work["transformers_kv"].fed < work["transformers"].fed
  assert work["pedrl"].fed < work["transformers"].fed
  last = capsys.readouterr().out.strip().splitlines()[-1]
  assert re.fullmatch(r"rollout_speedup_vs_transformers_kv=\d+\.\d\d", last)


@pytest.mark.skipif(jax.default_backend() != "cpu" or jax.device_count() < 2,
                    reason="needs 2 (simulated) CPU devices")
def test_pedrl_runs_tensor_parallel_over_cpu_devices(capsys, tmp_path):
  """--cpu_devices: both parties' weights split over 2 devices' `tensor` axis; the same
  workload as the transformers loop."""
  results = bench.report("tiny", dialogues=2, lengths=[4], new_tokens=6, repeats=1,
                         engines=("transformers_kv", "pedrl"), cpu_devices=2)
  work = {name: r["work"] for name, r in results[4].items()}
  assert {(w.messages, w.sampled) for w in work.values()} == {(2 * 4, 2 * 4 * 6)}
  assert "pedrl tensor-parallel over 2 CPU devices" in capsys.readouterr().out
  mesh = bench.cpu_mesh(2)
  assert dict(mesh.shape) == {"data": 1, "fsdp": 1, "tensor": 2}
  paths, _ = bench.save_models(str(tmp_path), bench.SIZES["tiny"])
  _, parties = bench.pedrl_runner(paths, [], rollout.RolloutSettings(), 4, mesh=mesh)
  for party in parties.values():
    q = party.params["layers_0"]["attn"]["q"]["kernel"]
    assert q.sharding.spec[-1] == "tensor" and len(q.sharding.device_set) == 2
  with pytest.raises(ValueError, match="cpu_devices=99, but jax has"):
    bench.cpu_mesh(99)
  assert bench.cpu_mesh(1) is None
  assert bench.kv_heads("tiny") == [2, 2]


def test_idle_shares_count_filler_rows_and_turns_that_ended_early():
  """Hand-computed: 4 rows for 3 live dialogues then 2 for 2; 10 and 8 decode steps
  that sampled 25 and 12 tokens for live dialogues."""
  stats = rollout.RolloutStats(calls=[rollout.Call("tutor", 3, 4, 10, 25),
                                      rollout.Call("student", 2, 2, 8, 12)])
  assert stats.idle_rows() == pytest.approx(1 - 5 / 6)
  assert stats.idle_steps() == pytest.approx(1 - 37 / (4 * 10 + 2 * 8))
  assert rollout.RolloutStats().idle_steps() == 0.0
  # A call whose finished rows left the batch counts the row-steps it computed: 25 tokens
  # sampled in 30 (4 rows for 5 steps, then 2 rows for 5), not 4 x 10.
  shrunk = rollout.RolloutStats(calls=[rollout.Call("tutor", 3, 4, 10, 25, row_steps=30)])
  assert shrunk.idle_steps() == pytest.approx(1 - 25 / 30)


def test_a_ragged_workload_runs_pedrl_alone_and_reports_its_idle_shares(capsys):
  """Stops end turns at random lengths: rows wait for the call's longest, so some decode
  row-steps sample nothing; no speedup line (the engines' draws differ)."""
  results = bench.report("tiny", dialogues=2, lengths=[4], new_tokens=12, repeats=1,
                         group_size=2, stop_rate=0.1)
  assert set(results[4]) == {"pedrl"}
  work = results[4]["pedrl"]["work"]
  assert work.messages == 4 * 4 and work.sampled < 4 * 4 * 12
  assert work.idle_rows == 0.0 and 0.0 < work.idle_steps < 1.0
  out = capsys.readouterr().out
  row = next(line for line in out.splitlines() if re.match(r"pedrl +4 ", line))
  assert row.split()[-2:] == ["0.0%", f"{work.idle_steps:.1%}"]
  assert "rollout_speedup" not in out


def test_engines_leaves_out_the_transformers_loop_without_a_cache(capsys):
  results = bench.report("tiny", dialogues=2, lengths=[2], new_tokens=4, repeats=1,
                         engines=("transformers_kv", "pedrl"))
  assert set(results[2]) == {"transformers_kv", "pedrl"}
  out = capsys.readouterr().out
  assert not re.search(r"^transformers ", out, re.M)
  assert re.search(r"^rollout_speedup_vs_transformers_kv=\d+\.\d\d$", out, re.M)


def test_a_checkpoint_runs_as_both_sides_and_reports_its_compile_seconds(capsys, testdata):
  """--model: a checkpoint directory in place of the random models; the table gives the
  seconds pedrl's warm-up spent compiling its programs (or reading them)."""
  results = bench.report(None, dialogues=1, lengths=[2], new_tokens=3, repeats=1,
                         engines=("pedrl",), model=testdata("qwen2"))
  compiled = results[2]["pedrl"]["compiled"]
  assert len(compiled) > 0 and results[2]["pedrl"]["work"].messages == 2
  out = capsys.readouterr().out
  assert "tutor: qwen2 (qwen2), 2 layers" in out and "unrolled layers" in out
  header = next(line for line in out.splitlines() if line.startswith("engine "))
  row = next(line for line in out.splitlines() if re.match(r"pedrl +2 ", line))
  assert float(row.split()[header.split().index("compile_s")]) == pytest.approx(
      sum(compiled.seconds), abs=0.01)
