r"""Labelling the tutors' sentences: table 5's codebook and Schoenfeld's phases (paper 001).

Two schemes, each over its own units:

  codebook    every sentence of a tutor turn's visible text gets one of the
              codebook's codes (section 4.2: GPT-5-mini labelled 150,000 sentences)
  schoenfeld  every sentence of a tutor turn's thinking gets Explore, General or
              Verify (section 4.1, appendix E.2); `thinking_unit="paragraph"` cuts
              the thinking at blank lines instead

Sentences are pedrl.eval.analysis.text's. A labeller sees one unit at a time,
without the dialogue around it: the paper labels sentence by sentence, and a
unit's label then depends on its text alone, so it is asked once however often
the text occurs ("Great job!") and cached by text.

The labeller is a text backend of pedrl.rewards.backends (`complete(requests,
round) -> [reply | Exception]`): an OpenAI-compatible endpoint, a local pedrl
model, or `RuleLabeller` (keyword rules for offline smoke runs and tests, no
judgment). Each scheme's prompt is a Jinja file, pedrl's own in
pedrl/eval/prompt_texts/analysis/ or the user's (a path): codebook prompts get
`sentence`, `codes` (the numbered list) and `n_codes`; Schoenfeld prompts get
`segment` and `phases`. Replies go through `asking.ask`: a reply that does not
parse is asked again, `rounds` asks in all; a unit still without a label is a
failure, kept with its cause (parse_failures, api_errors/<kind>) and counted,
never given a label.

Labels are cached per text in WORKDIR/labels/<role>/<scheme>-<hash>/, one JSONL
file per shard (`LabelStore`). The hash covers what decides a label (backend,
model, sampling, the prompt as rendered, the codebook), so a changed prompt
labels anew in its own folder, while a rerun or an added condition asks only
for texts not yet there. A text belongs to shard int(key, 16) mod N; each
shard appends a batch's rows when the batch ends (a kill loses that batch).
"""
from collections.abc import Iterable, Sequence
import dataclasses
import glob
import hashlib
import json
import os
import re
from typing import Any
import zlib

import numpy as np

from pedrl import files
from pedrl.env import dialogue as dialogue_lib, prompts
from pedrl.eval.analysis import text as text_lib
from pedrl.eval.analysis.codebook import Codebook
from pedrl.rewards import asking
from pedrl.eval.settings import SCHEMES, BACKENDS, THINKING_UNITS, ROLES, LabelSettings  # Re-exported: defined there, importable without JAX.

PHASES = ("Explore", "General", "Verify")  # Appendix E.2, table 10.
REPLY_KEPT = 300  # Characters of a failed unit's last reply kept in the cache.


class LabelError(RuntimeError):
  """A labeller cannot run (its endpoint is down, a prompt does not render)."""


# -- Units ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Unit:
  """One labelled piece of a condition's responses."""
  condition: str
  response: int  # Index of its response among the condition's.
  text: str


def paragraphs(text: str) -> list[str]:
  return [p.strip() for p in re.split(r"\n\s*\n", text or "") if any(c.isalnum() for c in p)]


def units(condition: str, responses: Sequence[Any], scheme: str,
          thinking_unit: str = "sentence") -> list:
  """The scheme's units of a condition's responses (pedrl.eval.analysis.responses)."""
  if scheme == "codebook":
    split, part = text_lib.sentences, "visible"
  else:
    split = text_lib.sentences if thinking_unit == "sentence" else paragraphs
    part = "thinking"
  return [Unit(condition, i, t) for i, r in enumerate(responses) for t in split(getattr(r, part))]


def sample(units_: list, n: int, seed: int, scheme: str) -> list:
  """A seeded subset of n of one condition's units (all of them if n <= 0 or n >= len),
  in their order; the same for a condition whatever else is analysed."""
  if n <= 0 or n >= len(units_):
    return list(units_)
  condition = units_[0].condition
  rng = np.random.default_rng([seed, zlib.crc32(condition.encode()), SCHEMES.index(scheme)])
  return [units_[i] for i in sorted(rng.choice(len(units_), size=n, replace=False))]


def key(text: str) -> str:
  return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def shard_of(k: str, num_shards: int) -> int:
  return int(k, 16) % num_shards


# -- Prompts and replies -------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Scheme:
  """A scheme as a backend sees it (LocalBackend names `name` and `prompt` in errors)."""
  name: str
  prompt: str  # The prompt's name or file.


def render(prompt: str, **variables: Any) -> str:
  """A prompt by name (pedrl.env.prompts) or, ending in .jinja/.txt or being a file, by path."""
  if prompt.endswith((".jinja", ".txt")) or os.path.isfile(prompt):
    return prompts.render_file(prompt, **variables)
  return prompts.render(prompt, **variables)


def code_list(codebook: Codebook) -> str:
  return "\n".join(f"{c.id}. {c.category} > {c.subcategory} > {c.name}" for c in codebook.codes)


def prompt_for(scheme: str, prompt: str, text: str, codebook: Codebook) -> str:
  try:
    if scheme == "codebook":
      return render(prompt, sentence=text, codes=code_list(codebook), n_codes=len(codebook.codes))
    return render(prompt, segment=text, phases=", ".join(PHASES))
  except (ValueError, KeyError) as e:
    raise LabelError(f"the {scheme} prompt {prompt!r}: {e}") from None


def _field(reply: str, key: str, pattern: str):
  """`key`'s value in the reply's JSON object or, failing that, in a `"key": value` pair in
  prose (a value matching `pattern`); None otherwise."""
  value = (files.json_object(reply or "") or {}).get(key)
  if value is None:
    m = re.search(rf"""["']?{key}["']?\s*[:=]\s*["']?({pattern})""", reply or "", re.I)
    value = m.group(1) if m else None
  return value


def parse_code(reply: str, codebook: Codebook) -> int | None:
  """The code a reply names: {"code": N} (a number or a numeric string) or, failing that,
  a `"code": N` pair in prose, or {"code": "NAME"} for a name only one code has; None
  otherwise (a number the codebook lacks, an ambiguous name, no code)."""
  value = _field(reply, "code", r"\d+")
  if isinstance(value, str) and not value.strip().isdigit():
    found = codebook.named(value)
    return found[0].id if len(found) == 1 else None
  if isinstance(value, bool) or not isinstance(value, (int, str)):
    return None
  return int(value) if codebook.by_id(int(value)) else None


def parse_phase(reply: str) -> str | None:
  """Explore, General or Verify from {"phase": ...}, a `phase: X` pair, or a reply that is
  the bare word; None otherwise."""
  value = _field(reply, "phase", "[A-Za-z]+")
  if value is None:
    value = (reply or "").strip().strip(".\"'")
  word = str(value).strip().capitalize()
  return word if word in PHASES else None


@dataclasses.dataclass(frozen=True)
class Request:
  """One unit text asked of a backend."""
  text: str
  key: str
  prompt: str
  uid: int  # Seeds a local labeller's sample: from the key, the same in every run.
  spec: Scheme


# -- The cache -----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LabelRow:
  """A text's label in the cache, or why it has none."""
  key: str
  text: str
  label: int | str | None  # A code number or a phase; None: a failure.
  cause: str | None = None  # parse_failures, api_errors/<kind>.
  reply: str | None = None  # A failure's last reply (its first REPLY_KEPT characters).


class LabelStore:
  """One labeller's labels of one scheme: every shard file of its folder, read together
  (so a rerun with another shard count still finds them). A text's label beats its
  failures, whichever file holds which: files are read by name, not by when they were
  written, so "the later row" is only known within one file, where it wins."""

  def __init__(self, folder: str) -> None:
    self.folder = folder

  def read(self) -> dict:
    out = {}
    for path in sorted(glob.glob(os.path.join(self.folder, "shard-*.jsonl"))):
      for n, row in enumerate(files.read_rows(path, dialogue_lib.RecordError), 1):
        try:
          r = LabelRow(**row)
        except TypeError as e:
          raise dialogue_lib.RecordError(f"{path}, line {n}: not a label row ({e})") from None
        if r.label is not None or r.key not in out or out[r.key].label is None:
          out[r.key] = r
    return out

  def append(self, rows: Iterable[LabelRow], shard: int, num_shards: int) -> None:
    os.makedirs(self.folder, exist_ok=True)
    path = os.path.join(self.folder, f"shard-{shard:05d}-of-{num_shards:05d}.jsonl")
    files.append_rows([dataclasses.asdict(r) for r in rows], path)


def pending(texts: Sequence[str], cache: dict, shard: int, num_shards: int,
            retry_failures: bool) -> list:
  """The texts this shard still has to ask: its own (by key), without a row in the cache
  or, retrying, with a failure there."""
  out = []
  for t in texts:
    k = key(t)
    if shard_of(k, num_shards) == shard and (
        k not in cache or (retry_failures and cache[k].label is None)):
      out.append(t)
  return out


def store_folder(workdir: str, role: str, scheme: str, identity: dict) -> str:
  digest = hashlib.sha1(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:10]
  return os.path.join(workdir, "labels", role, f"{scheme}-{digest}")


def identity(scheme: str, settings: LabelSettings, backend_identity: dict,
             codebook: Codebook) -> dict:
  """What decides a label: the backend, and the prompt as rendered (with the codebook)."""
  probe = prompt_for(scheme, settings.prompt(scheme), "\x00", codebook)
  return {"scheme": scheme, "backend": backend_identity, "prompt": probe}


# -- Asking --------------------------------------------------------------------------------

def label_texts(texts: Sequence[str], scheme: str, prompt: str, backend: asking.TextBackend,
                rounds: int, codebook: Codebook, stats: asking.AskStats) -> list:
  """LabelRows of distinct `texts` from `backend`: a label, or a failure with its cause."""
  spec = Scheme(scheme, prompt)
  requests = [Request(t, key(t), prompt_for(scheme, prompt, t, codebook),
                      int(key(t)[:6], 16), spec) for t in texts]
  replies = {}

  def read(r, reply):
    replies[r.key] = reply
    return parse_code(reply, codebook) if scheme == "codebook" else parse_phase(reply)
  asked = asking.ask(requests, backend.complete, read, rounds, stats,
                     who=f"{scheme} labeller", error=LabelError)
  return [LabelRow(r.key, r.text, label, asked.causes.get(i),
                   None if label is not None else (replies.get(r.key) or "")[:REPLY_KEPT])
          for i, (r, label) in enumerate(zip(requests, asked.answers))]


# -- Rules ---------------------------------------------------------------------------------

# (pattern on the lower-cased sentence, code name), first match wins; else FALLBACK_CODE.
CODE_RULES = (
    (r"\b(great|good job|well done|excellent|nice (work|job|try)|awesome|perfect|exactly|"
     r"that'?s (right|correct))\b", "Praise"),
    (r"\b(check|verify|double-check|make sure)\b", "Checking calculations"),
    (r"^(what|how|why|which|can you|could you|do you|where|when)\b.*\?$", "Exploratory question"),
    (r"\?$", "Follow-up question"),
    (r"^(first|next|then|now|step|let'?s|let us|start)\b", "Step-by-step instruction"),
    (r"\b(hint|remember|think about|consider|notice)\b", "Hint provision"),
    (r"\d\s*[-+*/×÷=]\s*\d|=", "Performing calculations"),
    (r"\b(try|give it a go|you can do|your turn)\b", "Encouraging participation"),
    (r"\b(means|is called|definition|formula|in general)\b", "Concept explanation"),
)
FALLBACK_CODE = "Information provision"
PHASE_RULES = ((r"\b(check|verify|confirm|double-check|make sure|correct)\b", "Verify"),
               (r"\b(maybe|perhaps|what if|alternatively|try|guess|not sure|hmm)\b", "Explore"))


@dataclasses.dataclass
class RuleLabeller:
  """Keyword rules answering in the labellers' JSON (CODE_RULES, PHASE_RULES; else
  FALLBACK_CODE or General): the whole labelling path runs offline, with labels that
  follow the text. A stand-in for smoke runs and tests, not a judgment."""
  codebook: Codebook

  def __post_init__(self) -> None:
    self._codes = [(re.compile(p), self.codebook.code(name).id) for p, name in CODE_RULES]
    self._fallback = self.codebook.code(FALLBACK_CODE).id

  def complete(self, requests: Sequence[Request], round_: int = 0) -> list[str]:
    del round_
    return [json.dumps(self.label(r.spec.name, r.text)) for r in requests]

  def label(self, scheme: str, text: str) -> dict:
    t = " ".join(text.lower().split())
    if scheme == "codebook":
      return {"code": next((c for p, c in self._codes if p.search(t)), self._fallback)}
    return {"phase": next((ph for p, ph in PHASE_RULES if re.search(p, t)), "General")}
