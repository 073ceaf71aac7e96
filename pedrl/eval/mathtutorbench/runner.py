"""Running MathTutorBench tasks with any policy: rendered prompts in, replies out.

A policy is `policy(prompts, stop) -> replies`: a local model on pedrl's engine
(`ModelPolicy`) now; the CPA agent and its prompting baselines (paper 002)
plug in the same way. `run_task` renders the task's prompts, asks the policy
in batches, appends each batch to WORKDIR/responses-<task>.jsonl (a rerun
continues after the last complete batch), parses the replies and computes the
harness's metrics.
"""
import dataclasses
import json
import os

import numpy as np

from pedrl import streams
from pedrl.engine import Sampler
from pedrl.engine.distribution import SamplingParams
from pedrl.env import dialogue as records_io
from pedrl.eval.mathtutorbench import scoring, tasks

MODES = ("chat", "completion")


@dataclasses.dataclass(frozen=True)
class BenchSettings:
  """The config's top-level benchmark keys (defaults: the harness's)."""
  benchmark_dir: str | None = None  # A MathTutorBench checkout (its configs/).
  data_dir: str | None = None  # gsm8k/, stepverify/, mathtutorbench/ (as ../shared/data).
  tasks: str = ",".join(tasks.TASKS)
  mode: str = "chat"  # chat: the prompt as the only (system) message; completion: raw text.
  max_new_tokens: int = 2048  # The harness's max_tokens.
  temperature: float = 0.0  # The harness's: greedy.
  limit: int = 0  # > 0: the first `limit` examples of each task (smoke runs).
  batch_examples: int = 16
  # A prompt longer than the context with max_new_tokens: an error, or (True) its start cut
  # off to fit, counted in results and flagged in the responses (tiny runs only).
  truncate_prompts: bool = False
  model_name: str = "model"  # In generations-<model>-<task>.json.

  @property
  def names(self) -> tuple:
    return tuple(t.strip() for t in self.tasks.split(",") if t.strip())

  def __post_init__(self):
    if self.mode not in MODES:
      raise ValueError(f"mode {self.mode!r} is not one of {MODES}")
    for t in self.names:
      if t not in tasks.TASKS:
        raise ValueError(f"unknown MathTutorBench task {t!r}; the tasks: {', '.join(tasks.TASKS)}")
    if "-" in self.model_name:
      raise ValueError("model_name must not contain '-': the benchmark's reward-model script "
                       "reads the model and task from generations-<model>-<task>.json")


class ModelPolicy:
  """A local pedrl model (a Party) answering prompts: batched, the task's stop strings."""

  def __init__(self, party, settings: BenchSettings, seed: int = 0):
    self.party, self.s, self.seed = party, settings, seed
    self.samplers = {}
    self.truncated = 0

  def _sampler(self, stop: tuple) -> Sampler:
    if stop not in self.samplers:
      base = self.party.sampler
      self.samplers[stop] = Sampler(base.model, base.tokenizer, stop_strings=stop,
                                    mesh=base.mesh)
    return self.samplers[stop]

  def ids(self, prompt: str) -> tuple[list, bool]:
    """The prompt's tokens in the configured mode, cut to fit if allowed; (ids, cut)."""
    chat = self.party.chat
    ids = (chat.prompt_ids([{"role": "system", "content": prompt}]) if self.s.mode == "chat"
           else chat.encode(prompt))
    room = self.party.sampler.cfg.max_position_embeddings - self.s.max_new_tokens
    if len(ids) <= room:
      return ids, False
    if not self.s.truncate_prompts:
      raise ValueError(f"a prompt of {len(ids)} tokens + max_new_tokens={self.s.max_new_tokens} "
                       f"exceeds the model's context of "
                       f"{self.party.sampler.cfg.max_position_embeddings}")
    return ids[len(ids) - room:], True

  def __call__(self, prompts, stop, uids) -> tuple[list, list]:
    """(replies, whether each prompt was cut)."""
    sampler = self._sampler(tuple(stop))
    sp = sampler.with_stops(SamplingParams(self.s.max_new_tokens,
                                           temperature=self.s.temperature))
    rows, cut = zip(*(self.ids(p) for p in prompts))
    gen, _ = sampler.generate(self.party.params, list(rows),
                              streams.sequence_keys(self.seed, uids), sp)
    return list(gen.texts), list(cut)


def responses_path(workdir: str, task: str) -> str:
  return os.path.join(workdir, f"responses-{task}.jsonl")


@dataclasses.dataclass
class TaskResult:
  """What a task gave: the harness's metrics (plus counts) and every reply, in order."""
  metrics: dict
  replies: list


def run_task(task: str, t: tasks.TaskFile, examples: list, settings: BenchSettings, policy,
             workdir: str, progress=None) -> TaskResult:
  """Answers `examples` of `task` (resuming its responses file) and scores them."""
  path = responses_path(workdir, task)
  have = records_io.read_rows(path)  # Batches are single synced writes: a kill cuts one.
  whole = len(have) if len(have) >= len(examples) else (
      len(have) - len(have) % settings.batch_examples)
  done = have[:whole]
  if whole < len(have):
    records_io.append_rows(done, path, mode="w")  # A cut batch runs again whole.
  if progress:
    progress(len(done))
  for lo in range(len(done), len(examples), settings.batch_examples):
    part = examples[lo:lo + settings.batch_examples]
    prompts = [t.prompt(x) for x in part]
    replies, cut = policy(prompts, t.stop, list(range(lo, lo + len(part))))
    rows = [{"index": lo + i, "prompt": p, "response": r, "target": t.target(x),
             "prediction": _json(scoring.parse(task, r)), "prompt_cut": c}
            for i, (x, p, r, c) in enumerate(zip(part, prompts, replies, cut))]
    records_io.append_rows(rows, path)
    done += rows
    if progress:
      progress(len(part))
  replies = [r["response"] for r in done]
  out = scoring.compute(task, [scoring.parse(task, r) for r in replies],
                        [r["target"] for r in done])
  out.update(examples=len(done), prompts_cut=sum(r["prompt_cut"] for r in done))
  return TaskResult(out, replies)


def _json(value):
  return float(value) if isinstance(value, (np.floating, float)) else value


def write_generations(workdir: str, model: str, task: str, rows) -> str:
  path = os.path.join(workdir, f"generations-{model}-{task}.json")
  with open(path, "w", encoding="utf-8") as f:
    json.dump(rows, f, indent=2, ensure_ascii=False)
  return path
