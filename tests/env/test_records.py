"""Dialogue records: typed fields, the JSONL schema version, and files from before it.

testdata/records/dialogues_v1.jsonl was written by pedrl before the records were
typed (commit 38c588e, `pedrl.experiments.rollout` with the `tiny` and `tiny_uco`
variants): judgement, turn rewards and rewards as plain dicts, no schema field.
"""
import json
import os

import pytest

from pedrl.env import dialogue
from pedrl.env.dialogue import Dialogue, Rewards, TurnScore, Verdict

V1 = os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "records",
                  "dialogues_v1.jsonl")


def _raw():
  with open(V1, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def test_a_file_written_before_the_schema_loads_into_typed_records():
  raw, records = _raw(), dialogue.load_jsonl(V1)
  assert len(records) == len(raw) == 4
  for row, d in zip(raw, records):
    assert "schema" not in row and d.schema == dialogue.SCHEMA_VERSION
    assert d.dropped is False
    want = dict(row["rewards"])
    assert isinstance(d.rewards, Rewards) and d.rewards.total == want.pop("total")
    assert d.rewards.components == want
    assert [m.text for m in d.messages] == [m["text"] for m in row["messages"]]
    assert d.tutor_ids == row["tutor_ids"] and d.tutor_logprobs == row["tutor_logprobs"]
  judged, uco_rows = records[:2], records[2:]
  for row, d in zip(raw, judged):
    assert isinstance(d.judgement, Verdict)
    assert d.judgement.r_ped == row["judgement"]["r_ped"]
    assert d.judgement.decisions == row["judgement"]["decisions"]
    assert d.judgement.filled == row["judgement"]["filled"]
  for row, d in zip(raw[2:], uco_rows):
    assert d.judgement is None  # Not judged: v1 wrote {}.
    assert all(isinstance(t, TurnScore) for t in d.turn_rewards)
    assert [t.reward for t in d.turn_rewards] == [t["reward"] for t in row["turn_rewards"]]
    assert [t.level_logprobs for t in d.turn_rewards] == [
        tuple(t["level_logprobs"]) for t in row["turn_rewards"]]


def test_version_1_dropped_and_unscored_rows():
  row = _raw()[0]
  row["judgement"] = dict(row["judgement"], dropped=True, r_ped=None)
  row["rewards"] = {}
  d = Dialogue.from_dict(row)
  assert d.dropped is True and d.rewards is None and d.judgement.r_ped is None


def test_typed_records_round_trip_with_their_version():
  for d in dialogue.load_jsonl(V1):
    row = json.loads(d.to_json())
    assert row["schema"] == dialogue.SCHEMA_VERSION
    assert Dialogue.from_dict(row) == d


def test_an_unknown_version_is_an_error_naming_it(tmp_path):
  row = json.loads(dialogue.load_jsonl(V1)[0].to_json())
  path = tmp_path / "future.jsonl"
  path.write_text(json.dumps(dict(row, schema=99)) + "\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"future.jsonl, line 1: .*schema version 99"):
    dialogue.load_jsonl(str(path))
