"""Ped-RM: a sequence-classification reward model scoring each tutor turn in its context.

Paper 003 (table 2) scores every tutor turn with MathTutorBench's pedagogical
reward model (Qwen2.5-1.5B, one scalar from the last token), given the
dialogue before it: macro = mean of per-dialogue means, micro = mean over all
scored turns (pedrl.eval.metrics). The model runs on pedrl's port of
`*ForSequenceClassification` (equal to transformers, which scores the
rightmost non-pad token; `pool_last` does the same).

What the model reads for tutor turn t (a `FORMATS` choice):
- "reference": a user message "Problem: <problem>", then the visible dialogue
  up to and including turn t, tutor messages as `assistant`, the student's as
  `user`. No system prompt and no reference solution: the tutor under test
  was not shown one either. pedrl's choice where paper 003 does not print its
  format; documented in docs/evaluation.md.
- "mathtutorbench": the benchmark's judging format: its system prompt (read
  from `system_prompt_file`, a text file the user provides with the exact text
  the reward model was trained with; pedrl ships no copy), then a user message
  "Problem: <problem>\nReference Solution: <answer>", then the dialogue.
"""
import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np

from pedrl import models
from pedrl.engine.shapes import bucket
from pedrl.env.chat import ChatFormat
from pedrl.env.dialogue import TUTOR
from pedrl.models.decoder import pool_last
from pedrl.tokenizer import load_tokenizer

FORMATS = ("reference", "mathtutorbench")


class PedRMError(ValueError):
  """The reward model cannot be used (not a sequence classifier, no template, too long)."""


@dataclasses.dataclass(frozen=True)
class PedRMSettings:
  """The config's `eval.pedrm` keys. path None: no Ped-RM scores (NaN in the table)."""
  path: str | None = None  # e.g. a local copy of eth-nlped/Qwen2.5-1.5B-pedagogical-rewardmodel
  format: str = "reference"
  system_prompt_file: str | None = None  # format="mathtutorbench": the RM's system prompt.
  rows_per_call: int = 8
  dtype: str = "float32"  # The benchmark runs the RM in bfloat16; float32 is the exact port.
  # An input longer than the RM's context: an error, or (True) its start cut off, counted
  # in `PedRM.cut` (tiny runs, whose classifier has a short context).
  truncate_inputs: bool = False

  def __post_init__(self):
    if self.format not in FORMATS:
      raise ValueError(f"pedrm format {self.format!r} is not one of {FORMATS}")
    if self.path and self.format == "mathtutorbench" and not self.system_prompt_file:
      raise ValueError("pedrm format 'mathtutorbench' needs system_prompt_file: a text file "
                       "holding the reward model's system prompt (MathTutorBench's reward_model/ "
                       "scoring script has it)")
    if self.rows_per_call < 1:
      raise ValueError("rows_per_call must be positive")


def mathtutorbench_opening(problem: str, reference_solution: str,
                           system_prompt: str) -> list[dict]:
  """MathTutorBench's judging context before the dialogue: the RM's system prompt and
  the problem with its reference solution (its compute_scaffolding_score layout)."""
  return [{"role": "system", "content": system_prompt},
          {"role": "user", "content": f"Problem: {problem}\nReference Solution: "
                                      f"{reference_solution}"}]


def turn_chats(d, fmt: str = "reference", system_prompt: str | None = None) -> list[list[dict]]:
  """One chat per tutor message of dialogue `d`: the context the RM reads, ending in it."""
  if fmt == "reference":
    opening = [{"role": "user", "content": f"Problem: {d.problem}"}]
  elif fmt == "mathtutorbench":
    opening = mathtutorbench_opening(d.problem, d.answer, system_prompt)
  else:
    raise ValueError(f"pedrm format {fmt!r} is not one of {FORMATS}")
  turns = [{"role": "assistant" if m.role == TUTOR else "user", "content": m.text}
           for m in d.messages]
  return [opening + turns[:i + 1] for i, m in enumerate(d.messages) if m.role == TUTOR]


@functools.partial(jax.jit, static_argnums=0)
def _scores(model, params, tokens, mask):
  hidden, _ = model.apply({"params": params}, tokens, mask)
  logits = model.apply({"params": params}, hidden, method=type(model).logits)
  return pool_last(logits, mask, tokens, model.cfg.pad_token_id)[:, 0]


def check(settings: PedRMSettings):
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


class PedRM:
  """A sequence-classification checkpoint that scores chats: `score(chats) -> [float]`."""

  def __init__(self, settings: PedRMSettings):
    self.settings, self.cut = settings, 0
    self.cfg = cfg = check(settings)
    self.model = models.build_model(cfg)
    self.params = models.load_params(settings.path, cfg)
    self.chat = ChatFormat(load_tokenizer(settings.path, require_chat_template=True))
    self.system_prompt = None
    if settings.format == "mathtutorbench":
      with open(settings.system_prompt_file, encoding="utf-8") as f:
        self.system_prompt = f.read().strip()

  def ids(self, chat) -> list[int]:
    return self.chat.encode(self.chat.render(chat, add_generation_prompt=False))

  def score(self, chats) -> list[float]:
    """The model's scalar for each chat (its last non-pad token's score)."""
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
      tokens = np.full((n, t), pad, np.int32)
      mask = np.zeros((n, t), bool)
      for i, r in enumerate(part):
        tokens[i, t - len(r):], mask[i, t - len(r):] = r, True
      mask[len(part):, -1] = True  # Filler rows: one token, finite scores, dropped.
      out += np.asarray(_scores(self.model, self.params, jnp.asarray(tokens),
                                jnp.asarray(mask)))[:len(part)].tolist()
    if not np.all(np.isfinite(out)):
      bad = int(np.flatnonzero(~np.isfinite(out))[0])
      raise PedRMError(f"the reward model gave a non-finite score ({out[bad]}) to input {bad} "
                       f"of {len(out)} ({len(rows[bad])} tokens); check its weights and dtype")
    return [float(x) for x in out]

  def score_dialogues(self, dialogues) -> list[list[float]]:
    """Per dialogue, the score of each tutor turn in order."""
    chats = [turn_chats(d, self.settings.format, self.system_prompt) for d in dialogues]
    flat = self.score([c for cs in chats for c in cs])
    out, at = [], 0
    for cs in chats:
      out.append(flat[at:at + len(cs)])
      at += len(cs)
    return out
