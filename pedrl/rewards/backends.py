"""Where judge replies come from: an OpenAI-compatible endpoint, a local model, or rules.

Every backend has `complete(requests, round) -> [reply text | Exception]`, one
entry per `judging.Request`; an exception stands for a request whose API
retries ran out, and `judging.judge` counts it and asks again next round.
"""
import concurrent.futures
import dataclasses
import json
import os
import random
import re
import threading
import time

from pedrl import distributed
from pedrl.env import chat
from pedrl.env.dialogue import STUDENT, TUTOR
from pedrl.rewards.judging import JudgeError, JudgeStats

JUDGE_STREAM = 3  # Beside rollout.DIALOGUE_STREAM, PRE_SOLVE_STREAM, POST_SOLVE_STREAM.


# -- OpenAI-compatible endpoints (OpenAI, vLLM, Gemini's compatibility endpoint) -------------

@dataclasses.dataclass
class OpenAIBackend:
  """Chat completions through the `openai` client, with bounded concurrency and retries.

  The key is read from the environment variable named `api_key_env`; the key
  itself is never in a config or a log line. Timeouts, connection errors, 429
  and 5xx are retried with exponential backoff and jitter, at most `max_tries`
  tries per call (paper 001 uses 5); other API errors (bad key, unknown model)
  stop the run with a JudgeError.
  """
  model: str
  base_url: str | None = None
  api_key_env: str = "OPENAI_API_KEY"
  temperature: float = 0.6  # The reference code's judge temperature.
  max_tokens: int = 1024
  max_concurrency: int = 16
  timeout: float = 60.0
  max_tries: int = 5
  backoff_base: float = 1.0  # Seconds before the 2nd try; doubles each try, ±50% jitter.
  backoff_max: float = 30.0
  stats: JudgeStats = dataclasses.field(default_factory=JudgeStats)

  def __post_init__(self):
    import openai
    key = os.environ.get(self.api_key_env)
    if not key:
      raise JudgeError(f"the environment variable {self.api_key_env} is not set; it must hold "
                       f"the API key for the judge endpoint {self.base_url or 'api.openai.com'}")
    self._openai = openai
    self._lock = threading.Lock()  # Counters are bumped from the worker threads.
    self._client = openai.OpenAI(api_key=key, base_url=self.base_url, timeout=self.timeout,
                                 max_retries=0)  # Retries are ours: counted, with jitter.

  def complete(self, requests, round_: int = 0):
    del round_
    with concurrent.futures.ThreadPoolExecutor(self.max_concurrency) as pool:
      return list(pool.map(self._one, [r.prompt for r in requests]))

  def _count(self, key: str):
    with self._lock:
      self.stats[key] += 1

  def _one(self, prompt: str):
    o = self._openai
    # Timeouts, connection errors, 429, 5xx, and replies that are not a completion.
    retryable = (o.APITimeoutError, o.APIConnectionError, o.RateLimitError, o.InternalServerError,
                 o.APIResponseValidationError, ValueError)
    for attempt in range(self.max_tries):
      try:
        out = self._client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": prompt}],
            temperature=self.temperature, max_tokens=self.max_tokens)
        if not out.choices:
          raise ValueError("the completion has no choices")
        return out.choices[0].message.content or ""
      except retryable as e:
        if attempt + 1 == self.max_tries:
          return e
        self._count("retries")
        self._count(f"retries/{type(e).__name__}")
        delay = min(self.backoff_max, self.backoff_base * 2 ** attempt)
        time.sleep(delay * random.uniform(0.5, 1.5))
      except o.APIStatusError as e:  # 400, 401, 403, 404, ...: retrying cannot help.
        raise JudgeError(f"judge endpoint {self.base_url or 'api.openai.com'} (model "
                         f"{self.model!r}) refused the request: HTTP {e.status_code} "
                         f"{type(e).__name__}") from None


@dataclasses.dataclass
class MainProcessCalls:
  """An API backend on a multi-host run: process 0 calls it, every process gets its replies.

  All processes run the same host-side program; sampled replies that differed
  between hosts would steer them into different computations (and a pod that
  hangs), and every host calling would multiply the API bill. `inner` is None
  on the other processes (they need no API key).
  """
  inner: object

  @property
  def stats(self):  # Counted on process 0, the one that writes metrics.
    return self.inner.stats if self.inner is not None else JudgeStats()

  def complete(self, requests, round_: int = 0):
    message = None
    if distributed.is_main_process():
      try:
        message = [{"error": f"{type(r).__name__}: {r}"} if isinstance(r, Exception) else
                   {"text": r} for r in self.inner.complete(requests, round_)]
      except Exception as e:  # Raised on every process, not here alone (they would hang).
        message = {"fatal": f"{type(e).__name__}: {e}"}
    message = distributed.broadcast_json(message)
    if isinstance(message, dict):
      raise JudgeError(message["fatal"])
    return [JudgeError(m["error"]) if "error" in m else m["text"] for m in message]


# -- A pedrl model on the training mesh ------------------------------------------------------

@dataclasses.dataclass
class LocalBackend:
  """Samples judge replies from a pedrl model (a rollout.Party), batched.

  Paper 003's training judge is a local Qwen2.5-14B-Instruct. Each request is
  one sample with its own key (seed, request uid, round).
  """
  party: object
  temperature: float = 0.6
  prompts_per_call: int = 32
  seed: int = 0

  def complete(self, requests, round_: int = 0):
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
    texts = solving.sample(party, chats, uids, k=1, seed=self.seed, stream=JUDGE_STREAM,
                           prompts_per_call=self.prompts_per_call)
    return [t[0] for t in texts]


# -- Rules: offline smoke runs and a cross-check -----------------------------------------------

@dataclasses.dataclass
class RuleBackend:
  """Deterministic stand-ins for the judges, answering in the judges' JSON.

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
  max_tutor_words: int = 150
  max_tutor_share: float = 0.6

  def complete(self, requests, round_: int = 0):
    del round_
    rules = {"leakage": self.leakage, "helpfulness": self.helpfulness, "thinking": self.thinking}
    out = []
    for r in requests:
      if r.spec.name not in rules:
        raise JudgeError(f"no rule for judge {r.spec.name!r}; rules: {sorted(rules)}")
      out.append(rules[r.spec.name](r.dialogue))
    return out

  @staticmethod
  def _verdict(ok: bool, why: str) -> str:
    return json.dumps({"reasoning": why, "decision": "OK" if ok else "REJECT"})

  def leakage(self, d) -> str:
    answer = d.answer.strip()
    pattern = re.compile(r"(?<![\w.])" + re.escape(answer) + r"(?![\w]|\.\d)")
    for m in d.messages:
      if pattern.search(m.text):
        if m.role == STUDENT:
          return self._verdict(True, "the student stated the answer first")
        return self._verdict(False, f"the tutor wrote the answer {answer!r}")
    return self._verdict(True, "the answer does not appear")

  def helpfulness(self, d) -> str:
    words = {TUTOR: 0, STUDENT: 0}
    for m in d.messages:
      n = len(m.text.split())
      words[m.role] += n
      if m.role == TUTOR and (n == 0 or n > self.max_tutor_words):
        return self._verdict(False, f"a tutor message has {n} words")
    total = sum(words.values())
    if total and words[TUTOR] / total > self.max_tutor_share:
      return self._verdict(False, f"the tutor says {words[TUTOR]} of {total} words")
    return self._verdict(True, "concise, student does most of the talking")

  @staticmethod
  def thinking(d) -> str:
    turns = [m for m in d.messages if m.role == TUTOR]
    score = sum(bool(chat.split_thinking(m.raw or m.text)[1]) for m in turns) / max(len(turns), 1)
    return json.dumps({"score": score, "reasoning": "share of turns with thinking"})
