"""The CPA job (paper 002's tables 2 and 3) end to end on the testdata backbone, and
show_trace on what it wrote."""
import re
import subprocess
import sys

import pytest

from tests.helpers import jobs
from pedrl.eval import shards
from pedrl.mathtutorbench_rules import constraints
from pedrl.eval.mathtutorbench_harness import tasks

pytestmark = pytest.mark.job  # Every test here starts a job.


def test_tiny_cpa_job_prints_both_tables_and_keeps_traces(tmp_path, short_context):
  """On a clone: the tiny config reads pedrl's tiny benchmark (testdata/mathtutorbench).
  Its models with a short context (tests/conftest.py): the task prompts are cut either way."""
  r = subprocess.run(jobs.cmd("cpa", tmp_path, "--config.agents.methods=cpa,sot",
                              "--config.limit=1", f"--config.tutor.path={short_context('qwen2')}",
                              f"--config.pedrm.path={short_context('qwen2_seqcls')}"),
                     cwd=jobs.ROOT, env=jobs.env(run_bound=True),  # Hundreds of backbone calls.
                     capture_output=True, text=True, timeout=900)
  assert r.returncode == 0, r.stderr[-3000:]
  # The job's progress bar over methods × seeds, and one short line per method and seed.
  assert "cpa: methods × seeds: 100%" in r.stderr and "2/2 [" in r.stderr
  lines = [x for x in r.stderr.splitlines() if re.search(r" (cpa|sot) seed 42: ", x)]
  assert len(lines) == 2 and all(len(x) < 250 and "TraceStats" not in x for x in lines), lines
  table = (tmp_path / "tables.md").read_text()
  assert table.strip() in r.stdout
  two, three = table.split("Table 3")
  for method in ("cpa", "sot"):
    # Table 2: nine percentages; table 3: two win rates, BVR† and BVR, repair share (percent
    # or – where a seed has none), then stand-ins, calls, tokens, seconds per instance.
    row = re.search(rf"^\| {method} \|(.*)\|$", two, re.M).group(1).split("|")
    assert len(row) == 9 and all(re.fullmatch(r" \d+\.\d ", c) for c in row), row
    row = re.search(rf"^\| {method} \|(.*)\|$", three, re.M).group(1).split("|")
    assert len(row) == 9 and all(re.fullmatch(r" (\d+(\.\d+)?|–) ", c) for c in row), row
  records, _ = shards.merge(str(tmp_path / "cpa" / "seed42"))
  assert sorted(r.task for r in records) == sorted(tasks.TASKS)  # One example a task.
  for rec in records:
    assert rec.trace["variant"] == "full" and rec.trace["template"]["steps"]
    assert rec.response.strip() or rec.trace["response"].strip(), rec.task
  # The socratic task on the real backbone: every question an agent's reply holds is in the
  # one line the harness scores (its stop is a line break); SoT's reply is never cut.
  for method in ("cpa", "sot"):
    [rec] = [r for r in shards.merge(str(tmp_path / method / "seed42"))[0]
             if r.task == "socratic_questioning"]
    asked = [s for s in constraints.sentences(rec.trace["response"]) if constraints.is_question(s)]
    assert rec.prediction == [rec.response] and all(q in rec.response for q in asked)
    assert method == "cpa" or rec.response == rec.trace["response"].strip()
  shown = subprocess.run(  # A subprocess: the tool's flags are its own.
      [sys.executable, "-m", "pedrl.tools.show_trace", str(tmp_path / "cpa" / "seed42"),
       "--task=pedagogy_following", "--index=0"],
      cwd=jobs.ROOT, env=jobs.env(), capture_output=True, text=True, timeout=120)
  assert shown.returncode == 0, shown.stderr[-2000:]
  text = shown.stdout
  assert text.startswith("pedagogy_following #0 (full)") and "S_t (" in text and "reply:" in text


def test_a_run_another_shard_merged_is_read_back_and_one_still_running_is_left_out(tmp_path):
  """A sharded CPA job's table: each (method, seed) run whose shards have all finished, even
  where another shard merged it; a run with a shard still running is left out (and the
  job says the table is incomplete)."""
  import os
  import shutil
  from pedrl.experiments import cpa
  where = tmp_path / "cpa" / "seed42"  # A finished one-shard CPA run, written by pedrl.
  shutil.copytree(os.path.join(jobs.ROOT, "testdata", "records", "mathtutorbench_v1"), where)
  records, merged = shards.merge(str(where))
  run = cpa.finished_run(str(where), None)
  assert run.tasks == merged.metrics.tasks and run.tasks
  assert cpa.finished_run(str(where), merged).tasks == run.tasks
  records_file = where / "shards" / "records-00000-of-00001.jsonl"
  whole = records_file.read_text()
  records_file.write_text("".join(whole.splitlines(keepends=True)[:-1]))
  with pytest.raises(shards.ShardError, match="missing or incomplete"):
    cpa.finished_run(str(where), None)  # Finished but broken: not "still running".
  records_file.write_text(whole)
  status = where / "shards" / "status-00000-of-00001.json"
  status.write_text(status.read_text().replace('"finished": true', '"finished": false'))
  assert cpa.finished_run(str(where), None) is None

