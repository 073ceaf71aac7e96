"""The tutor turns of the conditions under analysis, read from their workdirs.

A condition is a name and a workdir (`--config.runs='NoThink=W1,Think NoReward=W2'`):
an evaluation (pedrl.experiments.evaluate: its merged eval_dialogues.jsonl, or
its finished shards) or a rollout (pedrl.experiments.rollout: dialogues.jsonl).
Every tutor message is one response: its visible text (what the student read)
and its thinking, as the dialogue records keep them.
"""
import dataclasses
import os

from pedrl.env import dialogue as dialogue_lib
from pedrl.eval import evaluations, records as records_lib, shards
from pedrl.eval.analysis import AnalysisError, parse_named


@dataclasses.dataclass(frozen=True)
class Response:
  condition: str
  dialogue: str  # "problem_id/sample" (evaluation) or "problem_id/rollout".
  turn: int  # Among the dialogue's tutor messages, from 0.
  visible: str
  thinking: str


def parse_runs(text: str, flag: str = "runs") -> dict:
  """{condition: workdir} of 'NAME=DIR,NAME=DIR'."""
  return parse_named(text, ",", flag, "WORKDIR")


def dialogues(workdir: str) -> list:
  """The dialogues a workdir holds; AnalysisError naming it when it holds none."""
  merged = os.path.join(workdir, "eval_dialogues.jsonl")
  rollout = os.path.join(workdir, "dialogues.jsonl")
  if not os.path.isdir(workdir):
    raise AnalysisError(f"{workdir}: no such directory")
  if os.path.exists(merged):
    return [r.dialogue for r in records_lib.load(merged)]
  try:
    # An evaluation's shards; another job's (baseline_data's) leave dialogues.jsonl.
    if shards.recorded_kind(workdir) in evaluations.TASKS:
      records, _ = shards.merge(workdir)
      if records and not isinstance(records[0], records_lib.EvalRecord):
        raise AnalysisError(f"{workdir}: an evaluation of {type(records[0]).__name__}s, not "
                            "of dialogues")
      return [r.dialogue for r in records]
  except shards.ShardError as e:
    raise AnalysisError(str(e)) from None
  if os.path.exists(rollout):
    return dialogue_lib.load_jsonl(rollout)
  raise AnalysisError(f"{workdir}: no eval_dialogues.jsonl, evaluation shards or "
                      "dialogues.jsonl (an evaluation, rollout or baseline_data workdir)")


def load(condition: str, workdir: str) -> list:
  """The condition's responses, in dialogue order; AnalysisError when it has none."""
  out = []
  for d in dialogues(workdir):
    tutor = [m for m in d.messages if m.role == dialogue_lib.TUTOR]
    out += [Response(condition, f"{d.problem_id}/{d.rollout}", i, m.text, m.thinking)
            for i, m in enumerate(tutor)]
  if not out:
    raise AnalysisError(f"{workdir} (condition {condition!r}): no tutor messages")
  return out
