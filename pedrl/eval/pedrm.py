"""Ped-RM: a sequence-classification reward model scoring each tutor turn in its context.

Paper 003 (table 2) scores every tutor turn with MathTutorBench's pedagogical
reward model (eth-nlped/Qwen2.5-1.5B-pedagogical-rewardmodel, one scalar from
the last token), given the dialogue before it: macro = mean of per-dialogue
means, micro = mean over all scored turns (pedrl.eval.metrics). The model runs
on pedrl's port of `*ForSequenceClassification` (equal to transformers, which
scores the rightmost non-pad token; `pool_last` does the same).

What the model reads for a tutor turn (a `FORMATS` choice):
- "pedagogical_rl" (the default): as paper 003's reference evaluation builds it
  (eth-lre/PedagogicalRL @ bae10cd, utils/pedagogical_reward.py: format_conversation
  and get_reward_inputs, called by eval.py through score_each_conversation): the
  reward model's own system prompt, a user message "Problem: <problem>\nReference
  Solution: " followed by nothing (eval.py's rows carry no solution, so it passes
  ""), then the dialogue as the student saw it, tutor messages as `assistant` and
  the student's as `user`, the attempt of the attempted scenario as the tutor read
  it ("Here is my attempt at this problem: ..."), ending in the scored tutor
  message. Scored: the tutor message that opens the dialogue and each one that
  follows a student message, each in the context of everything before it.
- "mathtutorbench": the same layout with the problem's answer as the reference
  solution (MathTutorBench's reward_model/compute_scaffolding_score.py fills in
  its datasets' reference solutions).
- "problem_only": a user message "Problem: <problem>", then the dialogue; no
  system prompt, so the chat template adds its default one (pedrl's earlier
  default, kept for comparison with runs made with it).

The system prompt is the one the released reward model was trained with. pedrl
ships no copy: `system_prompt_file` names a text file holding it (it is
SYSTEM_PROMPT in both scripts named above); a file whose text is not that prompt
(checked against its SHA-256) is logged, since the scores then move.

Thinking is hidden as everywhere in pedrl (`Message.text`: pedrl.env.chat's
visible text). The reference removes closed `<think>` blocks and the end marker
without stripping the message, and leaves an unclosed block in: a message can
differ in surrounding whitespace, or when a turn was cut inside its thinking.
"""
import functools
from collections.abc import Sequence
import hashlib
import os

from absl import logging
import jax
import jax.numpy as jnp
import numpy as np

from pedrl import models
from pedrl.engine.shapes import bucket, left_padded
from pedrl.env.chat import ChatFormat
from pedrl.env.dialogue import ATTEMPTED, STUDENT, TUTOR, Dialogue
from pedrl.models.decoder import pool_last
from pedrl.tokenizer import load_tokenizer
# Re-exported: defined there, importable without JAX.
from pedrl.eval.settings import FORMATS, _WITH_SYSTEM_PROMPT, PedRMSettings

# SHA-256 of the released reward model's system prompt (SYSTEM_PROMPT in eth-lre/PedagogicalRL
# @ bae10cd utils/pedagogical_reward.py and in eth-lre/mathtutorbench @ 54b6213
# reward_model/compute_scaffolding_score.py, the same 261 characters), stripped.
RELEASED_SYSTEM_PROMPT_SHA256 = "9cffd9bc111f99896b7ddc2c95c76f08fc4da92888eb65e15fbc8b9583c68d15"
ATTEMPT_PREFIX = "Here is my attempt at this problem: "  # As the tutor read it (rollout).


class PedRMError(ValueError):
  """The reward model cannot be used (not a sequence classifier, no template, too long)."""


def mathtutorbench_opening(problem: str, reference_solution: str,
                           system_prompt: str) -> list[dict]:
  """The reward model's context before the dialogue: its system prompt and the problem
  with a reference solution (format_conversation in both reference scripts)."""
  return [{"role": "system", "content": system_prompt},
          {"role": "user", "content": f"Problem: {problem}\nReference Solution: "
                                      f"{reference_solution}"}]


def scored_turns(roles: Sequence[str]) -> list[int]:
  """Indices of the tutor messages the reference scores (get_reward_inputs): the one that
  opens the dialogue and each that follows a student message. In pedrl's dialogues, where
  the sides alternate, that is every tutor message."""
  return [i for i, r in enumerate(roles) if r == TUTOR and (i == 0 or roles[i - 1] != TUTOR)]


def dialogue_turns(d: Dialogue, attempt_prefix: str = ATTEMPT_PREFIX) -> list[dict]:
  """The dialogue as the student saw it, in the reward model's roles; the attempted
  scenario's first message as the tutor read it."""
  turns = [{"role": "assistant" if m.role == TUTOR else "user", "content": m.text}
           for m in d.messages]
  first = turns[0]["content"] if turns else ""
  if (d.scenario == ATTEMPTED and d.messages and d.messages[0].role == STUDENT
      and not first.startswith(attempt_prefix)):  # Wrapped already: rollout.attempt_view=all.
    turns[0]["content"] = attempt_prefix + first
  return turns


def turn_chats(d: Dialogue, fmt: str = "pedagogical_rl", system_prompt: str | None = None,
               attempt_prefix: str = ATTEMPT_PREFIX) -> list[list[dict]]:
  """One chat per scored tutor message of dialogue `d`: the context the RM reads, ending in
  that message (see the module docstring for the formats)."""
  if fmt == "pedagogical_rl":  # eval.py passes no solution: reference_solution="".
    opening = mathtutorbench_opening(d.problem, "", system_prompt)
  elif fmt == "mathtutorbench":
    opening = mathtutorbench_opening(d.problem, d.answer, system_prompt)
  elif fmt == "problem_only":
    opening = [{"role": "user", "content": f"Problem: {d.problem}"}]
  else:
    raise ValueError(f"pedrm format {fmt!r} is not one of {FORMATS}")
  if fmt in _WITH_SYSTEM_PROMPT and system_prompt is None:
    raise ValueError(f"pedrm format {fmt!r} needs the reward model's system prompt")
  turns = dialogue_turns(d, attempt_prefix) if fmt == "pedagogical_rl" else [
      {"role": "assistant" if m.role == TUTOR else "user", "content": m.text}
      for m in d.messages]
  return [opening + turns[:i + 1] for i in scored_turns([m.role for m in d.messages])]


def encode(chat_format: ChatFormat, chat: Sequence[dict]) -> list[int]:
  """The token ids the RM reads: the chat rendered by the RM's own template, no generation
  prompt (the reference's apply_chat_template(..., tokenize=False), then encoded)."""
  return chat_format.encode(chat_format.render(chat, add_generation_prompt=False))


@functools.partial(jax.jit, static_argnums=0)
def _scores(model, params, tokens, mask):
  hidden, _ = model.apply({"params": params}, tokens, mask)
  logits = model.apply({"params": params}, hidden, method=type(model).logits)
  return pool_last(logits, mask, tokens, model.cfg.pad_token_id)[:, 0]


def check(settings: PedRMSettings) -> models.ModelConfig:
  """The checkpoint's config: a one-label sequence classifier, or PedRMError. Reads
  config.json only, so a wrong path fails before any model loads."""
  if not os.path.isfile(os.path.join(settings.path or "", "config.json")):
    raise PedRMError(f"pedrm path {settings.path!r} is not a checkpoint directory (no "
                     "config.json)")
  cfg = models.from_hf(settings.path, dtype=settings.dtype)
  if cfg.task != "seq_cls" or cfg.num_labels != 1:
    raise PedRMError(f"pedrm path {settings.path}: not a one-label sequence classifier "
                     f"(task {cfg.task!r}, {cfg.num_labels} labels); the Ped-RM is a "
                     "*ForSequenceClassification checkpoint with num_labels=1")
  if settings.system_prompt_file and not os.path.isfile(settings.system_prompt_file):
    raise PedRMError(f"pedrm system_prompt_file {settings.system_prompt_file!r} does not exist")
  return cfg


def read_system_prompt(path: str) -> str:
  """The reward model's system prompt from `path`, stripped; a text other than the released
  model's is logged (its scores are then not the papers')."""
  with open(path, encoding="utf-8") as f:
    text = f.read().strip()
  if hashlib.sha256(text.encode()).hexdigest() != RELEASED_SYSTEM_PROMPT_SHA256:
    logging.warning("pedrm system_prompt_file %s is not the released reward model's system "
                    "prompt (SHA-256 differs): Ped-RM scores will not be comparable to the "
                    "papers'", path)
  return text


def in_dtype(scores: Sequence[float], dtype: str) -> list[float]:
  """Scores as a model in `dtype` returns them (bfloat16 and float16 round; float32 as
  computed): the harness compares its bfloat16 RM's scores, so replies that tie there tie
  here."""
  if dtype in ("bfloat16", "float16"):
    return np.asarray(scores, np.float32).astype(dtype).astype(float).tolist()
  return list(scores)


class PedRM:
  """A sequence-classification checkpoint that scores chats: `score(chats) -> [float]`."""

  def __init__(self, settings: PedRMSettings, attempt_prefix: str = ATTEMPT_PREFIX) -> None:
    self.settings, self.cut, self.attempt_prefix = settings, 0, attempt_prefix
    self.cfg = cfg = check(settings)
    self.model = models.build_model(cfg)
    self.params = models.load_params(settings.path, cfg)
    self.chat = ChatFormat(load_tokenizer(settings.path, require_chat_template=True))
    self.system_prompt = None
    if settings.format in _WITH_SYSTEM_PROMPT:
      self.system_prompt = read_system_prompt(settings.system_prompt_file)

  def ids(self, chat: Sequence[dict]) -> list[int]:
    return encode(self.chat, chat)

  def score(self, chats: Sequence[Sequence[dict]]) -> list[float]:
    """The model's scalar for each chat (its last non-pad token's score), rounded to the
    model's dtype as a transformers model in it returns it: the score head runs in float32
    here, and MathTutorBench's script (bfloat16) compares bfloat16 scores, so two replies
    that tie there tie here too (a tie is no win)."""
    rows = [self.ids(c) for c in chats]
    context = self.cfg.max_position_embeddings
    for i, r in enumerate(rows):
      if len(r) > context:
        if not self.settings.truncate_inputs:
          raise PedRMError(f"a Ped-RM input of {len(r)} tokens exceeds the reward model's "
                           f"context of {context}")
        rows[i], self.cut = r[len(r) - context:], self.cut + 1
    n, out = self.settings.rows_per_call, []
    pad = self.cfg.pad_token_id or 0
    for lo in range(0, len(rows), n):
      part = rows[lo:lo + n]
      t = min(bucket(max(map(len, part))), context)
      tokens, mask = left_padded(part, n, t, pad)
      mask[len(part):, -1] = True  # Filler rows: one token, finite scores, dropped.
      out += np.asarray(_scores(self.model, self.params, jnp.asarray(tokens),
                                jnp.asarray(mask)))[:len(part)].tolist()
    out = in_dtype(out, self.cfg.dtype)
    if not np.all(np.isfinite(out)):
      bad = int(np.flatnonzero(~np.isfinite(out))[0])
      raise PedRMError(f"the reward model gave a non-finite score ({out[bad]}) to input {bad} "
                       f"of {len(out)} ({len(rows[bad])} tokens); check its weights and dtype")
    return [float(x) for x in out]

  def score_dialogues(self, dialogues: Sequence[Dialogue]) -> list[list[float]]:
    """Per dialogue, the score of each tutor turn in order."""
    chats = [turn_chats(d, self.settings.format, self.system_prompt, self.attempt_prefix)
             for d in dialogues]
    flat = self.score([c for cs in chats for c in cs])
    out, at = [], 0
    for cs in chats:
      out.append(flat[at:at + len(cs)])
      at += len(cs)
    return out
