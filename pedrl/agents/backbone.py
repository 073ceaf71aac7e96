"""The LLM an agent runs on: a local pedrl model or an OpenAI-compatible endpoint.

An agent hands a backbone every conversation of a stage at once: a local model
samples them in one batched engine call (chunks of `batch` rows), an endpoint
gets them as concurrent requests (the client's `max_concurrency`). Each reply
is a text, or the exception that ended an endpoint's retries (asking counts
it). `stats` counts calls, tokens and, per stage, the calls made (named as API
clients name their counters, which jobs sum per shard), so a run can report what
an agent cost per instance.
"""
import collections
from collections.abc import Sequence

from pedrl import streams
from pedrl.engine.distribution import SamplingParams
from pedrl.env import party as party_lib


class Usage(collections.Counter):
  """calls, prompt_tokens, completion_tokens, prompts_cut, and calls/<stage>."""

  def add(self, stage: str, prompt_tokens: int, completion_tokens: int, cut: bool = False) -> None:
    self["calls"] += 1
    self[f"calls/{stage}"] += 1
    self["prompt_tokens"] += prompt_tokens
    self["completion_tokens"] += completion_tokens
    self["prompts_cut"] += int(cut)


class LocalBackbone:
  """A pedrl Party (a local checkpoint or a training run's tutor) sampling replies.

  Row i of a call draws from key (seed, AGENT, uids[i], steps[i]): the agent
  numbers each instance's calls, so a reply does not depend on the batch it is
  in. A conversation too long for the context with max_new_tokens is an error,
  or with `truncate_prompts` (tiny models) cut at its start and counted.
  """

  def __init__(self, party, sampling: SamplingParams, seed: int = 0, batch: int = 64,
               truncate_prompts: bool = False) -> None:
    self.party, self.seed, self.batch = party, seed, batch
    self.sampling = party.sampler.with_stops(sampling)
    self.truncate_prompts = truncate_prompts
    self.stats = Usage()

  def _ids(self, conversation) -> tuple[list, bool]:
    return party_lib.fit_context(self.party, self.party.chat.prompt_ids(conversation),
                                 self.sampling.max_new_tokens, self.truncate_prompts,
                                 "a backbone prompt")

  def chat(self, conversations: Sequence[list[dict]], stage: str, uids: Sequence[int],
           steps: Sequence[int]) -> list:
    texts = []
    for lo in range(0, len(conversations), self.batch):
      rows, cut = zip(*(self._ids(c) for c in conversations[lo:lo + self.batch]))
      keys = streams.random_keys(self.seed, streams.AGENT, uids[lo:lo + self.batch],
                                 steps[lo:lo + self.batch])
      gen, _ = self.party.sampler.generate(self.party.params, list(rows), keys, self.sampling)
      for i, (r, c) in enumerate(zip(rows, cut)):
        self.stats.add(stage, len(r), int(gen.lengths[i]), c)
      texts += gen.texts
    return texts


class EndpointBackbone:
  """An OpenAI-compatible chat endpoint (pedrl.clients.openai_compat.OpenAIBackend, with the
  agent's temperature, top_p and max_tokens): concurrent requests, retried by the client.
  With a `seed`, row i of a call sends the API's `seed` of (seed, AGENT, uids[i],
  steps[i]) (pedrl.streams.request_seed), as a local backbone keys its draws: a vLLM or
  pedrl.serve endpoint then draws each call from it (OpenAI's seed is best effort)."""

  def __init__(self, client, seed: int | None = None) -> None:
    self.client, self.seed = client, seed
    self.stats = Usage()

  def chat(self, conversations: Sequence[list[dict]], stage: str, uids: Sequence[int],
           steps: Sequence[int]) -> list:
    seeds = None if self.seed is None else [
        streams.request_seed(self.seed, streams.AGENT, u, t) for u, t in zip(uids, steps)]
    out = []
    replies = (self.client.chat(conversations) if seeds is None else
               self.client.chat(conversations, seeds=seeds))
    for r in replies:
      if isinstance(r, Exception):
        out.append(r)
        continue
      self.stats.add(stage, r.prompt_tokens, r.completion_tokens)
      out.append(r.text)
    return out
