"""The record of one rollout, and its JSONL form.

`tutor_ids` is the tutor's whole side of the dialogue as it was fed to the
tutor: its chat-template prompt, each of its sampled turns, and between them
the template tokens carrying the student's messages. `tutor_mask` is 1 exactly
on the tokens the tutor sampled, each turn's stop token included (the policy
chose to stop there); template role headers, closings, forced `<think>`
prefixes and everything from the student are 0. GRPO trains on the 1s.
"""
import dataclasses
import json
import os

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
  # (0, 0) if the dialogue ended before the tutor read it).
  span: tuple = (0, 0)


@dataclasses.dataclass
class Dialogue:
  problem_id: str
  problem: str
  answer: str
  scenario: str  # GUIDED or ATTEMPTED.
  rollout: int  # Index among the G rollouts of the problem.
  uid: int = 0  # Seeds the dialogue's samples: problem's number in its split * G + rollout.
  persona: str = ""
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
  judgement: dict = dataclasses.field(default_factory=dict)  # r_ped, r_think, samples, dropped.
  turn_rewards: list = dataclasses.field(default_factory=list)  # UCO, per tutor turn.
  rewards: dict = dataclasses.field(default_factory=dict)  # Per component, and "total".

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

  def visible_messages(self) -> list[dict]:
    """The dialogue as the student and the judges see it."""
    return [{"role": m.role, "content": m.text} for m in self.messages]

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), ensure_ascii=False)

  @classmethod
  def from_dict(cls, row: dict) -> "Dialogue":
    row = dict(row)
    row["messages"] = [Message(**dict(m, span=tuple(m["span"]))) for m in row["messages"]]
    return cls(**row)


SPEAKER_NAMES = {TUTOR: "Teacher", STUDENT: "Student"}


def transcript(messages) -> str:
  """The visible dialogue as prompts show it: "Teacher: …" / "Student: …" paragraphs."""
  return "\n\n".join(f"{SPEAKER_NAMES[m.role]}: {m.text}" for m in messages)


def save_jsonl(dialogues, path: str, mode: str = "a") -> None:
  """Appends (or writes) the records in one write, synced: a crash can cut at most
  the last line, which `repair_jsonl` removes."""
  with open(path, mode, encoding="utf-8") as f:
    f.write("".join(d.to_json() + "\n" for d in dialogues))
    f.flush()
    os.fsync(f.fileno())


def repair_jsonl(path: str) -> int:
  """Cuts a partly written last line (no newline) off `path`; returns the bytes cut."""
  with open(path, "rb+") as f:
    data = f.read()
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
      f.truncate(keep)
  return len(data) - keep


def load_jsonl(path: str) -> list[Dialogue]:
  """Dialogues from `path`; a bad line raises with its line number."""
  out = []
  with open(path, "rb") as f:
    for n, line in enumerate(f, 1):
      if not line.strip():
        continue
      try:
        out.append(Dialogue.from_dict(json.loads(line.decode("utf-8"))))
      except (UnicodeDecodeError, json.JSONDecodeError, TypeError, KeyError) as e:
        raise ValueError(f"{path}, line {n}: not a dialogue record ({e})") from None
  return out
