"""Workdirs written before the typed results still load, merge and resume.

The files under testdata/records were written by earlier pedrl, not by hand:
  dialogues_v2.jsonl   `pedrl.experiments.rollout` `tiny` at commit 0288765 (schema 2),
                       its first two rows
  dialogues_v3.jsonl   the same job at commit a334e91 (schema 3)
  eval_v1/             `pedrl.experiments.evaluate` `tiny`, 2 shards, at a334e91
  reasoning_v1/        the same job's `protocol=reasoning,tiny`, at a334e91
  mathtutorbench_v1/   `pedrl.experiments.cpa` `tiny` (cpa, seed 42, limit 1), at a334e91
Their status files record the commit and command (provenance). The protocols
then were plain dicts without a schema; the metrics.json beside the shards is
what that pedrl's merge computed from them.
"""
import json
import math
import os
import shutil

import pytest

from pedrl.env import dialogue
from pedrl.env.dialogue import Rewards, Verdict
from pedrl.eval import evaluations, protocol as protocol_lib, records as records_lib, shards
from pedrl.eval.protocol import EvalProtocol

RECORDS = os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "records")


@pytest.mark.parametrize("version", [2, 3])
def test_dialogue_files_of_schemas_2_and_3_load_typed(version):
  path = os.path.join(RECORDS, f"dialogues_v{version}.jsonl")
  with open(path, encoding="utf-8") as f:
    raw = [json.loads(line) for line in f]
  loaded = dialogue.load_jsonl(path)
  assert len(loaded) == len(raw) == 2
  for row, d in zip(raw, loaded):
    assert row["schema"] == version and d.schema == dialogue.SCHEMA_VERSION
    assert isinstance(d.judgement, Verdict) and isinstance(d.rewards, Rewards)
    assert d.judgement.decisions == row["judgement"]["decisions"]
    assert d.rewards.total == row["rewards"]["total"]
    assert [m.text for m in d.messages] == [m["text"] for m in row["messages"]]
    assert dialogue.Dialogue.from_dict(json.loads(d.to_json())) == d


def _same(a, b, where=""):
  """JSON values equal, floats to rounding (the bootstrap sums in another order)."""
  if isinstance(a, dict):
    assert set(a) == set(b), (where, set(a) ^ set(b))
    for k in a:
      _same(a[k], b[k], f"{where}/{k}")
  elif isinstance(a, list):
    assert len(a) == len(b), where
    for i, (x, y) in enumerate(zip(a, b)):
      _same(x, y, f"{where}[{i}]")
  elif isinstance(a, float) and isinstance(b, float):
    assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (where, a, b)
  else:
    assert a == b, (where, a, b)


@pytest.mark.parametrize("name,kind", [("eval_v1", "tutoring"), ("reasoning_v1", "reasoning"),
                                       ("mathtutorbench_v1", "mathtutorbench")])
def test_evaluation_shards_written_before_the_protocol_type_merge_to_their_metrics(
    tmp_path, name, kind):
  workdir = str(tmp_path / name)
  shutil.copytree(os.path.join(RECORDS, name), workdir)
  with open(os.path.join(workdir, "metrics.json")) as f:
    before = json.load(f)
  old = before.pop("protocol")
  assert "schema" not in old and protocol_lib.kind_of(old) == kind

  protocol = shards.recorded_protocol(workdir)
  assert protocol.kind == kind and protocol.schema == protocol_lib.SCHEMA_VERSION
  assert protocol.seed == old["seed"] and protocol.num_shards == old["num_shards"]
  # A resumed shard builds today's protocol (with its schema): the old shards agree with it.
  shards.check_protocol(workdir, EvalProtocol.from_dict(protocol.to_dict()))

  # The evaluation the protocol's kind names computes them, typed; JSON only in the file.
  merged = shards.write_merged(workdir)
  assert type(merged.metrics) is {"tutoring": evaluations.TutoringMetrics,
                                  "reasoning": evaluations.ReasoningMetrics,
                                  "mathtutorbench": evaluations.BenchMetrics}[kind]
  with open(os.path.join(workdir, "metrics.json")) as f:
    after = json.load(f)
  assert set(after) == set(merged.to_json()) | {"config", "protocol"}
  assert after.pop("protocol") == {**old, "schema": protocol_lib.SCHEMA_VERSION}
  _same(before, after)
  # Their statuses list their batches but not how many records each holds: a batch with
  # none is still refused.
  lost = sorted(os.listdir(os.path.join(workdir, "shards")))
  os.remove(os.path.join(workdir, "shards", next(n for n in lost if n.startswith("records-"))))
  with pytest.raises(shards.ShardError, match="missing or incomplete"):
    shards.merge(workdir)


def test_an_old_agent_trace_reads_as_a_trace():
  from pedrl.agents.cpa.state import StepRecord, Template, Trace
  path = os.path.join(RECORDS, "mathtutorbench_v1", "shards", "records-00000-of-00001.jsonl")
  recs = records_lib.load(path, records_lib.BenchRecord)
  assert recs and all(r.trace for r in recs)
  for r in recs:
    t = Trace.from_dict(r.trace)
    assert t.task == r.task and t.variant == "full" and isinstance(t.template, Template)
    assert all(isinstance(s, StepRecord) for s in t.steps)
    assert t.to_dict() == r.trace  # Nothing lost on the way.
  with pytest.raises(ValueError, match="not an agent trace"):
    Trace.from_dict({"repairs": 1})


def test_a_protocol_reads_its_sections_as_settings_and_refuses_what_it_cannot_read():
  p = EvalProtocol.from_dict({"seed": 1, "num_shards": 2, "eval": {"num_shards": 2}})
  assert p.kind == "tutoring" and p.schema == 1  # What files before both fields meant.
  e = p.section("eval", protocol_lib.EvalSettings, {"pedrm_unscored": "drop"})
  assert (e.num_shards, e.pedrm_unscored, e.confidence) == (2, "drop", 0.95)
  with pytest.raises(ValueError, match="protocol schema 2; this pedrl reads 1"):
    EvalProtocol.from_dict({"schema": 2, "seed": 1, "num_shards": 1})
  with pytest.raises(ValueError, match="a protocol without 'seed'"):
    EvalProtocol.from_dict({"num_shards": 1})
  with pytest.raises(ValueError, match="protocol section 'eval' is no EvalSettings"):
    EvalProtocol.from_dict({"seed": 1, "num_shards": 1, "eval": {"confidence": 2.0}}).section(
        "eval", protocol_lib.EvalSettings)
  with pytest.raises(ValueError, match=r"clash with its fields"):
    EvalProtocol("tutoring", 1, 1, sections={"seed": 2})
