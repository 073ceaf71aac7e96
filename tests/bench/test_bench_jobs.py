"""pedrl.bench.jobs times the README's Jobs table: the same commands, in its order."""
import os
import re

from pedrl.bench import jobs as bench_jobs
from tests.helpers.jobs import ROOT


def _table_commands() -> list[str]:
  """Every `python -m pedrl…` command in the README's Jobs table rows, in order."""
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    text = f.read()
  table = text[text.index("## Jobs"):].split("\n## ", 1)[0]
  return [c for row in table.splitlines() if row.startswith("| ")
          for c in re.findall(r"`(python -m pedrl[^`]*)`", row)]


def test_the_bench_times_the_readmes_commands():
  table = _table_commands()
  assert len(table) >= 15, table
  timed = [c for c in table if not c.split()[2].startswith(bench_jobs.NOT_TIMED)]
  assert [j.command for j in bench_jobs.JOBS if j.in_table] == timed


def test_a_job_runs_after_the_jobs_it_reads_and_writes_under_its_root():
  names = [j.name for j in bench_jobs.selected(["analyze", "sft"])]
  assert names == ["baseline_data", "sft", "evaluate", "evaluate_b", "analyze"]
  cmd = bench_jobs.argv(bench_jobs.BY_NAME["sft"], "/r", "warm")
  assert "--workdir=/r/warm/sft" in cmd and "--config.data.workdir=/r/cold/baselines" in cmd
  assert bench_jobs.argv(bench_jobs.BY_NAME["report"], "/r", "cold")[-1] == "/r/cold/eval"
