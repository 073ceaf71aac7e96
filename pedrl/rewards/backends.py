"""Where judge replies come from: an OpenAI-compatible endpoint, a local model, or rules.

Every backend is a `pedrl.rewards.asking.TextBackend`: `complete(requests, round)
-> [reply text | Exception]`, one entry per request; an exception stands for a
request whose API retries ran out, and `asking.ask` counts it and asks again
next round. The endpoint backend is the general client
(pedrl.clients.openai_compat.OpenAIBackend); its own `stats` count its API
retries (retries, retries/<kind>).
"""
import collections
import dataclasses
import json
import re
from typing import Sequence

from pedrl import distributed, streams
from pedrl.clients.openai_compat import EndpointError, OpenAIBackend, failure_kind
from pedrl.env import chat
from pedrl.env.dialogue import STUDENT, TUTOR, Dialogue
from pedrl.env.party import Party
from pedrl.rewards.asking import TextRequest
from pedrl.rewards.judging import JudgeError, Request
from pedrl.rewards.settings import RuleJudgeSettings


@dataclasses.dataclass
class MainProcessCalls:
  """An API backend on a multi-host run: process 0 calls it, every process gets its replies.

  All processes run the same host-side program; sampled replies that differed
  between hosts would steer them into different computations (and a pod that
  hangs), and every host calling would multiply the API bill. `inner` is None
  on the other processes (they need no API key).
  """
  inner: OpenAIBackend | None

  @property
  def stats(self) -> collections.Counter:  # Counted on process 0, the one that writes metrics.
    return self.inner.stats if self.inner is not None else collections.Counter()

  def complete(self, requests: Sequence[TextRequest],
               round_: int = 0) -> list[str | Exception]:
    message = self._on_main(lambda: [
        {"error": f"{type(r).__name__}: {r}", "kind": failure_kind(r)}
        if isinstance(r, Exception) else {"text": r}
        for r in self.inner.complete(requests, round_)])
    return [_failed_request(m) if "error" in m else m["text"] for m in message]

  def preflight(self) -> None:
    self._on_main(lambda: self.inner.preflight())  # inner is None off process 0.

  @staticmethod
  def _on_main(call):
    """call()'s result (JSON-able) on every process. An exception on process 0 is raised
    on every process: raised there alone, the others would hang."""
    message = None
    if distributed.is_main_process():
      try:
        message = {"result": call()}
      except (JudgeError, EndpointError) as e:  # Already one clear line.
        message = {"fatal": str(e)}
      except Exception as e:
        message = {"fatal": f"{type(e).__name__}: {e}"}
    message = distributed.broadcast_json(message)
    if "fatal" in message:
      raise JudgeError(message["fatal"])
    return message["result"]


def _failed_request(message: dict) -> JudgeError:
  """Process 0's failed request, keeping its counter name (openai_compat.failure_kind)."""
  error = JudgeError(message["error"])
  error.kind = message.get("kind")
  return error


# -- A pedrl model on the training mesh ------------------------------------------------------

@dataclasses.dataclass
class LocalBackend:
  """Samples judge replies from a pedrl model (a pedrl.env.party.Party), batched.

  Paper 003's training judge is a local Qwen2.5-14B-Instruct. Each request is
  one sample with its own key (seed, request uid, round).
  """
  party: Party
  temperature: float = 0.6
  prompts_per_call: int = 32
  seed: int = 0

  def complete(self, requests: Sequence[Request], round_: int = 0) -> list[str | Exception]:
    from pedrl.env import solving
    party = dataclasses.replace(self.party, sampling=dataclasses.replace(
        self.party.sampling, temperature=self.temperature))
    chats = [[{"role": "user", "content": r.prompt}] for r in requests]
    context = party.sampler.cfg.max_position_embeddings
    for r, c in zip(requests, chats):
      n = len(party.chat.prompt_ids(c))
      if n + party.sampling.max_new_tokens > context:
        raise JudgeError(f"the {r.spec.name} judge prompt ({r.spec.prompt}) is {n} tokens; with "
                         f"{party.sampling.max_new_tokens} new tokens it exceeds the local "
                         f"judge model's context of {context}")
    uids = [r.uid * 16 + round_ for r in requests]
    texts = solving.sample(party, chats, uids, k=1, seed=self.seed, stream=streams.JUDGE,
                           prompts_per_call=self.prompts_per_call)
    return [t[0] for t in texts]


# -- Rules: offline smoke runs and a cross-check -----------------------------------------------

@dataclasses.dataclass(frozen=True)
class RuleBackend:
  """Deterministic stand-ins for the judges, answering in the judges' JSON (a decision
  in the words its judge's prompt asks for, `JudgeSpec.words`), with the limits of
  `limits` (a job's `rule_judges` section).

  leakage: REJECT when the reference answer appears as a whole number/word in
    a tutor's visible message before any student message states it. It misses
    paraphrases ("twelve", "the answer is one dozen") and flags a tutor who
    happens to use the same number for something else.
  helpfulness: REJECT when a tutor message is empty, longer than
    `max_tutor_words`, or the tutor says more than `max_tutor_share` of the
    dialogue's words. Language mixing and realism are not checked.
  thinking: score = share of tutor messages with a non-empty thinking block: a
    format check, not a judgment of pedagogical quality.
  """
  limits: RuleJudgeSettings = RuleJudgeSettings()

  def complete(self, requests: Sequence[Request], round_: int = 0) -> list[str | Exception]:
    del round_
    rules = {"leakage": self.leakage, "helpfulness": self.helpfulness, "thinking": self.thinking}
    out = []
    for r in requests:
      if r.spec.name not in rules:
        raise JudgeError(f"no rule for judge {r.spec.name!r}; rules: {sorted(rules)}")
      answer = rules[r.spec.name](r.dialogue)
      if isinstance(answer, tuple):  # A decision: (ok, why).
        ok, why = answer
        word = next(w for w, means in r.spec.words if means == ok)
        answer = json.dumps({"reasoning": why, "decision": word})
      out.append(answer)
    return out

  @staticmethod
  def _verdict(ok: bool, why: str) -> tuple[bool, str]:
    return ok, why

  def leakage(self, d: Dialogue) -> tuple[bool, str]:
    answer = d.answer.strip()
    pattern = re.compile(r"(?<![\w.])" + re.escape(answer) + r"(?![\w]|\.\d)")
    for m in d.messages:
      if pattern.search(m.text):
        if m.role == STUDENT:
          return self._verdict(True, "the student stated the answer first")
        return self._verdict(False, f"the tutor wrote the answer {answer!r}")
    return self._verdict(True, "the answer does not appear")

  def helpfulness(self, d: Dialogue) -> tuple[bool, str]:
    words = {TUTOR: 0, STUDENT: 0}
    for m in d.messages:
      n = len(m.text.split())
      words[m.role] += n
      if m.role == TUTOR and (n == 0 or n > self.limits.max_tutor_words):
        return self._verdict(False, f"a tutor message has {n} words")
    total = sum(words.values())
    if total and words[TUTOR] / total > self.limits.max_tutor_share:
      return self._verdict(False, f"the tutor says {words[TUTOR]} of {total} words")
    return self._verdict(True, "concise, student does most of the talking")

  @staticmethod
  def thinking(d: Dialogue) -> str:
    turns = [m for m in d.messages if m.role == TUTOR]
    score = sum(bool(chat.split_thinking(m.raw or m.text)[1]) for m in turns) / max(len(turns), 1)
    return json.dumps({"score": score, "reasoning": "share of turns with thinking"})
