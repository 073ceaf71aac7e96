"""The settings of an OpenAI-compatible endpoint, the one type every config section that
names one reads: the judges' (`rewards.openai`), UCO's oracle (`rewards.uco.oracle`),
an evaluation's endpoint sides (`tutor.endpoint`, `student.endpoint`), MathTutorBench's
model under test and the analysis labellers (`label.openai`).

Importable without JAX or the `openai` package: config files and pedrl.jobs.settings
build on it, so a config is read and its mistakes reported before a job loads anything.
The client (pedrl.clients.openai_compat.OpenAIBackend) holds one of these.
"""
import dataclasses

from pedrl import fields

MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens")


@dataclasses.dataclass(frozen=True)
class EndpointSettings:
  """An OpenAI-compatible endpoint as a config names it: model, address, key variable,
  sampling and retry policy. Building its client reads the key; these settings never
  hold it."""
  # As the endpoint names it, e.g. gpt-4o-2024-08-06. None: no endpoint (an evaluation's
  # side is then a local checkpoint; UCO's oracle=openai refuses it).
  model: str | None = None
  base_url: str | None = None  # None: api.openai.com.
  api_key_env: str = "OPENAI_API_KEY"  # The variable holding the key (never the key).
  # Sampling. An endpoint side's come from its side's section (tutor.temperature, …):
  # its `endpoint` section leaves these out (SAMPLING).
  temperature: float = 0.6  # The reference code's judge temperature.
  max_tokens: int = 1024
  top_p: float = 1.0  # Sent only below 1.
  # The request field that carries max_tokens: OpenAI's reasoning models (o-series, GPT-5)
  # refuse "max_tokens" and take "max_completion_tokens" (their reasoning counts in it).
  max_tokens_field: str = "max_tokens"
  max_concurrency: int = 16
  # Seconds one request may take. A timeout too short for a legitimate reply fails it on
  # every try (each retry asks for the same long reply), one too long only waits longer on
  # a hung request; so the default is the longest reply any use asks for, a dialogue turn
  # of an endpoint side. The judges' and labellers' replies are short: their config
  # sections set 60 s (pedrl.jobs.base_config, experiments/analyze.py).
  timeout: float = 120.0
  max_tries: int = 5  # Paper 001 retries a judge 5 times.
  backoff_base: float = 1.0  # Seconds before the 2nd try; doubles each try, ±50% jitter.
  backoff_max: float = 30.0  # Also caps the wait a Retry-After header asks for.
  # Send a request's sampling seed (the API's `seed`) where pedrl has one: CPA's backbone
  # calls (pedrl.agents.backbone.EndpointBackbone). False: an endpoint that refuses it.
  send_seed: bool = True

  # The fields an endpoint side takes from its side's section, not its own.
  SAMPLING = ("temperature", "top_p", "max_tokens")

  def __post_init__(self):
    fields.one_of(self, "max_tokens_field", MAX_TOKENS_FIELDS)
    fields.counts(self, ("max_concurrency", "max_tries", "max_tokens"))
    fields.positive(self, ("timeout", "backoff_max"))
    fields.non_negative(self, ("backoff_base", "temperature"))
    fields.need(fields.finite(self.top_p) and 0 < self.top_p <= 1, self, "top_p", "in (0, 1]")
    fields.need(bool(self.api_key_env), self, "api_key_env",
                "the name of the environment variable holding the key")
