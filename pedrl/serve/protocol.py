"""The OpenAI API's request bodies (pydantic) and its error shape.

Fields the server does not use (`user`, penalties, …) are accepted and ignored,
as clients send them; fields it uses are type- and range-checked, and a bad one
answers 400 with an OpenAI-style error body naming it. `top_k` is an extension
(vLLM's; -1 and 0 mean no top-k filter).
"""
from typing import Literal

import pydantic

MAX_N = 16  # Choices per request.
MAX_LOGPROBS = 5  # Alternatives per token, as the OpenAI API allows.


class APIError(Exception):
  """An error the client caused (or a full queue): status, message, and the OpenAI fields."""

  def __init__(self, status: int, message: str, type: str = "invalid_request_error",
               param: str | None = None, code: str | None = None, headers: dict | None = None):
    super().__init__(message)
    self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
    self.headers = headers or {}

  def body(self) -> dict:
    return {"error": {"message": self.message, "type": self.type, "param": self.param,
                      "code": self.code}}


class _Sampling(pydantic.BaseModel):
  model_config = pydantic.ConfigDict(extra="allow")
  model: str
  temperature: float = pydantic.Field(1.0, ge=0.0, le=2.0)  # 0: greedy.
  top_p: float = pydantic.Field(1.0, gt=0.0, le=1.0)
  top_k: int = pydantic.Field(0, ge=-1)
  n: int = pydantic.Field(1, ge=1, le=MAX_N)
  stop: str | list[str] | None = None
  seed: int | None = None
  stream: bool = False

  @pydantic.field_validator("temperature", "top_p", "top_k", mode="before")
  @classmethod
  def _null_is_default(cls, v, info):
    """`null` is the default, as the OpenAI API reads it."""
    return cls.model_fields[info.field_name].default if v is None else v

  @pydantic.field_validator("stop")
  @classmethod
  def _stops(cls, v):
    stops = [v] if isinstance(v, str) else list(v or [])
    if len(stops) > 4 or any(not s for s in stops):
      raise ValueError("stop takes at most 4 non-empty strings")
    return stops


class CompletionRequest(_Sampling):
  prompt: str | list[str] | list[int] | list[list[int]]
  max_tokens: int | None = pydantic.Field(16, ge=0)
  echo: bool = False
  logprobs: int | None = pydantic.Field(None, ge=0, le=MAX_LOGPROBS)

  @pydantic.field_validator("prompt")
  @classmethod
  def _nonempty(cls, v):
    if isinstance(v, list) and (not v or any(isinstance(p, list) and not p for p in v)):
      raise ValueError("prompt must not be empty")
    return v

  def prompts(self) -> list:
    """The prompts as a list of strings or of token-id lists."""
    p = self.prompt
    if isinstance(p, str) or (p and isinstance(p[0], int)):
      return [p]
    return list(p)


class ChatMessage(pydantic.BaseModel):
  model_config = pydantic.ConfigDict(extra="allow")
  role: Literal["system", "developer", "user", "assistant", "tool"]
  content: str | list[dict] | None = None

  def text(self) -> str:
    """The content as text: a list of parts keeps its text parts."""
    if isinstance(self.content, list):
      if any(part.get("type") != "text" for part in self.content):
        raise ValueError("only text content parts are supported")
      return "".join(str(part.get("text", "")) for part in self.content)
    return self.content or ""


class ChatCompletionRequest(_Sampling):
  messages: list[ChatMessage] = pydantic.Field(min_length=1)
  max_tokens: int | None = pydantic.Field(None, ge=1)
  max_completion_tokens: int | None = pydantic.Field(None, ge=1)

  def limit(self) -> int | None:
    return self.max_completion_tokens or self.max_tokens
