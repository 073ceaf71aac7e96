"""The record of one rollout, and its JSONL form.

A `Dialogue` is pedrl's one mutable record between stages: the rollout builds it
and each later stage fills in its own typed fields, in this order, and no stage
writes another's (tests/project/test_boundaries.py checks every assignment in pedrl/):

  stage          module                      fields it writes
  -------------  --------------------------  -------------------------------------------
  rollout        pedrl/env/rollout.py        every field it builds the record with
                                             (problem_id ... student_name), then
                                             student_system, messages, end_reason,
                                             tutor_ids, tutor_mask, tutor_logprobs,
                                             student_tokens
  training step  pedrl/rl/trainer.py         step
  solving        pedrl/env/solving.py        post_answers, post_correct, r_sol
                 pedrl/experiments/rollout.py  pre_solve_rate (solving.pre_dialogue's)
  rewards        pedrl/rewards/pipeline.py   judgement, dropped, turn_rewards
                 pedrl/rewards/assemble.py   rewards

Why filled in place rather than returned anew by each stage: a batch of dialogues
holds the tutor's token lists (thousands of ids per dialogue), every stage reads
most of the record, and the rewards drop and skip dialogues within a batch; one
record per dialogue, written field by field by its owner, keeps the batch in one
list that every stage and the JSONL files share. `dropped` is the one place that
says a judge policy took the dialogue out of the batch: it then has no solve
attempts, rewards or loss.

JSONL rows carry `schema` (SCHEMA_VERSION). Rows without one were written
before the records were typed (version 1: judgement, turn rewards and rewards
as plain dicts, "dropped" inside the judgement) and are converted on load.

`tutor_ids` is the tutor's whole side of the dialogue as it was fed to the
tutor: its chat-template prompt, each of its sampled turns, and between them
the template tokens carrying the student's messages. `tutor_mask` is 1 exactly
on the tokens the tutor sampled, each turn's stop token included (the policy
chose to stop there); template role headers, closings, forced `<think>`
prefixes and everything from the student are 0. GRPO trains on the 1s. Where the
tutor's view leaves its earlier thinking out (`rollout.tutor_history_thinking`), the
tutor's tokens start again at each turn after a thinking one: `tutor_ids` is then its
last view, encoded whole, and its last turn.
"""
from collections.abc import Iterable, Sequence
import dataclasses
import json

from pedrl import files

# 3: Dialogue.step and Verdict.reasons (version-2 rows read as they are, without them).
SCHEMA_VERSION = 3


class RecordError(ValueError):
  """A JSONL file of records or metric rows cannot be read (names the file and line)."""


TUTOR, STUDENT = "tutor", "student"
GUIDED, ATTEMPTED = "guided", "attempted"  # Who speaks first (paper 003 section 5.1).


@dataclasses.dataclass
class Message:
  role: str  # TUTOR or STUDENT.
  text: str  # What the other side sees: no thinking, no end marker.
  thinking: str = ""
  raw: str = ""  # As sampled (the tutor's view of its own turns).
  num_tokens: int = 0  # Sampled tokens, stop token included.
  finish_reason: str = "stop"  # "stop", "length" (cut at max_new_tokens).
  # [start, end) in tutor_ids: a tutor message's sampled tokens; for a student
  # message, the tokens that brought it to the tutor (template tokens included;
  # (0, 0) if the dialogue ended before the tutor read it, or if the tutor's view was
  # encoded again after it: rollout.tutor_history_thinking left earlier thinking out).
  span: tuple = (0, 0)


@dataclasses.dataclass
class Verdict:
  """The judges' answers on one dialogue: training's (pedrl.rewards.judging), where a
  policy fills in what never parsed, and an evaluation's (pedrl.eval.judges), where it
  stays None and nothing is filled in."""
  decisions: dict[str, list[bool | None]]  # Judge name -> per sample (decision judges).
  scores: dict[str, list[float | None]]  # Judge name -> per sample (score judges).
  r_ped: float | None = None  # Π of every decision (paper 003 eq. 3).
  r_think: float | None = None  # Mean score of the thinking judge, if any (paper 001).
  # Judge name -> [bool] parallel to its decisions/scores: True where the on_failure
  # policy filled the value in (no judge said it), so a record tells real values apart.
  filled: dict = dataclasses.field(default_factory=dict)
  # Judge name -> [str | None] parallel to its values: the reason the judge's reply gave
  # (its "reasoning" field), None where it gave none or the policy filled the value in.
  reasons: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class TurnScore:
  """UCO's reward for one tutor turn (paper 000 eqs. 3-9; pedrl.rewards.uco_turns)."""
  message: int  # Index of the tutor message in Dialogue.messages.
  potential: float
  semantic: float | None  # None: no student message followed.
  progress: float
  zpd_level: int
  level: int
  scaffold: float
  reward: float
  level_logprobs: tuple = ()
  oracle_fallback: bool = False  # Candidates and hints are the reference oracle's stand-ins.
  level_fallback: bool = False  # The LLM classifier failed: `level` is the nearest hint's.


@dataclasses.dataclass
class Rewards:
  """A dialogue's reward: each configured component's unweighted value, and the
  weighted total (with the hard penalty, if any) that GRPO uses."""
  components: dict  # Component name -> value.
  total: float


@dataclasses.dataclass
class Dialogue:
  problem_id: str
  problem: str
  answer: str
  scenario: str  # GUIDED or ATTEMPTED.
  rollout: int  # Index among the G rollouts of the problem.
  uid: int = 0  # Seeds the dialogue's samples: problem's number in its split * G + rollout.
  step: int | None = None  # Training: the GRPO step that sampled and trained on it.
  persona: str = ""
  student_name: str = ""  # The name the prompts give the student; "": none.
  # The student's system prompt as fed (its persona included): solve attempts and UCO's
  # scoring rebuild the student's view from it. Records of schema 1 do not have it.
  student_system: str = ""
  messages: list = dataclasses.field(default_factory=list)
  end_reason: str = ""  # "end_of_conversation", "max_turns", "token_limit".
  tutor_ids: list = dataclasses.field(default_factory=list)
  tutor_mask: list = dataclasses.field(default_factory=list)
  tutor_logprobs: list = dataclasses.field(default_factory=list)  # Sampling log-probs; 0 off-mask.
  student_tokens: int = 0  # Length of the student's view.
  # Filled by the solve attempts (pedrl.env.solving).
  post_answers: list = dataclasses.field(default_factory=list)
  post_correct: list = dataclasses.field(default_factory=list)
  r_sol: float | None = None
  pre_solve_rate: float | None = None
  # Filled by the rewards (pedrl.rewards).
  dropped: bool = False  # A judge policy took it out: no solve attempts, rewards or loss.
  judgement: Verdict | None = None
  turn_rewards: list = dataclasses.field(default_factory=list)  # [TurnScore], UCO only.
  rewards: Rewards | None = None  # None until assigned, and for dropped dialogues.
  schema: int = SCHEMA_VERSION

  @property
  def turns(self) -> int:
    return len(self.messages)

  @property
  def truncated(self) -> bool:
    """Some tutor turn hit its token limit."""
    return any(m.role == TUTOR and m.finish_reason == "length" for m in self.messages)

  @property
  def tutor_turn_spans(self) -> list[tuple]:
    """[start, end) of each tutor turn's sampled tokens in tutor_ids (per-turn rewards)."""
    return [m.span for m in self.messages if m.role == TUTOR]

  def student_system_prompt(self) -> str:
    if not self.student_system:
      raise ValueError(f"dialogue {self.uid} ({self.problem_id}) has no student system prompt "
                       "(records converted from schema 1 lack it); run its rollout again")
    return self.student_system

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

  @classmethod
  def from_dict(cls, row: dict) -> "Dialogue":
    row = dict(row)
    version = row.get("schema", 1)
    if version == 1:
      row = _from_version_1(row)
    elif version not in (2, SCHEMA_VERSION):
      raise ValueError(f"schema version {version!r}: this pedrl reads versions 1 to "
                       f"{SCHEMA_VERSION}; use the pedrl that wrote it")
    row["schema"] = SCHEMA_VERSION
    row["messages"] = [Message(**dict(m, span=tuple(m["span"]))) for m in row["messages"]]
    if row.get("judgement") is not None:
      row["judgement"] = Verdict(**row["judgement"])
    row["turn_rewards"] = [TurnScore(**dict(t, level_logprobs=tuple(t.get("level_logprobs", ()))))
                           for t in row.get("turn_rewards", ())]
    if row.get("rewards") is not None:
      row["rewards"] = Rewards(**row["rewards"])
    return cls(**row)


def _from_version_1(row: dict) -> dict:
  """A row written before the records were typed: judgement {} meant not judged and
  carried "dropped"; rewards {} meant none, else the components and "total"."""
  judgement = dict(row.get("judgement") or {})
  dropped = bool(judgement.pop("dropped", False))
  rewards = dict(row.get("rewards") or {})
  total = rewards.pop("total", None)
  return dict(row, schema=SCHEMA_VERSION, dropped=dropped, judgement=judgement or None,
              rewards=None if total is None else {"components": rewards, "total": total})


SPEAKER_NAMES = {TUTOR: "Teacher", STUDENT: "Student"}


TRANSCRIPT_STYLES = ("paragraphs", "lines")


def transcript(messages: Sequence[Message], style: str = "paragraphs") -> str:
  """The visible dialogue as prompts show it: "Teacher: …" / "Student: …" paragraphs, or
  as "- Teacher: …" items, a blank line between them ("lines": how paper 003's reference
  judge prompts list the conversation, prompt_templates/judges/*.txt)."""
  if style not in TRANSCRIPT_STYLES:
    raise ValueError(f"transcript style {style!r} is not one of {TRANSCRIPT_STYLES}")
  dash = "- " if style == "lines" else ""
  return "\n\n".join(f"{dash}{SPEAKER_NAMES[m.role]}: {m.text}" for m in messages)


def save_jsonl(dialogues: Iterable[Dialogue], path: str, mode: str = "a") -> None:
  """Appends (or, mode="w", writes) the records (pedrl.files: synced, a rewrite atomic)."""
  files.write_lines([d.to_json() for d in dialogues], path, mode)


def load_jsonl(path: str) -> list[Dialogue]:
  """Dialogues from `path`; a bad line raises with its line number."""
  out = []
  with open(path, "rb") as f:
    for n, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        out.append(Dialogue.from_dict(json.loads(line.decode("utf-8"))))
      except (UnicodeDecodeError, ValueError, TypeError, KeyError) as e:
        raise RecordError(f"{path}, line {n}: not a dialogue record ({e})") from None
  return out
