"""The OpenAI-compatible client every endpoint-backed side uses: judges, oracle and
classifiers (pedrl.rewards), a tutor or student side (pedrl.env.party.EndpointParty),
the CPA backbone (pedrl.agents.backbone) and the MathTutorBench endpoint under test.

It sits below pedrl.env so that the dialogue side can use it without the reward
code. A request that cannot succeed (no key, a refused key, an unknown model, an
endpoint down at preflight) raises `EndpointError` naming the endpoint's role;
each caller names it further (a judge batch: pedrl.rewards.judging.JudgeError).
Per-request failures that outlived their retries come back as exceptions in the
result list, never raised, so that a batch can count and re-ask them.
"""
import collections
import concurrent.futures
import datetime
import email.utils
import math
import os
import random
import threading
import time
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, Sequence

# Re-exported: defined there, importable without the openai package.
from pedrl.clients.settings import EndpointSettings


class EndpointError(RuntimeError):
  """An endpoint cannot serve a side at all (key, model, URL), or a side's request
  failed after all its retries."""


Chat = list[dict[str, str]]  # {"role", "content"} messages.


class Reply(NamedTuple):
  """One reply to a conversation: its text, why it ended ("stop", "length"), and the
  tokens the endpoint counted (0 when it reports no usage, or no endpoint made it)."""
  text: str
  finish_reason: str
  prompt_tokens: int = 0
  completion_tokens: int = 0


class Prompted(Protocol):
  """A request with one user prompt (pedrl.rewards.asking.TextRequest is one)."""
  prompt: str


def failure_kind(error: Exception) -> str:
  """A counter name for a failed request: the error's `kind` if it has one (e.g.
  non_completion_reply), else its class name (RateLimitError, APITimeoutError, ...)."""
  return getattr(error, "kind", None) or type(error).__name__


class NonCompletionReply(ValueError):
  """An answer that is no chat completion: a proxy's HTML error page (the client then
  returns a str), a body that is not JSON, JSON without choices or a message."""
  kind = "non_completion_reply"  # Its counter name (failure_kind).


def _describe(out, raw: bool = False) -> str:
  if isinstance(out, (str, bytes)):
    return f"a {type(out).__name__} body {out[:80]!r}"
  return f"a {type(out).__name__} with no usable choices[0].{'text' if raw else 'message'}"


def completion_text(out: Any, raw: bool = False) -> str:  # Any: whatever the endpoint sent.
  """The first choice's text of what `chat.completions.create` (with `raw`,
  `completions.create`) returned, or NonCompletionReply. A message without content (a
  refusal, a token budget spent on reasoning) is an empty reply, which the judge asks
  again."""
  choices = None if isinstance(out, (str, bytes)) else getattr(out, "choices", None)
  first = choices[0] if isinstance(choices, list) and choices else None
  message = first if raw else getattr(first, "message", None)
  content = getattr(message, "text" if raw else "content", None)
  if message is None or not isinstance(content, (str, type(None))):
    raise NonCompletionReply(f"no {'text' if raw else 'chat'} completion: the endpoint "
                             f"answered {_describe(out, raw)}")
  return content or ""


def retry_after(headers: Mapping[str, str] | None) -> float | None:
  """The seconds an error answer asks to wait: `retry-after-ms`, or `Retry-After` in
  seconds or as an HTTP date; None without a usable header."""
  if not headers:
    return None
  headers = {str(k).lower(): v for k, v in headers.items()}
  for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
    try:
      seconds = float(headers[name]) * scale
    except (KeyError, TypeError, ValueError):
      continue
    if math.isfinite(seconds):
      return max(seconds, 0.0)
  try:
    when = email.utils.parsedate_to_datetime(headers.get("retry-after"))
  except (TypeError, ValueError, IndexError):
    return None
  if when.tzinfo is None:  # HTTP dates are GMT.
    when = when.replace(tzinfo=datetime.timezone.utc)
  return max(when.timestamp() - time.time(), 0.0)


class OpenAIBackend:
  """Chat completions through the `openai` client, with bounded concurrency and retries.

  It holds its endpoint's settings (`settings`, a config's EndpointSettings) and its
  connection; `role` names what the endpoint is for in errors (judge, oracle, tutor, …).
  The key is read from the environment variable named `settings.api_key_env`; the key
  itself is never in a config or a log line. Timeouts, connection errors, 429, 5xx and
  answers that are no completion are retried, at most `max_tries` tries per call
  (paper 001 uses 5), after the wait a 429/5xx asks for (Retry-After,
  retry-after-ms) or else exponential backoff with jitter, never more than
  `backoff_max`; other API errors (bad key, unknown model) stop the run with a
  EndpointError. `preflight()` checks endpoint, key and model with one small request.
  """

  def __init__(self, settings: EndpointSettings, role: str = "judge"):
    import openai
    self.settings, self.role = settings, role
    if not settings.model:
      raise EndpointError(f"the {role} endpoint {self.endpoint} names no model")
    key = os.environ.get(settings.api_key_env)
    if not key:
      raise EndpointError(f"the environment variable {settings.api_key_env} is not set; it "
                          f"must hold the API key for the {role} endpoint {self.endpoint}")
    self.stats = collections.Counter()  # calls, tokens, retries by kind.
    self._openai = openai
    self._lock = threading.Lock()  # Counters are bumped from the worker threads.
    self._client = openai.OpenAI(api_key=key, base_url=settings.base_url,
                                 timeout=settings.timeout,
                                 max_retries=0)  # Retries are ours: counted, with jitter.
    # Timeouts, connection errors, 429, 5xx, and answers that are not a completion.
    self._retryable = (openai.APITimeoutError, openai.APIConnectionError,
                       openai.RateLimitError, openai.InternalServerError, NonCompletionReply)

  @property
  def max_tokens(self) -> int:
    """The most tokens a reply may have (pedrl.env.party.ChatClient)."""
    return self.settings.max_tokens

  @property
  def endpoint(self) -> str:
    return self.settings.base_url or "api.openai.com"

  def complete(self, requests: Sequence[Prompted],
               round_: int = 0) -> list[str | Exception]:
    del round_
    prompts = [[{"role": "user", "content": r.prompt}] for r in requests]
    with concurrent.futures.ThreadPoolExecutor(self.settings.max_concurrency) as pool:
      return [r if isinstance(r, Exception) else r.text
              for r in pool.map(self._one, prompts)]

  def chat(self, conversations: Sequence[Chat], stop: Sequence[str] = (),
           seeds: Sequence[int] | None = None) -> list[Reply | Exception]:
    """Per conversation ([{"role", "content"}] messages, any roles), a `Reply` or the
    exception that ended its retries: the endpoint taking one side of a dialogue (a
    pedrl.env.party.ChatClient). `stop`: strings the endpoint ends a reply before (the
    reply leaves them out). `seeds`: each request's sampling seed (the API's `seed`:
    vLLM and pedrl.serve sample from it; OpenAI's is best effort); None, or the
    settings' send_seed=False, sends none."""
    if seeds is None or not self.settings.send_seed:
      seeds = [None] * len(conversations)
    with concurrent.futures.ThreadPoolExecutor(self.settings.max_concurrency) as pool:
      return list(pool.map(lambda m, k: self._one(m, stop, seed=k), conversations, seeds))

  def text_completions(self, prompts: Sequence[str],
                       stop: Sequence[str] = ()) -> list[Reply | Exception]:
    """Per prompt, the raw-text continuation (`/v1/completions`, no chat template) as a
    `Reply`, or the exception that ended its retries."""
    with concurrent.futures.ThreadPoolExecutor(self.settings.max_concurrency) as pool:
      return list(pool.map(lambda p: self._one(p, stop, raw=True), prompts))

  def _count(self, key: str, n: int = 1):
    with self._lock:
      self.stats[key] += n

  def _request(self, messages, max_tokens: int, stop=(), raw: bool = False,
               seed: int | None = None) -> Reply:
    """One call (chat, or with `raw` a raw-text completion of the prompt `messages`);
    whatever comes back that is no completion raises NonCompletionReply."""
    o = self._openai
    args = dict(model=self.settings.model, temperature=self.settings.temperature,
                **{self.settings.max_tokens_field: max_tokens},
                **({"top_p": self.settings.top_p} if self.settings.top_p < 1 else {}),
                **({"stop": list(stop)} if stop else {}),
                **({"seed": seed} if seed is not None else {}))
    try:
      out = (self._client.completions.create(prompt=messages, **args) if raw else
             self._client.chat.completions.create(messages=messages, **args))
    except (ValueError, o.APIResponseValidationError) as e:  # A JSON content type, other body.
      raise NonCompletionReply(f"no {'text' if raw else 'chat'} completion: the endpoint's "
                               f"body does not parse ({type(e).__name__}: {e})") from e
    text = completion_text(out, raw)
    usage = getattr(out, "usage", None)
    used = [getattr(usage, k, None) or 0 for k in ("prompt_tokens", "completion_tokens")]
    self._count("calls")
    self._count("prompt_tokens", used[0])
    self._count("completion_tokens", used[1])
    return Reply(text, out.choices[0].finish_reason or "stop", *used)

  def _delay(self, attempt: int, error: Exception) -> float:
    """The wait a 429/5xx asks for, else exponential backoff with ±50% jitter."""
    asked = retry_after(getattr(getattr(error, "response", None), "headers", None))
    s = self.settings
    if asked is not None:
      return min(s.backoff_max, asked)
    return min(s.backoff_max, s.backoff_base * 2 ** attempt) * random.uniform(0.5, 1.5)

  def _one(self, messages, stop=(), raw: bool = False, seed: int | None = None):
    for attempt in range(self.settings.max_tries):
      try:
        return self._request(messages, self.settings.max_tokens, stop, raw, seed)
      except self._retryable as e:
        if attempt + 1 == self.settings.max_tries:
          return e
        self._count("retries")
        self._count(f"retries/{failure_kind(e)}")
        time.sleep(self._delay(attempt, e))
      except self._openai.APIStatusError as e:  # 400, 401, 403, 404, ...: retrying cannot help.
        raise EndpointError(f"{self.role} endpoint {self.endpoint} (model "
                            f"{self.settings.model!r}) refused the request: HTTP "
                            f"{e.status_code} {type(e).__name__}") from None

  def preflight(self, tries: int = 2, raw: bool = False) -> None:
    """One one-token request, so that a wrong endpoint, key or model stops a run before
    any model loads: EndpointError naming the endpoint and model (and the key's variable).
    `raw`: a text completion, for a run that asks only those (an endpoint may serve no
    chat API: a model without a chat template, a completions-only model)."""
    for attempt in range(tries):
      try:
        if raw:
          self._request("Reply with OK.", max_tokens=1, raw=True)
        else:
          self._request([{"role": "user", "content": "Reply with OK."}], max_tokens=1)
        return
      except self._retryable as e:
        if attempt + 1 == tries:
          raise EndpointError(self._preflight_failure(e)) from None
        time.sleep(self._delay(attempt, e))
      except self._openai.APIStatusError as e:
        raise EndpointError(self._preflight_failure(e)) from None

  def _preflight_failure(self, e: Exception) -> str:
    """One line on why the preflight failed (never the key, nor the server's text)."""
    o, status = self._openai, getattr(e, "status_code", None)
    where = f"the {self.role} endpoint {self.endpoint} (model {self.settings.model!r})"
    if isinstance(e, o.APITimeoutError):
      return f"{where} did not answer within the timeout of {self.settings.timeout:g} s"
    if isinstance(e, o.APIConnectionError):
      return f"{where} cannot be reached (connection refused or host unreachable)"
    if status in (401, 403):
      return (f"{where} refused the API key in the environment variable "
              f"{self.settings.api_key_env}: HTTP {status} {type(e).__name__}")
    if status == 404:
      return f"{where} answered HTTP 404: an unknown model, or a base_url that is no API root"
    if isinstance(e, NonCompletionReply):
      return f"{where} is no OpenAI-compatible endpoint: {e}"
    return f"{where} failed the preflight request: HTTP {status} {type(e).__name__}"
