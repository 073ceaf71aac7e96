"""The rollout benchmark's core at a tiny size: equal workloads and the last line's
format (never timings)."""
import re

import pytest

from pedrl.bench import rollout as bench

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
