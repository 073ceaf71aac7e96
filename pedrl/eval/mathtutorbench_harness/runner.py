"""Answering MathTutorBench tasks with any policy: rendered prompts in, replies out.

A policy is `policy(prompts, stop, uids) -> (replies, whether each prompt was
cut)`: a local model on pedrl's engine (`ModelPolicy`) or an OpenAI-compatible
endpoint (`EndpointPolicy`). A policy with `traced = True` (an agent,
`pedrl.agents.bench.AgentPolicy`: CPA and its prompting baselines, paper 002)
is also passed `task=` (the task's name: which contract applies) and returns a
third list: a trace per reply. No policy is passed the examples: the prompt is
all it sees, and the tutoring tasks' prompts show the problem and the dialogue
but not the reference solution (the task files' system_prompt), the structured
tasks' not their labels. `answer` turns one batch of a task's
examples into BenchRecords: the rendered prompts, the policy's replies as the
harness keeps them, the harness's parse and, for the pedagogical tasks, the
Ped-RM scores of the reply and of the human teacher's turn. The metrics are
computed from the records (pedrl.eval.mathtutorbench_harness.results), so shards and
reruns need nothing else.
"""

from collections.abc import Callable, Sequence

import numpy as np

from pedrl import streams
from pedrl.clients import openai_compat
from pedrl.engine import Sampler, stops
from pedrl.engine.distribution import SamplingParams
from pedrl.env import party
from pedrl.eval import pedrm, records as records_lib
from pedrl.eval.mathtutorbench_harness import tasks, win_rate
from pedrl.mathtutorbench_rules import scoring
# Re-exported: defined there, importable without JAX.
from pedrl.eval.settings import MODES, BenchSettings



class ModelPolicy:
  """A local pedrl model (a Party) answering prompts: batched, the task's stop strings.
  A reply's text leaves special tokens out, as the vLLM server the harness runs behind
  returns it (skip_special_tokens, its default): a `<|im_start|>` the model samples
  mid-reply is not in the text the harness parses and the reward model reads."""

  def __init__(self, party, settings: BenchSettings, seed: int = 0) -> None:
    self.party, self.s, self.seed = party, settings, seed
    self.samplers = {}  # One per stop-string set (a task's stop strings).

  def _sampler(self, stop: tuple) -> Sampler:
    if stop not in self.samplers:
      base = self.party.sampler
      self.samplers[stop] = Sampler(base.model, base.tokenizer, stop_strings=stop,
                                    mesh=base.mesh, compact=base.compact,
                                    skip_special_tokens=True)
    return self.samplers[stop]

  def ids(self, prompt: str) -> tuple[list, bool]:
    """The prompt's tokens in the configured mode, cut to fit if allowed; (ids, cut)."""
    chat = self.party.chat
    # Completion mode tokenizes as a vLLM server does: with the tokenizer's own special
    # tokens (Llama's BOS; none for Qwen).
    ids = (chat.prompt_ids([{"role": "system", "content": prompt}]) if self.s.mode == "chat"
           else list(chat.tokenizer(prompt)["input_ids"]))
    return party.fit_context(self.party, ids, self.s.max_new_tokens, self.s.truncate_prompts)

  def __call__(self, prompts: Sequence[str], stop: Sequence[str],
               uids: Sequence[int]) -> tuple[list[str], list[bool]]:
    """(replies, whether each prompt was cut)."""
    sampler = self._sampler(tuple(stop))
    sp = sampler.with_stops(SamplingParams(self.s.max_new_tokens,
                                           temperature=self.s.temperature))
    rows, cut = zip(*(self.ids(p) for p in prompts))
    gen, _ = sampler.generate(self.party.params, list(rows),
                              streams.sequence_keys(self.seed, uids), sp)
    return [kept(self.s.mode, t) for t in gen.texts], list(cut)


def kept(mode: str, reply: str) -> str:
  """The reply as the harness keeps it: its completion mode strips the text, chat does not."""
  return reply.strip() if mode == "completion" else reply


class EndpointPolicy:
  """An OpenAI-compatible endpoint answering prompts as the harness asks it: completion
  mode on /v1/completions, chat mode as one system message on /v1/chat/completions, the
  task's stop strings sent (and applied here too, for servers that ignore them).

  client: pedrl.clients.openai_compat.OpenAIBackend with the harness's temperature and
  max_tokens."""

  def __init__(self, client, settings: BenchSettings) -> None:
    self.client, self.s = client, settings

  def __call__(self, prompts: Sequence[str], stop: Sequence[str],
               uids: Sequence[int]) -> tuple[list[str], list[bool]]:
    del uids  # The endpoint's sampling is its own (greedy at temperature 0).
    stop = tuple(stop)
    out = (self.client.text_completions(prompts, stop) if self.s.mode == "completion" else
           self.client.chat([[{"role": "system", "content": p}] for p in prompts], stop))
    for r in out:
      if isinstance(r, Exception):
        raise openai_compat.EndpointError(f"the endpoint under test failed a request after "
                                          f"its retries ({type(r).__name__}: {r})")
    return [kept(self.s.mode, r.text[:stops.find_stop(r.text, stop)[0]]) for r in out], (
        [False] * len(out))


def answer(task: str, t: tasks.TaskFile, examples: Sequence[dict], indices: Sequence[int],
           batch: int, policy: Callable[..., tuple], rm: pedrm.PedRM | None = None
           ) -> list[records_lib.BenchRecord]:
  """The BenchRecords of one batch: `examples` of `task` at `indices` (the harness's
  order) put to `policy`; with a Ped-RM `rm`, the pedagogical tasks' replies and human
  teacher turns are scored (the win rate's inputs)."""
  prompts = [t.prompt(x) for x in examples]
  traces = [None] * len(examples)
  if getattr(policy, "traced", False):
    replies, cut, traces = policy(prompts, t.stop, list(indices), task=task)
  else:
    replies, cut = policy(prompts, t.stop, list(indices))
  predictions = [scoring.parse(task, r) for r in replies]
  pedagogical = task in tasks.PEDAGOGICAL
  scores = baselines = [None] * len(examples)
  if pedagogical and rm is not None:
    scores, baselines = win_rate.pair_scores(rm, examples, predictions, rm.system_prompt)
  return [records_lib.BenchRecord(
      task=task, index=i, batch=batch, prompt=p, response=r, target=t.target(x),
      prediction=_json(y), prompt_cut=bool(c), score=a, baseline_score=b,
      context=win_rate.context(x) if pedagogical else None, trace=tr)
      for i, x, p, r, y, c, a, b, tr in zip(indices, examples, prompts, replies, predictions, cut,
                                            scores, baselines, traces)]


def _json(value):
  return float(value) if isinstance(value, (np.floating, float)) else value


