"""The OpenAI-compatible HTTP API, on FastAPI: /v1/models, /v1/completions,
/v1/chat/completions (both also as server-sent events with `stream=true`),
/v1/embeddings (encoder models), vLLM's /tokenize and /detokenize, /health and
/metrics (Prometheus).

The app answers from the moment its port opens: /health, /metrics and /v1/models at
once, the other routes once the model has loaded (`startup`: they wait for it,
bounded, then 503 with Retry-After; after a failed load, 500).

Responses are built from the `openai` package's own types. Every error is an
OpenAI-style body (`{"error": {"message", "type", "param", "code"}}`): a bad or
unsupported field, malformed JSON or invalid UTF-8 400, a wrong key 401, an unknown
model or path 404, a wrong method 405, a body past the limit 413, a prompt past the
context 400 (`context_length_exceeded`), a full queue 503 with Retry-After, a
failure inside the engine 500 for the requests of that engine call only; none
stops the server or drops the caller's connection. Tokenizing and chat templates
run on worker threads, never on the event loop. A client that disconnects has its
sequences dropped at the next decode step boundary.
"""
import asyncio
import base64
import dataclasses
import json
import os
import queue
import time
import uuid

import anyio
import fastapi
import starlette.types
from fastapi import responses
from fastapi.exceptions import RequestValidationError
from openai.types import (Completion, CompletionChoice, CompletionUsage, CreateEmbeddingResponse,
                          Embedding, Model)
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice as ChatChoice
from openai.types.chat.chat_completion_chunk import Choice as ChunkChoice, ChoiceDelta
from openai.types.completion_choice import Logprobs
from starlette.exceptions import HTTPException

from pedrl import fields
from pedrl.env import chat as chat_lib
from pedrl.serve import openai_types
from pedrl.serve.prometheus import Metrics
from pedrl.serve.middleware import Gate
from pedrl.serve.openai_types import APIError
from pedrl.serve.sequences import Job, Sequence
from pedrl.serve.startup import Served, Startup
from pedrl.tokenizer import skipped_ids


@dataclasses.dataclass
class ServeSettings:
  served_name: str = "pedrl"
  api_key: str | None = None  # Bearer-token auth with this key (read from --api_key_env).
  max_tokens: int = 1024  # A chat request's limit when it gives none (and the context allows).
  reasoning: str = "keep"  # "keep" <think> in the content, or "split" it into reasoning_content.
  max_body: int = 8 << 20  # Bytes of a request body.
  access_log: bool = True

  def __post_init__(self):
    fields.counts(self, ("max_tokens", "max_body"))
    fields.one_of(self, "reasoning", ("keep", "split"))


def _error(e: APIError):
  return responses.JSONResponse(e.body(), status_code=e.status, headers=e.headers)


class _Gone(Exception):
  """The client disconnected before its answer was ready."""


class EventStream(responses.StreamingResponse):
  """Server-sent events that stop as soon as the client disconnects, whatever ASGI
  version the server speaks (the generator is cancelled, and its `finally` aborts
  the request's sequences)."""
  media_type = "text/event-stream"

  async def __call__(self, scope: starlette.types.Scope, receive: starlette.types.Receive,
                     send: starlette.types.Send) -> None:
    async with anyio.create_task_group() as tasks:
      async def stream() -> None:
        await self.stream_response(send)
        tasks.cancel_scope.cancel()
      tasks.start_soon(stream)
      await _disconnected(receive)
      tasks.cancel_scope.cancel()


async def _disconnected(receive) -> None:
  while (await receive())["type"] != "http.disconnect":
    pass


def _sse(obj) -> str:
  return f"data: {json.dumps(obj)}\n\n"


class _Channel:
  """The coroutine's side of a Job: the engine thread's notifications, in order."""

  def __init__(self, sequences: list[Sequence]) -> None:
    loop, self.events = asyncio.get_running_loop(), asyncio.Queue()
    post = lambda item: loop.call_soon_threadsafe(self.events.put_nowait, item)
    self.job = Job(sequences, notify=post, fail=post)

  @property
  def complete(self) -> bool:
    return all(s.finish_reason and (s.logprobs is None or s.alternatives is not None)
               for s in self.job.sequences)

  async def next(self) -> list[Sequence]:
    item = await self.events.get()
    if isinstance(item, Exception):
      raise APIError(500, f"the engine failed on this request: {type(item).__name__}: {item}",
                     type="server_error")
    return item


def make_app(startup: Startup, settings: ServeSettings, metrics: Metrics | None = None) -> Gate:
  """The API for one model (an ASGI app: the FastAPI routes behind the Gate), served once
  `startup` has it: a Scheduler for a decoder, an Encoder for an encoder."""
  metrics = metrics or Metrics()
  app = fastapi.FastAPI(title="pedrl", version="1", redoc_url=None)

  @app.exception_handler(APIError)
  async def _api_error(request, e: APIError):
    return _error(e)

  @app.exception_handler(HTTPException)
  async def _http_error(request, e: HTTPException):
    # 404, 405, a body that does not parse, a chunked body past the limit (413).
    detail = e.detail if isinstance(e.detail, str) else json.dumps(e.detail)
    if e.status_code == 404:
      detail = f"no route {request.method} {request.url.path}"
    return _error(APIError(e.status_code, detail, code={
        404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}.get(
            e.status_code)))

  @app.exception_handler(RequestValidationError)
  async def _invalid(request, e: RequestValidationError):
    errors = e.errors()
    first = errors[0] if errors else {}
    if first.get("type") == "json_invalid":
      why = first.get("ctx", {}).get("error")
      return _error(APIError(400, f"the body is not valid JSON: {why}"))
    where = ".".join(str(x) for x in first.get("loc", ())[1:]) or None
    message = "; ".join(f"{'.'.join(str(x) for x in err.get('loc', ())[1:]) or 'body'}: "
                        f"{_reason(err)}" for err in errors[:5])
    return _error(APIError(400, message or "invalid request", param=where))

  def check_model(name: str | None):
    if name is not None and name != settings.served_name:
      raise APIError(404, f"the model {name!r} does not exist; this server serves "
                     f"{settings.served_name!r}", param="model", code="model_not_found")

  async def model(generates: bool, kind: str) -> Served:
    """The loaded model (waiting for it), if it serves `kind` (a decoder generates)."""
    m = await startup.model()
    if m.generates != generates:
      what = "a decoder" if m.generates else "an encoder"
      raise APIError(400, f"this server's model is {what}: it does not serve {kind}",
                     code="model_not_supported")
    return m

  def check_ids(m: Served, ids, param: str = "prompt"):
    if any(not p for p in ids):
      raise APIError(400, "a prompt has no tokens", param=param)
    if any(max(p) >= m.vocab or min(p) < 0 for p in ids):
      raise APIError(400, f"a token id is outside the vocabulary [0, {m.vocab})", param=param)

  def check_room(m: Served, prompt_len: int, max_tokens: int | None):
    """A 400 when the prompt and max_tokens (None: not given, one token at least; 0: echo
    only, none) overflow the context."""
    if prompt_len + (1 if max_tokens is None else max_tokens) > m.context:
      wants = ("no room is left for a reply" if max_tokens is None else
               f"max_tokens asks for {max_tokens} more")
      raise APIError(400, f"this server's context is {m.context} tokens; the prompt has "
                     f"{prompt_len} and {wants}",
                     param="prompt" if prompt_len >= m.context else "max_tokens",
                     code="context_length_exceeded")

  def sampling(m: Served, req) -> dict:
    if req.top_k > m.vocab:
      raise APIError(400, f"top_k={req.top_k} exceeds the vocabulary ({m.vocab}); 0 or -1 "
                     "turns top-k off", param="top_k")
    seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(8), "little")
    return dict(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k,
                stop=req.stops, seed=seed, skip_special_tokens=req.skip_special_tokens)

  async def submit(generator, sequences: list[Sequence]) -> _Channel:
    if len(sequences) > generator.max_queue:
      raise APIError(400, f"this request has {len(sequences)} prompts x choices; the server "
                     f"takes at most {generator.max_queue} per request (--max_queue)",
                     param="prompt")
    channel = _Channel(sequences)
    try:
      generator.submit(channel.job)
    except queue.Full:
      raise APIError(503, "the server's queue is full; retry shortly", type="server_error",
                     headers={"Retry-After": "1"}) from None
    return channel

  async def finished(generator, channel: _Channel, request: fastapi.Request):
    """Waits for every sequence of the job; drops the job if the client leaves first."""
    gone = asyncio.ensure_future(_disconnected(request.receive))
    try:
      while not channel.complete:
        event = asyncio.ensure_future(channel.next())
        await asyncio.wait({event, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not event.done():
          event.cancel()
          generator.abort(channel.job)
          raise _Gone
        event.result()
    finally:
      gone.cancel()

  @app.exception_handler(_Gone)
  async def _gone(request, e):
    return responses.Response(status_code=499)

  @app.get("/health")
  async def health():
    status, body, headers = startup.health()
    return responses.JSONResponse(body, status_code=status, headers=headers)

  @app.get("/metrics")
  async def prometheus():
    return responses.Response(metrics.text(), media_type="text/plain; version=0.0.4")

  @app.get("/v1/models")
  async def models():
    card = Model(id=settings.served_name, created=int(time.time()), object="model",
                 owned_by="pedrl")
    context = startup.context  # None until the model's program set is known.
    return {"object": "list", "data": [card.model_dump(exclude_none=True)
                                       | ({"max_model_len": context} if context else {})]}

  @app.post("/v1/completions")
  async def completions(req: openai_types.CompletionRequest, request: fastapi.Request):
    check_model(req.model)
    if req.max_tokens == 0 and not req.echo:
      raise APIError(400, "max_tokens=0 needs echo=true", param="max_tokens")
    m = await model(True, "completions")
    generator, tokenizer = m.backend, m.tokenizer
    common = sampling(m, req)
    prompts = req.prompts()
    ids = await asyncio.to_thread(
        lambda: [tuple(p) if isinstance(p, list) else tuple(tokenizer(p)["input_ids"])
                 for p in prompts])
    check_ids(m, ids)
    limit = 16 if req.max_tokens is None else req.max_tokens
    for p in ids:
      check_room(m, len(p), limit)
    sequences = [Sequence(prompt=p, max_tokens=limit, index=j, logprobs=req.logprobs,
                          echo=req.echo, **common) for p in ids for j in range(req.n)]
    channel = await submit(generator, sequences)
    texts = [(p if isinstance(p, str) else tokenizer.decode(list(p))) if req.echo else ""
             for p in prompts]
    echo = [texts[i // req.n] for i in range(len(sequences))]
    if req.stream:
      return EventStream(_completion_events(channel, generator, settings, echo,
                                            req.include_usage))
    await finished(generator, channel, request)
    choices = [CompletionChoice(
        index=i, text=echo[i] + s.text, finish_reason=s.finish_reason,
        logprobs=_logprobs(tokenizer, s) if req.logprobs is not None else None)
        for i, s in enumerate(sequences)]
    return Completion(
        id=f"cmpl-{uuid.uuid4().hex}", object="text_completion", created=int(time.time()),
        model=settings.served_name, choices=choices, usage=_usage(sequences)).model_dump()

  @app.post("/v1/chat/completions")
  async def chat_completions(req: openai_types.ChatCompletionRequest, request: fastapi.Request):
    check_model(req.model)
    m = await model(True, "chat completions")
    generator = m.backend
    if m.chat is None:
      raise APIError(400, "this model has no chat template; use /v1/completions")
    common = sampling(m, req)
    prompt = await _render(m.chat, req.messages, req.chat_template_kwargs)
    check_ids(m, [prompt], "messages")
    check_room(m, len(prompt), req.limit())
    limit = req.limit() or min(settings.max_tokens, m.context - len(prompt))
    sequences = [Sequence(prompt=prompt, max_tokens=limit, index=j, **common)
                 for j in range(req.n)]
    # A template that opens <think> in the generation prompt: the reply starts as thinking,
    # before any tag of its own (its last prompt tokens hold the opening).
    opened = settings.reasoning == "split" and chat_lib.opens_thinking(
        await asyncio.to_thread(m.tokenizer.decode, prompt[-_PROMPT_TAIL:]))
    channel = await submit(generator, sequences)
    if req.stream:
      return EventStream(_chat_events(channel, generator, settings, req.include_usage, opened))
    await finished(generator, channel, request)
    choices = []
    for i, s in enumerate(sequences):
      message = ChatCompletionMessage(role="assistant", content=s.text)
      if settings.reasoning == "split":
        visible, thinking = _split(s.text, opened)
        message = ChatCompletionMessage(role="assistant", content=visible,
                                        reasoning_content=thinking or None)
      choices.append(ChatChoice(index=i, message=message, finish_reason=s.finish_reason))
    return _with_nulls(ChatCompletion(
        id=f"chatcmpl-{uuid.uuid4().hex}", object="chat.completion", created=int(time.time()),
        model=settings.served_name, choices=choices,
        usage=_usage(sequences)).model_dump(exclude_none=True))

  @app.post("/v1/embeddings")
  async def embeddings(req: openai_types.EmbeddingRequest):
    check_model(req.model)
    m = await model(False, "embeddings")
    vectors, used = await m.backend.embed(req.input)
    encode = ((lambda v: base64.b64encode(v.astype("<f4").tobytes()).decode())
              if req.encoding_format == "base64" else (lambda v: v.tolist()))
    return CreateEmbeddingResponse(  # base64 strings where the type says floats.
        object="list", model=settings.served_name,
        data=[Embedding.model_construct(object="embedding", index=i, embedding=encode(v))
              for i, v in enumerate(vectors)],
        usage={"prompt_tokens": used, "total_tokens": used}).model_dump(warnings=False)

  @app.post("/tokenize")
  async def tokenize(req: openai_types.TokenizeRequest):
    check_model(req.model)
    m = await startup.model()
    if req.messages is not None:
      if m.chat is None:
        raise APIError(400, "this model has no chat template; give prompt", param="messages")
      ids = await _render(m.chat, req.messages, req.chat_template_kwargs)
    else:
      ids = await asyncio.to_thread(
          lambda: m.tokenizer(req.prompt, add_special_tokens=req.add_special_tokens)["input_ids"])
    return {"count": len(ids), "max_model_len": m.context, "tokens": list(ids)}

  @app.post("/detokenize")
  async def detokenize(req: openai_types.DetokenizeRequest):
    check_model(req.model)
    m = await startup.model()
    check_ids(m, [req.tokens or [0]], "tokens")
    return {"prompt": await asyncio.to_thread(m.tokenizer.decode, req.tokens)}

  routes = {r.path for r in app.routes}
  return Gate(app, metrics, settings.api_key, settings.max_body, routes, settings.access_log)


def _reason(err: dict) -> str:
  """pydantic's message, without its 'Value error, ' prefix."""
  return str(err.get("msg", "")).removeprefix("Value error, ")


async def _render(chat, messages, template_kwargs: dict | None = None) -> tuple:
  """The conversation's prompt tokens, the request's template variables over the
  server's (the template's own complaint: a 400)."""
  if template_kwargs:
    chat = dataclasses.replace(chat, template_kwargs={**chat.template_kwargs,
                                                      **template_kwargs})
  try:
    return tuple(await asyncio.to_thread(
        chat.prompt_ids, [{"role": m.role, "content": m.text()} for m in messages]))
  except Exception as e:  # Roles out of order, …
    raise APIError(400, f"the chat template cannot render these messages: {e}",
                   param="messages") from None


def _usage(sequences) -> CompletionUsage:
  prompt = sum(len(s.prompt) for s in sequences if s.index == 0)
  used = sum(s.used for s in sequences)
  return CompletionUsage(prompt_tokens=prompt, completion_tokens=used,
                         total_tokens=prompt + used)


async def _stream(channel: _Channel, generator, render, include_usage: bool,
                  usage_chunk):
  """The SSE frames of a streamed job: `render(i, text, new_text, finish_reason)` per
  change of sequence i (the text it may show and what that gained, as read once), the
  usage chunk when asked, then [DONE]; if the stream ends early, the job is dropped."""
  sent = [0] * len(channel.job.sequences)
  ended = [False] * len(channel.job.sequences)  # Its finish_reason sent.
  index = {id(s): i for i, s in enumerate(channel.job.sequences)}
  try:
    # The engine thread goes on changing the sequences while this loop sends them: the
    # loop ends on what it sent, not on their state (which can be a step ahead), and
    # reads a sequence's finish_reason, then how much may stream, then its text (the
    # scheduler writes them in the opposite order), so what it sends is settled text.
    while not (all(ended) and channel.complete):
      try:
        changed = await channel.next()
      except APIError as e:
        yield _sse(e.body())
        break
      for s in changed:
        i = index[id(s)]
        if ended[i]:
          continue
        finish, streamed = s.finish_reason, s.streamed
        text = s.text
        upto = len(text) if finish else min(streamed, len(text))
        new, sent[i] = text[sent[i]:upto], max(sent[i], upto)
        ended[i] = bool(finish)
        for frame in render(i, text[:upto], new, finish):
          yield _sse(frame)
    else:
      if include_usage:
        yield _sse(usage_chunk(_usage(channel.job.sequences)))
    yield "data: [DONE]\n\n"
  finally:
    if not channel.complete:
      generator.abort(channel.job)


def _with_nulls(body: dict, usage: bool = False) -> dict:
  """A response dumped without its unset optional fields, with the nulls OpenAI and vLLM
  send and clients index: each choice's `finish_reason` and `logprobs`, and a stream's
  `usage` in every chunk when include_usage asked for it."""
  for choice in body["choices"]:
    choice.setdefault("finish_reason", None)
    choice.setdefault("logprobs", None)
  if usage:
    body.setdefault("usage", None)
  return body


def _chunks(kind, prefix: str, obj: str, settings: ServeSettings, include_usage: bool):
  """chunk(choices, usage=None): a stream's chunks as dicts, all with one id and time."""
  cid, created = f"{prefix}-{uuid.uuid4().hex}", int(time.time())
  return lambda choices, usage=None: _with_nulls(kind(
      id=cid, object=obj, created=created, model=settings.served_name, choices=choices,
      usage=usage).model_dump(exclude_none=True), include_usage)


def _completion_events(channel, generator, settings: ServeSettings, echo: list,
                       include_usage: bool):
  chunk = _chunks(Completion, "cmpl", "text_completion", settings, include_usage)
  started = set()

  def render(i, shown, new, finish):
    del shown
    if i not in started:
      started.add(i)
      new = echo[i] + new
    if new or finish:
      yield chunk([CompletionChoice.model_construct(
          index=i, text=new, logprobs=None, finish_reason=finish)])

  return _stream(channel, generator, render, include_usage, lambda u: chunk([], u))


_PROMPT_TAIL = 64  # Tokens at a rendered prompt's end that hold its generation prompt.


def _split(text: str, opened: bool) -> tuple[str, str]:
  """(content, reasoning) of a reply; `opened`: its prompt opened a <think> block."""
  return chat_lib.split_thinking(chat_lib.THINK_OPEN + text if opened else text)


def _chat_events(channel, generator, settings: ServeSettings, include_usage: bool,
                 opened: bool = False):
  chunk = _chunks(ChatCompletionChunk, "chatcmpl", "chat.completion.chunk", settings,
                  include_usage)
  split = settings.reasoning == "split"
  started, shown, as_written = set(), {}, {}

  def render(i, shown_text, new, finish):
    if i not in started:
      started.add(i)
      yield chunk([ChunkChoice(index=i, delta=ChoiceDelta(role="assistant", content=""))])
    if split and i not in as_written:  # Re-split what may be shown; send what each part gained.
      text = shown_text if finish else _without_open_tag(shown_text)
      parts, before = _split(text, opened), shown.get(i, ("", ""))
      if all(p.startswith(b) for p, b in zip(parts, before)):
        content, thinking = (p[len(b):] for p, b in zip(parts, before))
        shown[i] = parts
        if content or thinking:
          yield chunk([ChunkChoice(index=i, delta=ChoiceDelta(
              content=content or None, reasoning_content=thinking or None))])
      elif not before[1] and shown_text.startswith(before[0]):
        # A `</think>` with no opening after text already sent as content (a model that
        # closes thinking its template did not open): what was sent cannot be taken back,
        # so the rest goes as written, tag included, and none of the reply is lost.
        as_written[i] = len(before[0])
    if i in as_written:
      content, as_written[i] = shown_text[as_written[i]:], len(shown_text)
      if content:
        yield chunk([ChunkChoice(index=i, delta=ChoiceDelta(content=content))])
    elif not split and new:
      yield chunk([ChunkChoice(index=i, delta=ChoiceDelta(content=new))])
    if finish:
      yield chunk([ChunkChoice(index=i, delta=ChoiceDelta(), finish_reason=finish)])

  return _stream(channel, generator, render, include_usage, lambda u: chunk([], u))


def _without_open_tag(text: str) -> str:
  """text without a trailing start of <think> or </think> (a tag still being written)."""
  for tag in (chat_lib.THINK_OPEN, chat_lib.THINK_CLOSE):
    for k in range(len(tag) - 1, 0, -1):
      if text.endswith(tag[:k]):
        return text[:-k]
  return text


def _logprobs(tokenizer, s: Sequence) -> Logprobs:
  """The completions API's log-probs: per token its text, log-prob, top alternatives and
  offset in the returned text; with echo the prompt's tokens come first (the first
  has no log-prob). The alternatives hold the token itself too, as OpenAI's and vLLM's
  do (up to logprobs + 1 entries): a client reading them for the chosen token, or
  checking it was the greedy one, finds it."""
  lp = s.alternatives
  ids = list(s.prompt) + s.tokens
  start = 0 if s.echo else len(s.prompt)
  # A special token of the completion's text reads as "" where the text leaves it out, so
  # the pieces join to the text and the offsets point into it (the prompt's tokens are
  # echoed as sent; the stop token that ended it, after the text, as it reads).
  skipped = skipped_ids(tokenizer) if s.skip_special_tokens else frozenset()
  text_end = len(ids) - s.ended_by_token
  in_text = lambda n: len(s.prompt) <= n < text_end
  read = lambda n, t: "" if t in skipped and in_text(n) else tokenizer.decode([t])
  pieces = [read(n, t) for n, t in enumerate(ids[start:], start)]
  offsets, at = [], 0
  for piece in pieces:
    offsets.append(at)
    at += len(piece)
  values, alternatives = [], []
  for t in range(start, len(ids)):
    if t == 0:
      values.append(None)
      alternatives.append(None)
      continue
    values.append(float(lp.logprobs[t - 1]))
    # Keyed by text: of tokens that read alike (byte pieces all read "\ufffd"), the most
    # likely one's entry stands, alternatives first, in rank order.
    top = {}
    for i, v in zip(lp.top_ids[t - 1, :s.logprobs], lp.top_logprobs[t - 1, :s.logprobs]):
      top.setdefault(read(t, int(i)), float(v))  # Read as the chosen token would be.
    top.setdefault(pieces[t - start], values[-1])
    alternatives.append(top)
  # Constructed unvalidated: the API's first echoed token has null entries, which the
  # openai package's type does not declare.
  return Logprobs.model_construct(tokens=pieces, token_logprobs=values,
                                  top_logprobs=alternatives, text_offset=offsets)
