"""The offline baselines' data (paper 003 A.3): preference pairs and accepted dialogues
from groups of scored rollouts, and the tutor sequences SFT and MDPO train on.

A group is the G dialogues of one problem (consecutive uids u·G … u·G + G − 1).

Pairs (MDPO), by `pairs` (PAIR_RULES). "accepted_rejected" (the default): paper 003
A.3's (D_acc, D_rej), read as its section 5.4 says, "pairs of chosen and rejected
conversations scored by judges": every dialogue of a group that every judge accepted
(`is_accepted`) against every one a judge rejected by its own reply (`is_rejected`),
kept where r(D_acc) > r(D_rej) (by more than `min_margin`; else dropped and counted
as `unordered`). "reward_order": every two dialogues of a group whose rewards differ by
more than `min_margin`, the higher-rewarded one chosen, whatever the judges said;
pairs of equal rewards (ties) are dropped and counted. Rewards are the configured
training reward's total. Dialogues a judge policy dropped have no reward and make no
pair. Pairs are listed by group, then by the two dialogues' rollout indices.

Accepted dialogues (SFT): those every pedagogical judge accepted (r_ped = 1),
each decision a judge's own (a value a judge failure policy filled in,
on_judge_failure=accept, is no judge's acceptance: such dialogues are left out and
counted), deduplicated by tutor text: within a problem, dialogues whose tutor turns are
the same texts, as sampled (thinking included, whitespace at their ends
stripped), are one; the first by uid is kept and carries the number dropped.
The same tutor text under another problem is not a duplicate: its context differs.
A.3 says "we filter the MDPO data to keep only accepted responses, remove
duplicates": `sft_source="dialogues"` (pedrl's default) reads "the MDPO data" as
the sampled dialogues, so a group whose rewards all tie (no pair) still gives
its accepted dialogues (equal rewards say nothing against them); "pairs" keeps
only accepted dialogues that are in a pair (each once, however many pairs).

Both sets name dialogues by uid: their tokens are read once from the baseline
workdir's dialogues.jsonl (`tutor_sequences`), not copied into every pair.
"""
import bisect
import collections
import dataclasses
import json
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import numpy as np

from pedrl import files
from pedrl.env import chat, dialogue as dialogue_lib
from pedrl.env.dialogue import Dialogue, RecordError

SCHEMA_VERSION = 1
PAIRS, ACCEPTED, DIALOGUES = "pairs.jsonl", "accepted.jsonl", "dialogues.jsonl"
SFT_SOURCES = ("dialogues", "pairs")  # What the SFT set's accepted dialogues are taken from.
PAIR_RULES = ("accepted_rejected", "reward_order")  # Which dialogues MDPO pairs (docstring).


@dataclasses.dataclass(frozen=True)
class PreferencePair:
  """Two dialogues of one problem's group; the chosen one's reward is higher."""
  problem_id: str
  group: int  # The problem's number in the baseline data: its dialogues' uid // G.
  chosen: int  # uid of the chosen dialogue (D_acc).
  rejected: int  # uid of the rejected one (D_rej).
  chosen_reward: float
  rejected_reward: float
  schema: int = SCHEMA_VERSION


@dataclasses.dataclass(frozen=True)
class AcceptedDialogue:
  """A dialogue every pedagogical judge accepted, kept after deduplication."""
  problem_id: str
  group: int
  uid: int
  reward: float
  duplicates: int = 0  # Accepted dialogues of its problem with the same tutor text, dropped.
  schema: int = SCHEMA_VERSION


@dataclasses.dataclass
class ScoredDialogue:
  """A shard record of the baseline data job: one scored dialogue and its batch."""
  batch: int
  dialogue: Dialogue
  schema: int = SCHEMA_VERSION

  @property
  def key(self) -> tuple:
    return self.dialogue.problem_id, self.dialogue.rollout

  def to_dict(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, row: dict) -> "ScoredDialogue":
    row = files.checked_schema(row, SCHEMA_VERSION, "baseline data")
    return cls(batch=row["batch"], dialogue=Dialogue.from_dict(row["dialogue"]))


@dataclasses.dataclass(frozen=True)
class Counts:
  """What `build` made of the dialogues (printed by the job, kept in summary.json)."""
  problems: int
  dialogues: int
  dropped: int  # By a judge failure policy: no reward, in no set.
  pairs: int
  ties: int  # Pairs of a group whose rewards do not differ by more than min_margin.
  accepted: int  # After deduplication.
  duplicates: int  # Accepted dialogues removed as duplicates.
  filled: int  # r_ped = 1 with a decision a judge failure policy filled in: left out.
  # accepted_rejected: accepted x rejected pairs whose accepted dialogue is not rewarded
  # more (by more than min_margin), dropped.
  unordered: int = 0


def _reward(d: Dialogue) -> float | None:
  return None if d.dropped or d.rewards is None else float(d.rewards.total)


def group_pairs(group: Sequence[Dialogue], group_number: int, min_margin: float = 0.0,
                rule: str = "accepted_rejected") -> tuple[list, int]:
  """(pairs, pairs not made) of one problem's dialogues by `rule` (see the module
  docstring): not made are ties (reward_order) or unordered pairs (accepted_rejected)."""
  if rule not in PAIR_RULES:
    raise ValueError(f"pairs={rule!r} is not one of {PAIR_RULES}")
  scored = [d for d in group if _reward(d) is not None]
  pairs, skipped = [], 0
  for i, a in enumerate(scored):
    for b in scored[i + 1:]:
      ra, rb = _reward(a), _reward(b)
      if rule == "accepted_rejected":
        if is_accepted(a) and is_rejected(b):
          win, lose = a, b
        elif is_accepted(b) and is_rejected(a):
          win, lose = b, a
        else:
          continue
        if _reward(win) - _reward(lose) <= min_margin:
          skipped += 1
          continue
      else:
        if abs(ra - rb) <= min_margin:
          skipped += 1
          continue
        win, lose = (a, b) if ra > rb else (b, a)
      pairs.append(PreferencePair(a.problem_id, group_number, win.uid, lose.uid, _reward(win),
                                  _reward(lose)))
  return pairs, skipped


def _passes(d: Dialogue) -> bool:
  """r_ped = 1 (paper 003 eq. 3), however its decisions came about."""
  return (not d.dropped and d.judgement is not None and d.judgement.r_ped is not None
          and d.judgement.r_ped >= 1.0)


def has_filled_decision(d: Dialogue) -> bool:
  """A decision of the dialogue's verdict was filled in by a judge failure policy."""
  v = d.judgement
  return v is not None and any(any(v.filled.get(name, ())) for name in v.decisions)


def is_accepted(d: Dialogue) -> bool:
  """Every pedagogical judge accepted it (r_ped = 1), each by its own reply."""
  return _passes(d) and not has_filled_decision(d)


def is_rejected(d: Dialogue) -> bool:
  """Some pedagogical judge rejected it by its own reply (not a failure policy's value)."""
  v = d.judgement
  if d.dropped or v is None:
    return False
  return any(x is False and not (v.filled.get(name) or [False] * len(xs))[i]
             for name, xs in v.decisions.items() for i, x in enumerate(xs))


def tutor_text(d: Dialogue) -> tuple:
  """The deduplication key's text: the tutor's turns as sampled, ends stripped."""
  return tuple((m.raw or m.text).strip() for m in d.messages if m.role == dialogue_lib.TUTOR)


def accepted_dialogues(group: Sequence[Dialogue], group_number: int,
                       among: Collection[int] | None = None) -> tuple[list, int]:
  """(accepted dialogues, duplicates removed) of one problem's dialogues; `among`: the
  uids they may be (None: any)."""
  kept = {}
  chosen = [d for d in group if is_accepted(d) and (among is None or d.uid in among)]
  for d in sorted(chosen, key=lambda d: d.uid):
    key = tutor_text(d)
    if key in kept:
      kept[key] = dataclasses.replace(kept[key], duplicates=kept[key].duplicates + 1)
    else:
      kept[key] = AcceptedDialogue(d.problem_id, group_number, d.uid, _reward(d))
  out = sorted(kept.values(), key=lambda a: a.uid)
  return out, sum(a.duplicates for a in out)


def build(dialogues: Sequence[Dialogue], group_size: int, min_margin: float = 0.0,
          sft_source: str = "dialogues",
          pairs_rule: str = "accepted_rejected") -> tuple[list, list, Counts]:
  """(pairs, accepted dialogues, counts) of scored dialogues in groups of `group_size`:
  pairs by `pairs_rule` (PAIR_RULES); the accepted ones from every dialogue or only those
  in pairs (`sft_source`)."""
  if sft_source not in SFT_SOURCES:
    raise ValueError(f"sft_source={sft_source!r} is not one of {SFT_SOURCES}")
  groups = collections.defaultdict(list)
  for d in dialogues:
    groups[d.uid // group_size].append(d)
  pairs, accepted, ties, unordered, duplicates = [], [], 0, 0, 0
  for number in sorted(groups):
    group = groups[number]
    if len({d.problem_id for d in group}) != 1 or len(group) != group_size:
      raise RecordError(f"group {number} has {len(group)} dialogues of problems "
                        f"{sorted({d.problem_id for d in group})}, not {group_size} of one")
    p, t = group_pairs(group, number, min_margin, pairs_rule)
    among = {u for x in p for u in (x.chosen, x.rejected)} if sft_source == "pairs" else None
    a, n = accepted_dialogues(group, number, among)
    pairs += p
    accepted += a
    if pairs_rule == "reward_order":
      ties += t
    else:
      unordered += t
    duplicates += n
  counts = Counts(problems=len(groups), dialogues=len(dialogues),
                  dropped=sum(d.dropped for d in dialogues), pairs=len(pairs), ties=ties,
                  accepted=len(accepted), duplicates=duplicates,
                  filled=sum(_passes(d) and has_filled_decision(d) for d in dialogues),
                  unordered=unordered)
  return pairs, accepted, counts


# -- Files ------------------------------------------------------------------------------------

def save(records: Iterable[PreferencePair | AcceptedDialogue], path: str) -> None:
  """Writes typed records (pairs or accepted dialogues) as JSONL, replacing the file."""
  files.append_rows([dataclasses.asdict(r) for r in records], path, mode="w")


def load(path: str, kind: type[PreferencePair] | type[AcceptedDialogue]) -> list:
  """The `kind` records (PreferencePair, AcceptedDialogue) of `path`; RecordError naming
  the file and line for a bad one, or for a missing file."""
  try:
    open(path).close()
  except OSError as e:
    raise RecordError(f"{path}: cannot read it ({e.strerror}); run pedrl.experiments."
                      "baseline_data into that workdir first") from None
  return files.read_records(
      path, lambda row: kind(**files.checked_schema(row, SCHEMA_VERSION, kind.__name__)),
      f"a {kind.__name__}", RecordError)


# -- Training sequences -------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class TutorSequence:
  """A dialogue's tutor side as trained on: its token ids and the tokens that count."""
  uid: int
  tokens: np.ndarray  # int32, Dialogue.tutor_ids.
  loss_mask: np.ndarray  # bool: the tutor's sampled tokens (or every token, see `sequence`).


def thinking_mask(d: Dialogue, decode: Callable[[Sequence[int]], str] | None) -> np.ndarray:
  """bool over tutor_ids: each tutor turn's sampled thinking. A turn that thinks is masked
  from its first sampled token to the end of its last `</think>` (the whole turn when
  none closes: a turn cut while thinking, or one whose `<think>` the template forced);
  `decode(ids) -> text` is the tutor's tokenizer's."""
  out = np.zeros(len(d.tutor_ids), bool)
  for m in d.messages:
    if m.role != dialogue_lib.TUTOR or not m.thinking:
      continue
    a, b = m.span
    ids = d.tutor_ids[a:b]
    closes = decode(ids).count(chat.THINK_CLOSE)
    if not closes:
      out[a:b] = True
      continue
    # The fewest tokens whose text holds every `</think>` (monotone in the count).
    k = bisect.bisect_left(range(len(ids) + 1), closes,
                           key=lambda k: decode(ids[:k]).count(chat.THINK_CLOSE))
    out[a:a + k] = True
  return out


TOKENS = ("tutor", "all")


@dataclasses.dataclass(frozen=True)
class SequenceSettings:
  """Which tokens of an accepted dialogue SFT trains on (its config's `train` section)."""
  # "tutor": the tutor's sampled tokens, the student's and the template's masked (the
  # issue's recipe, as M-DPO masks the other party); "all": every token, as the reference
  # SFT trainer (train_sft.py: TRL's SFTTrainer on the chat template's text).
  tokens: str = "tutor"
  # The tutor's sampled thinking counts as it was rolled out; False masks it (the turn's
  # tokens up to its last `</think>`; see thinking_mask).
  thinking: bool = True

  def __post_init__(self):
    if self.tokens not in TOKENS:
      raise ValueError(f"tokens {self.tokens!r} is not one of {TOKENS}")


def sequence(d: Dialogue, tokens: str = "tutor", thinking: bool = True,
             decode: Callable[[Sequence[int]], str] | None = None) -> TutorSequence:
  """`d`'s tutor side; the loss counts the tutor's sampled tokens (tokens="tutor": the
  student's and template tokens masked) or every token after the first ("all": the
  reference SFT trainer's text-dataset loss), without the sampled thinking unless
  `thinking` (then `decode` is needed)."""
  if tokens not in TOKENS:
    raise ValueError(f"tokens {tokens!r} is not one of {TOKENS}")
  ids = np.asarray(d.tutor_ids, np.int32)
  mask = np.asarray(d.tutor_mask, bool) if tokens == "tutor" else np.arange(ids.size) > 0
  if not thinking:
    mask &= ~thinking_mask(d, decode)
  return TutorSequence(d.uid, ids, mask)


def tutor_sequences(path: str, uids: Collection[int], **options: Any) -> dict:
  """{uid: TutorSequence} of the dialogues `uids` of a dialogues.jsonl, read line by line
  (a file of every rollout's token ids and log-probs is never held whole); `options`
  go to `sequence`. RecordError for a uid the file does not hold."""
  want, out = set(uids), {}
  if not want:
    return out
  try:
    f = open(path, encoding="utf-8")
  except OSError as e:
    raise RecordError(f"{path}: cannot read it ({e.strerror})") from None
  with f:
    for n, line in enumerate(f, 1):
      try:
        uid = json.loads(line).get("uid")
        if uid in want:
          out[uid] = sequence(Dialogue.from_dict(json.loads(line)), **options)
      except (ValueError, TypeError, KeyError) as e:
        raise RecordError(f"{path}, line {n}: not a dialogue record ({e})") from None
  if missing := sorted(want - set(out)):
    raise RecordError(f"{path} has no dialogue with uid {missing[0]} ({len(missing)} missing)")
  return out
