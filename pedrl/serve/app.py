"""The OpenAI-compatible HTTP API over a Batcher: /v1/models, /v1/completions,
/v1/chat/completions and /health, on FastAPI.

Responses are built from the `openai` package's own types. Every error is an
OpenAI-style body (`{"error": {"message", "type", "param", "code"}}`): a bad
field or malformed JSON 400, a wrong key 401, an unknown model 404, a prompt
past the context 400 (`context_length_exceeded`), a full queue 503 with
Retry-After, a failure inside the engine 500; none stops the server.
"""
import asyncio
import dataclasses
import os
import queue
import time
import uuid

import fastapi
from fastapi import responses
from fastapi.exceptions import RequestValidationError
from openai.types import Completion, CompletionChoice, CompletionUsage, Model
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice as ChatChoice
from openai.types.completion_choice import Logprobs

from pedrl.env import chat as chat_lib
from pedrl.serve import protocol
from pedrl.serve.batcher import Ask, Batcher
from pedrl.serve.protocol import APIError


@dataclasses.dataclass
class ServeSettings:
  served_name: str = "pedrl"
  api_key_env: str | None = None  # Bearer-token auth with this variable's value.
  max_tokens: int = 1024  # A chat request's limit when it gives none (and the context allows).
  reasoning: str = "keep"  # "keep" <think> in the content, or "split" it into reasoning_content.


def _error(e: APIError):
  return responses.JSONResponse(e.body(), status_code=e.status, headers=e.headers)


def make_app(batcher: Batcher, tokenizer, settings: ServeSettings, chat=None) -> fastapi.FastAPI:
  """The API for one model: its batcher, tokenizer and chat format (None: no chat)."""
  app = fastapi.FastAPI(title="pedrl", docs_url=None, redoc_url=None)
  context = batcher.engine.context
  key = os.environ.get(settings.api_key_env) if settings.api_key_env else None
  if settings.api_key_env and not key:
    raise ValueError(f"${settings.api_key_env} is empty: it holds the server's API key")

  @app.exception_handler(APIError)
  async def _api_error(request, e: APIError):
    return _error(e)

  @app.exception_handler(RequestValidationError)
  async def _invalid(request, e: RequestValidationError):
    first = e.errors()[0] if e.errors() else {}
    if first.get("type") == "json_invalid":
      return _error(APIError(400, f"the body is not valid JSON: {first.get('ctx', {}).get('error')}"))
    where = ".".join(str(x) for x in first.get("loc", ())[1:]) or None
    message = "; ".join(f"{'.'.join(str(x) for x in err.get('loc', ())[1:]) or 'body'}: "
                        f"{err.get('msg')}" for err in e.errors()[:5])
    return _error(APIError(400, message or "invalid request", param=where))

  @app.exception_handler(Exception)
  async def _internal(request, e: Exception):
    return _error(APIError(500, f"internal error: {type(e).__name__}: {e}", type="server_error"))

  @app.middleware("http")
  async def _auth(request: fastapi.Request, call_next):
    if key and request.url.path.startswith("/v1/"):
      if request.headers.get("authorization", "") != f"Bearer {key}":
        return _error(APIError(401, "invalid or missing API key (Authorization: Bearer ...)",
                               type="authentication_error", code="invalid_api_key"))
    return await call_next(request)

  def check_model(name: str):
    if name != settings.served_name:
      raise APIError(404, f"the model {name!r} does not exist; this server serves "
                     f"{settings.served_name!r}", param="model", code="model_not_found")

  async def run(ask: Ask):
    if len(ask.prompt) + ask.max_tokens > context:
      raise APIError(400, f"this model's context is {context} tokens; the prompt has "
                     f"{len(ask.prompt)} and max_tokens asks for {ask.max_tokens} more",
                     param="prompt" if len(ask.prompt) >= context else "max_tokens",
                     code="context_length_exceeded")
    try:
      future = batcher.submit(ask)
    except queue.Full:
      raise APIError(503, "the server's queue is full; retry shortly", type="server_error",
                     headers={"Retry-After": "1"}) from None
    return await asyncio.wrap_future(future)

  def sampling(req) -> dict:
    if req.stream:
      raise APIError(400, "stream=true is not supported", param="stream")
    seed = req.seed if req.seed is not None else int.from_bytes(os.urandom(4), "little")
    return dict(temperature=req.temperature, top_p=req.top_p, top_k=req.top_k,
                stop=tuple(req.stop or ()), seed=seed, n=req.n)

  @app.get("/health")
  async def health():
    return {"status": "ok"}

  @app.get("/v1/models")
  async def models():
    card = Model(id=settings.served_name, created=int(time.time()), object="model",
                 owned_by="pedrl")
    return {"object": "list", "data": [card.model_dump(exclude_none=True)]}

  @app.post("/v1/completions")
  async def completions(req: protocol.CompletionRequest):
    check_model(req.model)
    if req.max_tokens == 0 and not req.echo:
      raise APIError(400, "max_tokens=0 needs echo=true", param="max_tokens")
    common = sampling(req)
    prompts = req.prompts()
    ids = [tuple(p) if isinstance(p, list) else tuple(tokenizer(p)["input_ids"])
           for p in prompts]
    if any(not p for p in ids):
      raise APIError(400, "a prompt has no tokens", param="prompt")
    if any(max(p) >= batcher.engine.model.cfg.vocab_size or min(p) < 0 for p in ids):
      raise APIError(400, "a token id is outside the vocabulary", param="prompt")
    limit = 16 if req.max_tokens is None else req.max_tokens
    asks = [Ask(prompt=p, max_tokens=limit, logprobs=req.logprobs, echo=req.echo, **common)
            for p in ids]
    results = await asyncio.gather(*(run(a) for a in asks))
    choices, used = [], 0
    for p, a, samples in zip(prompts, asks, results):
      prompt_text = (p if isinstance(p, str) else tokenizer.decode(list(p))) if req.echo else ""
      for s in samples:
        choices.append(CompletionChoice(
            index=len(choices), text=prompt_text + s.text, finish_reason=s.finish_reason,
            logprobs=_logprobs(tokenizer, a, s) if req.logprobs is not None else None))
        used += len(s.tokens)
    return Completion(
        id=f"cmpl-{uuid.uuid4().hex}", object="text_completion", created=int(time.time()),
        model=settings.served_name, choices=choices,
        usage=CompletionUsage(prompt_tokens=sum(map(len, ids)), completion_tokens=used,
                              total_tokens=sum(map(len, ids)) + used)).model_dump()

  @app.post("/v1/chat/completions")
  async def chat_completions(req: protocol.ChatCompletionRequest):
    check_model(req.model)
    if chat is None:
      raise APIError(400, "this model has no chat template; use /v1/completions")
    try:
      messages = [{"role": m.role, "content": m.text()} for m in req.messages]
      prompt = tuple(chat.prompt_ids(messages))
    except Exception as e:  # The template's own complaint (roles out of order, …).
      raise APIError(400, f"the chat template cannot render these messages: {e}",
                     param="messages") from None
    limit = req.limit() or max(1, min(settings.max_tokens, context - len(prompt)))
    samples = await run(Ask(prompt=prompt, max_tokens=limit, **sampling(req)))
    choices = []
    for s in samples:
      message = ChatCompletionMessage(role="assistant", content=s.text)
      if settings.reasoning == "split":
        visible, thinking = chat_lib.split_thinking(s.text)
        message = ChatCompletionMessage(role="assistant", content=visible,
                                        reasoning_content=thinking or None)
      choices.append(ChatChoice(index=len(choices), message=message,
                                finish_reason=s.finish_reason))
    used = sum(len(s.tokens) for s in samples)
    return ChatCompletion(
        id=f"chatcmpl-{uuid.uuid4().hex}", object="chat.completion", created=int(time.time()),
        model=settings.served_name, choices=choices,
        usage=CompletionUsage(prompt_tokens=len(prompt), completion_tokens=used,
                              total_tokens=len(prompt) + used)).model_dump(exclude_none=True)

  return app


def _logprobs(tokenizer, ask: Ask, sample) -> Logprobs:
  """The completions API's log-probs: per token its text, log-prob, top alternatives and
  offset in the returned text; with echo the prompt's tokens come first (the first
  has no log-prob)."""
  lp = sample.logprobs
  ids = list(ask.prompt) + sample.tokens
  start = 0 if ask.echo else len(ask.prompt)
  pieces = [tokenizer.decode([t]) for t in ids[start:]]
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
    alternatives.append({tokenizer.decode([int(i)]): float(v)
                         for i, v in zip(lp.top_ids[t - 1, :ask.logprobs],
                                         lp.top_logprobs[t - 1, :ask.logprobs])})
  # Constructed unvalidated: the API's first echoed token has null entries, which the
  # openai package's type does not declare.
  return Logprobs.model_construct(tokens=pieces, token_logprobs=values,
                                  top_logprobs=alternatives, text_offset=offsets)
