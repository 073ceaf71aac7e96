"""Vectorized tutor–student dialogues: B problems × G rollouts, turn by turn.

The environment of paper 003 (section 5.1), also used by papers 000 and 001.
Every turn is one batched sampling call for all live dialogues of the speaking
side; each side keeps one KV cache over the batch, so a turn only feeds the
tokens new to that model. A dialogue ends after a tutor message that says
`<end_of_conversation>` (outside its thinking), after `max_turns` messages, or
when either model's view of it passes `max_conversation_tokens`; ended
dialogues leave the caches, so later turns only compute live ones.

Scenarios (per problem, the same for its G rollouts, from a seeded RNG):
guided, the tutor speaks first; attempted, the student first answers the
attempt prompt (`attempt_chat`: a lone system message, as the reference code) and the
tutor sees that attempt as "Here is my attempt at this problem: …".

Views: the tutor's messages are `assistant` and the student's `user` in the
tutor's view, flipped in the student's. The tutor's view keeps its thinking of
the turn being written, and its earlier turns' thinking as its chat template
shows it (`tutor_history_thinking`); the student sees `chat.visible_text`. In the
attempted scenario the student's view starts with its attempt as its own
(assistant) message after its system prompt, wrapped as the tutor reads it
(`attempt_view`).
"""
from collections.abc import Sequence
import dataclasses
import time
from typing import NamedTuple, Protocol

import numpy as np
from absl import logging

from pedrl import streams
from pedrl.engine import compiler
from pedrl.engine.shapes import bucket
from pedrl.env import chat, prompts
from pedrl.env.party import Chat, DialogueTurn, Party, Replier
from pedrl.env.dialogue import ATTEMPTED, GUIDED, STUDENT, TUTOR, Dialogue, Message
from pedrl.env.problems import Problem
# Re-exported: defined there, importable without JAX.
from pedrl.env.settings import (SCENARIOS, TURN_LIMITS, HISTORY_THINKING, STUDENT_NAMES,
                                RolloutSettings)


class Call(NamedTuple):
  """One batched sampling call: the side, its live dialogues, the rows it computed (live
  ones and batch filler), its decode steps (the longest row's tokens), the tokens
  sampled for live dialogues, and the decode row-steps it computed (0: rows x steps;
  fewer when finished rows left the batch, `Sampler(compact=True)`)."""
  side: str
  live: int
  rows: int
  steps: int = 0
  tokens: int = 0
  row_steps: int = 0


@dataclasses.dataclass
class RolloutStats:
  tutor_seconds: float = 0.0
  # Of tutor_seconds, getting programs rather than running them (engine.compiler.compilations):
  # a throughput leaves it out.
  tutor_compile_seconds: float = 0.0
  student_seconds: float = 0.0  # Attempts included.
  calls: list = dataclasses.field(default_factory=list)  # Call per sampling call.
  cache_slots: dict = dataclasses.field(default_factory=dict)  # Side -> its largest cache's slots.

  def add_seconds(self, side: str, seconds: float) -> None:
    """Time a side spent on its turns, to its own field (TUTOR or STUDENT)."""
    if side == TUTOR:
      self.tutor_seconds += seconds
    elif side == STUDENT:
      self.student_seconds += seconds
    else:
      raise ValueError(f"no side {side!r}: a rollout's sides are {TUTOR!r} and {STUDENT!r}")

  def idle_rows(self) -> float:
    """Share of the calls' rows that held no live dialogue: filler of a batch padded
    to its bucket (dialogues that ended leave it)."""
    rows = sum(c.rows for c in self.calls)
    return 1 - sum(c.live for c in self.calls) / rows if rows else 0.0

  def idle_steps(self) -> float:
    """Share of the decode row-steps computed that sampled no token of a live dialogue:
    filler rows, and rows whose turn had ended while others went on (until at most half
    the batch was live, with `Sampler(compact=True)`)."""
    steps = sum(c.row_steps or c.rows * c.steps for c in self.calls)
    return 1 - sum(c.tokens for c in self.calls) / steps if steps else 0.0


class Draws(NamedTuple):
  """What a problem's dialogues share, drawn once per problem."""
  scenario: str
  persona: str
  student_name: str  # "": none.


def problem_draws(problem_id: str, settings: RolloutSettings, seed: int) -> Draws:
  """The problem's scenario, persona and student name: a function of the seed and the
  problem only (the reference draws all three from Python's `hash(problem)`, which is
  salted per process)."""
  rng = streams.problem_rng(seed, problem_id)
  pick = lambda options: options[int(rng.integers(len(options)))] if options else ""
  scenario = settings.scenario
  if scenario == "mixed":
    scenario = pick((GUIDED, ATTEMPTED))
  persona = pick(settings.personas)
  return Draws(scenario, persona, pick(settings.student_names))


def _pow2(n: int) -> int:
  return 1 << (n - 1).bit_length()


class Turn(NamedTuple):
  """What one dialogue's side said in a turn."""
  dialogue: int  # Index of the dialogue in the batch.
  fed: list[int]  # Fed before sampling: the template and the other side's new message.
  tokens: np.ndarray  # int32 [n]: the sampled tokens (none for an endpoint or an agent).
  # (fed holds the whole view, encoded again: earlier thinking left out of the tutor's view.)
  logprobs: np.ndarray  # float32 [n]: their sampling log-probs.
  raw: str  # The reply as sampled (thinking included).
  finish_reason: str  # "stop", or "length": cut at max_new_tokens.
  num_tokens: int  # Tokens the reply took (an endpoint's count where it has no tokens here).
  reencoded: bool = False  # `fed` is the whole view (earlier thinking dropped), not a delta.


class DialogueSide(Protocol):
  """One party's running state over the batch of dialogues (`_Side` for a local model,
  `_EndpointSide` for an endpoint or an agent): every dialogue's view in this side's
  roles, and its length in tokens."""
  name: str  # TUTOR or STUDENT.
  views: list[Chat]
  lengths: list[int]  # Tokens of each dialogue this side's model has seen (0: not known).

  def speak(self, live: list[int], dialogues: list[Dialogue], seed: int, stats: "RolloutStats",
            ended: dict[int, str]) -> list[Turn]:
    """One batched turn for the `live` dialogues; those that cannot fit another turn
    leave `live` for `ended` (with their end reason)."""


class _Side:
  """A party's running state over the batch: its cache and every dialogue's view."""

  def __init__(self, name: str, party: Party, n: int, capacity: int, prefix: str = "",
               history: str = "keep") -> None:
    self.name, self.party, self.capacity, self.prefix = name, party, capacity, prefix
    # "keep": the cache grows by deltas; "template"/"drop": a turn after one the view now
    # renders otherwise (it thought; or the template reopens every reply) encodes that
    # dialogue's whole view again, as the template (or history_text) shows it.
    self.history = history
    # Every turn, not only one that thought: its template renders earlier replies after
    # another opening than the generation prompt that the cache holds.
    self.reopens = history != "keep" and party.chat.reopens_history()
    self.stale = [False] * n  # The cache holds what the view now renders otherwise.
    self.prefix_ids = party.chat.encode(prefix) if prefix else []
    self.cache, self.rows = None, []
    self.views = [[] for _ in range(n)]  # {"role", "content"} in this side's roles.
    self.fed = [0] * n  # Messages of the view already in the cache.
    self.lengths = [0] * n  # Tokens in the cache.
    self.stop_text = [None] * n

  def new_tokens(self, d: int) -> list[int]:
    view, fed = self.views[d], self.fed[d]
    if self.stale[d]:  # The whole view again, as the tutor's template now renders it.
      if self.history == "drop":
        view = [dict(m, content=chat.history_text(m["content"])) if m["role"] == "assistant"
                else m for m in view]
      return self.party.chat.prompt_ids(view) + self.prefix_ids
    if fed == 0:
      ids = self.party.chat.prompt_ids(view)
    else:
      ids = self.party.chat.next_ids([m["role"] for m in view[:fed]], view[fed:],
                                     self.stop_text[d])
    return ids + self.prefix_ids

  def place(self, live: list[int], need: int) -> None:
    """Points the cache at the live dialogues, in order (batch bucketed to powers of two).
    A first cache gets twice the `need` slots of this turn, room for the next exchange
    too: a cache that grew at its second turn would cost a copy and two more compiled
    programs (the grow, and the turn on the grown size); later it grows as make_room says."""
    sampler = self.party.sampler
    batch = sampler.padded_batch(min(_pow2(len(live)), len(self.views)))
    if self.cache is None:
      self.cache = sampler.new_cache(batch, min(2 * need, self.capacity))
    elif self.rows != live:
      where = {d: i for i, d in enumerate(self.rows)}
      self.cache = sampler.select_rows(self.cache, [where[d] for d in live], batch)
    self.rows, self.batch = list(live), batch

  def speak(self, live: list[int], dialogues: list[Dialogue], seed: int,
            stats: "RolloutStats", ended: dict[int, str]) -> list[Turn]:
    """One batched turn for the live dialogues (the list shrinks by those that
    cannot fit another turn; they go to `ended`): a Turn per speaking dialogue."""
    sampler, sp = self.party.sampler, self.party.sampling
    # A stale dialogue's row is emptied and fed its whole view; the other rows keep
    # their caches, so a dialogue's tokens do not depend on which others share its batch.
    # When every live row is stale (a tutor that thinks every turn), a fresh cache does
    # the same without carrying the emptied rows' slots until a compaction.
    stale = [d for d in live if self.stale[d]]
    if len(stale) == len(live):
      self.cache, self.rows = None, []
    elif stale:
      where = {d: i for i, d in enumerate(self.rows)}
      self.cache = sampler.clear_rows(self.cache, [where[d] for d in stale])
    for d in stale:
      self.lengths[d] = 0
    rows = {d: self.new_tokens(d) for d in live}
    for d in list(live):  # A turn that cannot fit this model's cache ends the dialogue.
      if self.lengths[d] + len(rows[d]) + sp.max_new_tokens > self.capacity:
        ended[d] = "token_limit"
        live.remove(d)
    while live:
      longest = max(len(rows[d]) for d in live)
      need = bucket(longest) + sp.max_new_tokens
      self.place(live, need)
      self.cache, room = sampler.make_room(self.cache, need, self.capacity)
      top = max(self.lengths[d] for d in live)
      if (room >= longest + sp.max_new_tokens
          and top + longest + sp.max_new_tokens <= sampler.cfg.max_position_embeddings):
        break
      # Each row fits alone but not beside the others: the longest dialogue ends.
      worst = max(live, key=lambda d: self.lengths[d] + len(rows[d]))
      ended[worst] = "token_limit"
      live.remove(worst)
    if not live:
      return []
    keys = streams.random_keys(seed, streams.DIALOGUE, [dialogues[d].uid for d in live],
                       [len(dialogues[d].messages) for d in live])
    start = time.perf_counter()
    with compiler.compilations() as compiling:
      gen, self.cache = sampler.generate(self.party.params, [rows[d] for d in live], keys, sp,
                                         self.cache)
    stats.calls.append(Call(self.name, len(live), self.batch, int(gen.lengths.max()),
                            int(gen.lengths.sum()), gen.row_steps))
    stats.cache_slots[self.name] = max(stats.cache_slots.get(self.name, 0), self.cache.size)
    stats.add_seconds(self.name, time.perf_counter() - start)
    if self.name == TUTOR:
      stats.tutor_compile_seconds += sum(compiling)
    out = []
    for i, d in enumerate(live):
      tokens = gen.row_tokens(i)
      self.stop_text[d] = (sampler.tokenizer.decode(tokens[-1:].tolist())
                           if gen.stopped[i] and len(tokens) else None)
      raw = self.prefix + gen.texts[i]
      self.views[d].append({"role": "assistant", "content": raw})
      self.fed[d] = len(self.views[d])
      self.lengths[d] += len(rows[d]) + len(tokens)
      out.append(Turn(d, rows[d], tokens, gen.logprobs[i, :len(tokens)], raw,
                      gen.finish_reasons[i], int(tokens.size), reencoded=self.stale[d]))
      # Its next turn renders this one otherwise (without its thinking, or after another
      # opening): the dialogue's cache must be encoded again.
      self.stale[d] = self.history != "keep" and (self.reopens or chat.history_text(raw) != raw)
    return out


class _EndpointSide:
  """A side played by an endpoint or an agent (a Replier): every dialogue's view, sent
  whole each turn. Its lengths are the endpoint's own token counts (prompt +
  completion) when it reports usage, so the token limit applies as for local models;
  else they stay 0."""

  def __init__(self, name: str, party: Replier, n: int, prefix: str = "") -> None:
    self.name, self.party, self.prefix = name, party, prefix
    self.views = [[] for _ in range(n)]
    self.lengths = [0] * n
    self.warned = False

  def speak(self, live: list[int], dialogues: list[Dialogue], seed: int,
            stats: "RolloutStats", ended: dict[int, str]) -> list[Turn]:
    del seed, ended  # The endpoint samples with its own randomness.
    # Each dialogue's uid and this side's turn in it: an agent seeds its draws and finds
    # its memory by them, as a local side seeds by the uid, whatever the batch.
    turns = [DialogueTurn(dialogues[d].uid,
                          sum(m.role == self.name for m in dialogues[d].messages)) for d in live]
    start = time.perf_counter()
    replies = self.party.replies([self.views[d] for d in live], f"a {self.name} turn", turns)
    stats.add_seconds(self.name, time.perf_counter() - start)
    used = [r.completion_tokens for r in replies]
    stats.calls.append(Call(self.name, len(live), len(live), max(used), sum(used)))
    out = []
    for d, r in zip(live, replies):
      raw = self.prefix + r.text
      self.views[d].append({"role": "assistant", "content": raw})
      self.lengths[d] = r.prompt_tokens + r.completion_tokens
      if not self.lengths[d] and not self.warned:
        self.warned = True  # Said once, not silently: the limit cannot apply to this side.
        logging.warning("the %s endpoint reports no token usage: max_conversation_tokens "
                        "does not apply to its side of the dialogues", self.name)
      finish = "length" if r.finish_reason == "length" else "stop"
      out.append(Turn(d, [], np.zeros((0,), np.int32), np.zeros((0,), np.float32), raw, finish,
                      r.completion_tokens))
    return out


def cache_slots(party: Party, settings: RolloutSettings, other_max_new: int) -> int:
  """Cache slots for a whole dialogue: the token limit plus one more exchange and slack
  for template tokens (masked gaps are compacted away when room runs out)."""
  want = settings.max_conversation_tokens + party.sampling.max_new_tokens + other_max_new + 256
  return min(bucket(want), party.sampler.cfg.max_position_embeddings)


def _attempts(student: Party | Replier, settings: RolloutSettings, seed: int,
              dialogues: list[Dialogue], todo: list[int],
              stats: RolloutStats) -> list[tuple[str, int, str]]:
  """The student's first attempt in attempted-scenario dialogues."""
  chats = [attempt_chat(dialogues[d].problem, settings) for d in todo]
  if not isinstance(student, Party):
    start = time.perf_counter()
    replies = student.replies(chats, "an attempt")
    stats.student_seconds += time.perf_counter() - start
    return [(r.text, r.completion_tokens, "length" if r.finish_reason == "length" else "stop")
            for r in replies]
  sampler, sp = student.sampler, student.sampling
  rows = [student.chat.prompt_ids(c) for c in chats]
  keys = streams.random_keys(seed, streams.DIALOGUE, [dialogues[d].uid for d in todo],
                             [0] * len(todo))
  cache = sampler.new_cache(_pow2(len(todo)), bucket(max(map(len, rows))) + sp.max_new_tokens)
  start = time.perf_counter()
  gen, _ = sampler.generate(student.params, rows, keys, sp, cache)
  stats.student_seconds += time.perf_counter() - start
  stats.calls.append(Call("attempt", len(todo), _pow2(len(todo)), int(gen.lengths.max()),
                          int(gen.lengths.sum()), gen.row_steps))
  return [(gen.texts[i], gen.row_tokens(i).size, gen.finish_reasons[i]) for i in range(len(todo))]


def attempt_chat(problem: str, settings: RolloutSettings) -> list[dict]:
  """The chat that asks for the attempted scenario's first attempt: the attempt prompt
  (the user's file, else pedrl's) as one message of `attempt_role`."""
  if settings.attempt_prompt_file:
    text = prompts.render_file(settings.attempt_prompt_file, "student_initial_attempt_prompt.txt",
                               problem=problem)
  else:
    text = prompts.render(settings.attempt_prompt, problem=problem)
  return [{"role": settings.attempt_role, "content": text}]


def run(problems: Sequence[Problem], group_size: int, tutor: Party | Replier,
        student: Party | Replier, settings: RolloutSettings, *, seed: int,
        problem_uids: Sequence[int] | None = None,
        stats: RolloutStats | None = None) -> list[Dialogue]:
  """Runs len(problems) × group_size dialogues to their ends.

  Args:
    problems: pedrl.env.problems.Problem rows.
    group_size: G rollouts per problem (consecutive in the output).
    tutor, student: the two sides: local models (different models and tokenizers
      allowed), or Repliers (an endpoint, an agent tutor). `settings.thinking` is
      passed to a local tutor's template as enable_thinking.
    settings: RolloutSettings.
    seed: the run's seed (the config's top-level `seed`): with a dialogue's uid it
      draws the problem's scenario and persona and every sampled token.
    problem_uids: a distinct number per problem within the run (default 0, 1,
      ...; a job passes each problem's index in its split). Dialogue g of
      problem u gets uid u * G + g, which seeds its samples, so a dialogue's
      draws do not depend on its batch or on a resumed run.
    stats: filled with timings and per-call batch sizes when given.
  Returns:
    Dialogue records (no solve attempts yet: see pedrl.env.solving).
  """
  stats = stats if stats is not None else RolloutStats()
  problem_uids = range(len(problems)) if problem_uids is None else problem_uids
  dialogues = []
  for p, u in zip(problems, problem_uids, strict=True):
    draws = problem_draws(p.id, settings, seed)
    for g in range(group_size):
      dialogues.append(Dialogue(problem_id=p.id, problem=p.problem, answer=p.answer,
                                scenario=draws.scenario, rollout=g, uid=u * group_size + g,
                                persona=draws.persona, student_name=draws.student_name))
  n = len(dialogues)
  prefix = chat.THINK_OPEN + "\n" if settings.force_thinking else ""
  tutor_side, student_side = _sides(tutor, student, n, settings, prefix)
  for d, dl in enumerate(dialogues):
    tutor_side.views[d].append({"role": "system", "content": tutor_system_prompt(settings, dl)})
    dl.student_system = student_system_prompt(settings.student_prompt, dl)
    student_side.views[d].append({"role": "system", "content": dl.student_system})

  todo = [d for d in range(n) if dialogues[d].scenario == ATTEMPTED]
  if todo:
    for d, (raw, count, finish) in zip(todo, _attempts(student, settings, seed, dialogues,
                                                     todo, stats)):
      text = chat.visible_text(raw)
      wrapped = settings.attempt_prefix + text
      if settings.attempt_view == "all":
        text = wrapped  # What every reader of the dialogue sees (Message.text).
      dialogues[d].messages.append(Message(role=STUDENT, text=text, raw=raw, num_tokens=count,
                                           finish_reason=finish))
      student_side.views[d].append({"role": "assistant", "content": text})
      tutor_side.views[d].append({"role": "user", "content": wrapped})

  ended: dict[int, str] = {}  # Dialogue -> end reason.
  for d in range(n):
    if settings.turn_limit == "message" and len(dialogues[d].messages) >= settings.max_turns:
      ended[d] = "max_turns"
  live = [d for d in range(n) if d not in ended]
  while live:
    for side, other in ((tutor_side, student_side), (student_side, tutor_side)):
      for turn in side.speak(live, dialogues, seed, stats, ended):
        d, dl, raw = turn.dialogue, dialogues[turn.dialogue], turn.raw
        msg = Message(role=side.name, text=chat.visible_text(raw),
                      thinking=chat.split_thinking(raw)[1], raw=raw,
                      num_tokens=int(turn.num_tokens), finish_reason=turn.finish_reason)
        other.views[d].append({"role": "user", "content": msg.text})
        if side is tutor_side:
          fed, tokens = turn.fed, turn.tokens
          if turn.reencoded:  # The tutor's tokens start again from its whole view.
            dl.tutor_ids, dl.tutor_mask, dl.tutor_logprobs = [], [], []
            for m in dl.messages:
              m.span = (0, 0)
          if dl.messages:  # The tokens that brought the student's message to the tutor.
            dl.messages[-1].span = (len(dl.tutor_ids), len(dl.tutor_ids) + len(fed))
          dl.tutor_ids += [int(t) for t in fed]
          dl.tutor_mask += [0] * len(fed)
          dl.tutor_logprobs += [0.0] * len(fed)
          msg.span = (len(dl.tutor_ids), len(dl.tutor_ids) + tokens.size)
          dl.tutor_ids += tokens.tolist()
          dl.tutor_mask += [1] * tokens.size
          dl.tutor_logprobs += [float(x) for x in turn.logprobs]
        dl.messages.append(msg)
        dl.student_tokens = student_side.lengths[d]
        if side is tutor_side and chat.ends_conversation(raw):
          ended[d] = "end_of_conversation"
        elif turn_limit_reached(dl, side is tutor_side, settings):
          ended[d] = "max_turns"
        elif max(tutor_side.lengths[d], student_side.lengths[d]) > settings.max_conversation_tokens:
          ended[d] = "token_limit"
      live[:] = [d for d in live if d not in ended]
      if not live:
        break
  for d, reason in ended.items():
    dialogues[d].end_reason = reason
  return dialogues


def turn_limit_reached(dl: Dialogue, after_tutor: bool, settings: RolloutSettings) -> bool:
  """Whether the message just added to `dl` reaches a turn limit."""
  if settings.turn_limit == TUTOR and not after_tutor:
    return False
  if len(dl.messages) >= settings.max_turns:
    return True
  tutor_turns = sum(m.role == TUTOR for m in dl.messages)
  return after_tutor and 0 < settings.max_tutor_turns <= tutor_turns


def _sides(tutor: Party | Replier, student: Party | Replier, n: int, settings: RolloutSettings,
           prefix: str) -> tuple[DialogueSide, DialogueSide]:
  """Each party's running side: a KV cache over the batch for a local model, whole
  views for an endpoint or an agent."""
  if isinstance(tutor, Party):
    tutor = dataclasses.replace(tutor, chat=dataclasses.replace(
        tutor.chat, template_kwargs={**tutor.chat.template_kwargs,
                                     "enable_thinking": settings.thinking}))
  if settings.force_thinking and not isinstance(tutor, Party):
    raise ValueError("force_thinking needs a local tutor: an endpoint's replies do not follow "
                     "a <think> prefix they were not given")
  max_new = lambda p: p.sampling.max_new_tokens if isinstance(p, Party) else p.max_new_tokens
  make = lambda name, p, other, prefix="", history="keep": (
      _Side(name, p, n, cache_slots(p, settings, max_new(other)), prefix, history)
      if isinstance(p, Party) else _EndpointSide(name, p, n, prefix))
  return (make(TUTOR, tutor, student, prefix, tutor_history(settings, tutor)),
          make(STUDENT, student, tutor))


def tutor_history(settings: RolloutSettings, tutor: Party | Replier) -> str:
  """How a local tutor's view shows its earlier turns: "keep" (as sampled), "drop" (their
  thinking left out), or "template" (its template renders them otherwise: their thinking
  left out, or after another opening than the generation prompt). An endpoint or agent
  gets the whole conversation each turn, as its own server renders it."""
  mode = settings.tutor_history_thinking
  if not isinstance(tutor, Party) or mode == "drop":
    return mode if isinstance(tutor, Party) else "keep"
  if mode == "template" and (tutor.chat.drops_history_thinking()
                             or tutor.chat.reopens_history()):
    return "template"
  return "keep"


def tutor_system_prompt(settings: RolloutSettings, dl: Dialogue) -> str:
  """The tutor's system prompt: its paper's (or the user's file), then the thinking
  instruction if any."""
  if settings.tutor_prompt_file:
    # include_thinking: the reference's generation_cfg.use_thinking (eth-lre/PedagogicalRL
    # @ bae10cd src/classroom.py, the teacher prompt's render), pedrl's `thinking`.
    text = prompts.render_file(settings.tutor_prompt_file, problem=dl.problem,
                               student_name=dl.student_name or None,
                               include_thinking=settings.thinking)
  else:
    text = prompts.render(settings.tutor_prompt, problem=dl.problem,
                          student_name=dl.student_name or None)
  if settings.think_instruction:
    text += "\n\n" + prompts.render(settings.think_instruction)
  return text


def student_system_prompt(name: str, d: Dialogue) -> str:
  """The student's system prompt for a dialogue (naming the student where the prompt
  does), its persona appended."""
  system = prompts.render(name, problem=d.problem, student_name=d.student_name or None)
  return system + "\n\n" + d.persona if d.persona else system
