"""The OpenAI API's request bodies (pydantic), their limits, and its error shape.

Every field a request sends is checked before the request reaches the engine: an
unknown field, a value out of range or a field pedrl does not implement (penalties,
`logit_bias`, `best_of`, `suffix`, tools, JSON modes, chat log-probs) answers 400
naming it, as OpenAI answers an unrecognized argument; such fields are accepted at
their no-op values (0, {}, null), which clients send as defaults. Text with a lone
surrogate ("\\ud800", valid JSON but no UTF-8) is a 400 too. `top_k` is an extension
(vLLM's; -1 and 0 mean no top-k filter). Bounds that depend on the model (the
vocabulary, the context) are checked by the app.
"""
from typing import Any, Literal

import pydantic

MAX_N = 16  # Choices per request.
MAX_LOGPROBS = 5  # Alternatives per token, as the OpenAI API allows.
# Stop strings per request. The OpenAI API allows 4, but lm-evaluation-harness's
# local-completions sends a task's whole `until` list and the end-of-text string (6 for
# some code tasks), and vLLM takes any number; each costs a host-side search of the text.
MAX_STOPS = 32
MAX_STOP_CHARS = 256  # Characters per stop string (the host matches them on the text).
INT64 = 1 << 63  # seed is a signed 64-bit integer, as vLLM's.
INT32_MAX = (1 << 31) - 1


class APIError(Exception):
  """An error the client caused (or a full queue): status, message, and the OpenAI fields."""

  def __init__(self, status: int, message: str, type: str = "invalid_request_error",
               param: str | None = None, code: str | None = None,
               headers: dict | None = None) -> None:
    super().__init__(message)
    self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
    self.headers = headers or {}

  def body(self) -> dict:
    return {"error": {"message": self.message, "type": self.type, "param": self.param,
                      "code": self.code}}


def check_text(value: str, where: str) -> str:
  """`value`, or a ValueError when it is not encodable as UTF-8 (a lone surrogate)."""
  try:
    value.encode("utf-8")
  except UnicodeEncodeError as e:
    raise ValueError(f"{where} is not valid Unicode (a lone surrogate at character "
                     f"{e.start})") from None
  return value


def _no_op(value, default, what: str):
  """A field pedrl does not implement, allowed only at its no-op value."""
  if value not in (None, default):
    raise ValueError(f"{what} is not supported by this server (only {default!r})")
  return value


class _Request(pydantic.BaseModel):
  model_config = pydantic.ConfigDict(extra="forbid")
  model: str
  user: str | None = None  # Accepted and ignored, as OpenAI logs it.


class _Sampling(_Request):
  temperature: float = pydantic.Field(1.0, ge=0.0, le=2.0)  # 0: greedy.
  top_p: float = pydantic.Field(1.0, gt=0.0, le=1.0)
  top_k: int = pydantic.Field(0, ge=-1, le=INT32_MAX)
  n: int = pydantic.Field(1, ge=1, le=MAX_N)
  stop: str | list[str] | None = None
  seed: int | None = pydantic.Field(None, ge=-INT64, lt=INT64)
  stream: bool = False
  stream_options: dict | None = None
  presence_penalty: float | None = None
  frequency_penalty: float | None = None
  logit_bias: dict | None = None
  response_format: dict | None = None
  tools: list | None = None
  tool_choice: Any = None
  functions: list | None = None
  function_call: Any = None
  parallel_tool_calls: bool | None = None
  metadata: dict | None = None
  store: bool | None = None
  # vLLM's extension: the text leaves the tokenizer's special tokens out (as vLLM's does
  # by default), a thinking tag excepted; false keeps them.
  skip_special_tokens: bool = True

  @pydantic.field_validator("temperature", "top_p", "top_k", "n", "stream", mode="before")
  @classmethod
  def _null_is_default(cls, v, info):
    """`null` is the default, as the OpenAI API reads it."""
    return cls.model_fields[info.field_name].default if v is None else v

  @pydantic.field_validator("stop")
  @classmethod
  def _stops(cls, v):
    stops = [v] if isinstance(v, str) else list(v or [])
    if len(stops) > MAX_STOPS or any(not s for s in stops):
      raise ValueError(f"stop takes at most {MAX_STOPS} non-empty strings")
    if any(len(s) > MAX_STOP_CHARS for s in stops):
      raise ValueError(f"a stop string has at most {MAX_STOP_CHARS} characters")
    return [check_text(s, "a stop string") for s in stops]

  @pydantic.field_validator("stream_options")
  @classmethod
  def _stream_options(cls, v, info):
    if v and not info.data.get("stream"):  # As the OpenAI API and vLLM refuse it.
      raise ValueError("stream_options is only allowed with stream=true")
    if v and set(v) - {"include_usage"}:
      raise ValueError(f"stream_options takes only include_usage, got {sorted(v)}")
    return v

  @pydantic.field_validator("presence_penalty", "frequency_penalty")
  @classmethod
  def _penalties(cls, v, info):
    return _no_op(v, 0, info.field_name)

  @pydantic.field_validator("logit_bias")
  @classmethod
  def _no_bias(cls, v):
    return _no_op(v or None, None, "logit_bias")

  @pydantic.field_validator("tools", "functions")
  @classmethod
  def _no_tools(cls, v, info):
    return _no_op(v or None, None, f"{info.field_name} (tool calling)")

  @pydantic.field_validator("tool_choice", "function_call")
  @classmethod
  def _no_tool_choice(cls, v, info):
    return _no_op(v, "none", info.field_name)

  @pydantic.field_validator("response_format")
  @classmethod
  def _text_only(cls, v):
    if v is not None and v != {"type": "text"}:
      raise ValueError("response_format: only {'type': 'text'} is supported")
    return v

  @property
  def stops(self) -> tuple:
    return tuple(self.stop or ())

  @property
  def include_usage(self) -> bool:
    return bool((self.stream_options or {}).get("include_usage"))


class CompletionRequest(_Sampling):
  prompt: str | list[str] | list[int] | list[list[int]]
  max_tokens: int | None = pydantic.Field(16, ge=0)
  echo: bool = False
  logprobs: int | None = pydantic.Field(None, ge=0, le=MAX_LOGPROBS)
  best_of: int | None = None
  suffix: str | None = None

  @pydantic.field_validator("prompt")
  @classmethod
  def _prompt(cls, v):
    if isinstance(v, list) and (not v or any(isinstance(p, list) and not p for p in v)):
      raise ValueError("prompt must not be empty")
    for p in [v] if isinstance(v, str) else v:
      if isinstance(p, str):
        check_text(p, "the prompt")
    return v

  @pydantic.field_validator("suffix")
  @classmethod
  def _suffix(cls, v):
    return _no_op(v or None, None, "suffix (insertion)")

  @pydantic.model_validator(mode="after")
  def _best_of(self):
    _no_op(self.best_of if self.best_of != self.n else None, None,
           "best_of other than n (server-side ranking)")
    if self.stream and self.logprobs is not None:
      raise ValueError("logprobs with stream=true is not supported")
    return self

  def prompts(self) -> list:
    """The prompts as a list of strings or of token-id lists."""
    p = self.prompt
    if isinstance(p, str) or (p and isinstance(p[0], int)):
      return [p]
    return list(p)


class ChatMessage(pydantic.BaseModel):
  model_config = pydantic.ConfigDict(extra="allow")  # name, tool_call_id, …: ignored.
  role: Literal["system", "developer", "user", "assistant", "tool"]
  # Missing or null: empty, as vLLM reads it (an assistant turn of tool calls has none).
  content: str | list[dict] | None = pydantic.Field(None, validate_default=True)

  @pydantic.field_validator("content")
  @classmethod
  def _content(cls, v):
    if isinstance(v, list):
      if any(part.get("type") != "text" for part in v):
        raise ValueError("only text content parts are supported")
      # Text parts one per line, as vLLM joins them (entrypoints/chat_utils.py).
      v = "\n".join(str(part.get("text", "")) for part in v)
    return check_text(v or "", "a message's content")

  def text(self) -> str:
    return self.content


# apply_chat_template's own parameters (transformers), and the conversation: not template
# variables a request may set.
_TEMPLATE_CALL = frozenset({
    "conversation", "messages", "tools", "documents", "chat_template", "add_generation_prompt",
    "continue_final_message", "tokenize", "padding", "truncation", "max_length",
    "return_tensors", "return_dict", "return_assistant_tokens_mask", "tokenizer_kwargs"})


def _template_kwargs(v: dict | None) -> dict | None:
  """vLLM's `chat_template_kwargs`: variables for the chat template (Qwen3's
  {"enable_thinking": false}), never the render's own parameters."""
  taken = sorted(set(v or ()) & _TEMPLATE_CALL)
  if taken:
    raise ValueError(f"chat_template_kwargs: {taken} are parameters of the template's "
                     "render, not template variables")
  return v


class ChatCompletionRequest(_Sampling):
  messages: list[ChatMessage] = pydantic.Field(min_length=1)
  chat_template_kwargs: dict[str, Any] | None = None  # vLLM's extension.
  max_tokens: int | None = pydantic.Field(None, ge=1)
  max_completion_tokens: int | None = pydantic.Field(None, ge=1)
  logprobs: bool | None = None
  top_logprobs: int | None = None

  @pydantic.field_validator("logprobs")
  @classmethod
  def _no_logprobs(cls, v):
    return _no_op(v, False, "logprobs in chat completions (use /v1/completions)")

  @pydantic.field_validator("top_logprobs")
  @classmethod
  def _no_top_logprobs(cls, v):
    return _no_op(v, 0, "top_logprobs")

  @pydantic.field_validator("chat_template_kwargs")
  @classmethod
  def _template_kwargs(cls, v):
    return _template_kwargs(v)

  def limit(self) -> int | None:
    return self.max_completion_tokens or self.max_tokens


class EmbeddingRequest(_Request):
  input: str | list[str]
  encoding_format: Literal["float", "base64"] = "float"
  dimensions: int | None = None

  @pydantic.field_validator("input")
  @classmethod
  def _input(cls, v):
    texts = [v] if isinstance(v, str) else v
    if not texts:
      raise ValueError("input must not be empty")
    return [check_text(t, "an input") for t in texts]

  @pydantic.field_validator("dimensions")
  @classmethod
  def _dimensions(cls, v):
    return _no_op(v, None, "dimensions (shortened embeddings)")


class TokenizeRequest(pydantic.BaseModel):
  """vLLM's /tokenize: a prompt, or messages rendered with the chat template."""
  model_config = pydantic.ConfigDict(extra="forbid")
  model: str | None = None
  prompt: str | None = None
  messages: list[ChatMessage] | None = None
  chat_template_kwargs: dict[str, Any] | None = None  # With messages, as in chat completions.
  add_special_tokens: bool = True

  @pydantic.field_validator("chat_template_kwargs")
  @classmethod
  def _template_kwargs(cls, v):
    return _template_kwargs(v)

  @pydantic.field_validator("prompt")
  @classmethod
  def _prompt(cls, v):
    return v if v is None else check_text(v, "the prompt")

  @pydantic.model_validator(mode="after")
  def _one(self):
    if (self.prompt is None) == (self.messages is None):
      raise ValueError("give prompt or messages")
    return self


class DetokenizeRequest(pydantic.BaseModel):
  model_config = pydantic.ConfigDict(extra="forbid")
  model: str | None = None
  tokens: list[int]
