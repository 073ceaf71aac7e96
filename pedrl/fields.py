"""The rules a settings field's value follows, checked in its type's `__post_init__`.

A broken rule raises `FieldError`, naming the field, its value and the rule; the config
reader (pedrl.jobs.settings.Reader) puts the section in front, so that a user reads one
line naming the flag to change: `--config.rl.lr=nan: must be a finite number > 0`.
Imports nothing of pedrl: every settings module, from the client's up, uses it.
"""
import math
from typing import Any, Sequence


class FieldError(ValueError):
  """A settings field's value breaks its rule: `NAME=VALUE: must be RULE`."""

  def __init__(self, name: str, value: Any, rule: str):
    super().__init__(f"{name}={value!r}: must be {rule}")
    self.name, self.value, self.rule = name, value, rule


def finite(x: Any) -> bool:
  """A real number (no bool), not inf or NaN."""
  return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def need(ok: bool, settings: Any, name: str, rule: str) -> None:
  """FieldError on `settings.NAME` unless `ok`."""
  if not ok:
    raise FieldError(name, getattr(settings, name), rule)


def counts(settings: Any, names: Sequence[str], least: int = 1) -> None:
  """Each of `names` is an integer >= `least`."""
  for name in names:
    value = getattr(settings, name)
    need(isinstance(value, int) and not isinstance(value, bool) and value >= least, settings,
         name, f"an integer >= {least}")


def positive(settings: Any, names: Sequence[str]) -> None:
  """Each of `names` is a finite number > 0."""
  for name in names:
    value = getattr(settings, name)
    need(finite(value) and value > 0, settings, name, "a finite number > 0")


def non_negative(settings: Any, names: Sequence[str]) -> None:
  """Each of `names` is a finite number >= 0."""
  for name in names:
    value = getattr(settings, name)
    need(finite(value) and value >= 0, settings, name, "finite and >= 0")


def one_of(settings: Any, name: str, choices: Sequence) -> None:
  need(getattr(settings, name) in choices, settings, name, f"one of {tuple(choices)}")


# Config keys that were renamed (old -> new) or removed (old -> None), each listed in
# CHANGELOG.md: an old key is refused with a line naming its new one, both where a
# command line overrides it (pedrl.cli) and where a config file sets it (the reader).
RENAMED = {
    "rewards.uco.oracle_model": "rewards.uco.oracle_endpoint.model",
    "rewards.uco.oracle_base_url": "rewards.uco.oracle_endpoint.base_url",
    "rewards.uco.oracle_api_key_env": "rewards.uco.oracle_endpoint.api_key_env",
    # What an endpoint is for (judge, oracle, …) is its client's, no setting.
    "rewards.openai.role": None,
    "label.openai.role": None,
    "label2.openai.role": None,
}


# Config keys added to a section, with the value that does what the code did before
# them: a run recorded without the key ran with that value. The endpoint sides' retries
# were the client's defaults before their section had them.
ADDED = {
    **{f"{side}.endpoint.{key}": value for side in ("tutor", "student")
       for key, value in (("max_tries", 5), ("backoff_base", 1.0), ("backoff_max", 30.0),
                          ("max_tokens_field", "max_tokens"))},
    # Paper 003's reference judge prompt files: none given, pedrl's own wording.
    "rewards.leakage_prompt_file": "", "rewards.helpfulness_prompt_file": "",
    # Request seeds, sent only by CPA's endpoint backbone: a run resumed across their
    # addition sends them from then on (CHANGELOG.md).
    **{f"{section}.send_seed": True for section in (
        "tutor.endpoint", "student.endpoint", "rewards.openai", "label.openai", "label2.openai")},
    "rewards.uco.oracle_endpoint.send_seed": None,  # None: the judges' endpoint's.
    "rewards.template_tags": "paper",  # The only reading before the option.
}


def dotted(tree: dict, prefix: str = "") -> dict:
  """A nested dict's leaves by dotted key ({"rl": {"lr": 1}} -> {"rl.lr": 1})."""
  out = {}
  for key, value in tree.items():
    out.update(dotted(value, f"{prefix}{key}.") if isinstance(value, dict)
               else {f"{prefix}{key}": value})
  return out


def under_current_keys(values: dict) -> dict:
  """{key: value} recorded under older key names (a run's settings), under today's: a
  renamed key under its new name, a removed one left out, an added one with the value
  the run had (ADDED); so that a run resumes across a rename."""
  out = {RENAMED.get(k, k): v for k, v in values.items() if RENAMED.get(k, k) is not None}
  sections = {k.rpartition(".")[0] for k in out}  # An added key of a section the run had.
  return {**{k: v for k, v in ADDED.items() if k.rpartition(".")[0] in sections}, **out}


def renamed(key: str) -> str | None:
  """Why a dotted config key (`rewards.uco.oracle_model`) is refused if it was renamed or
  removed; None for any other key."""
  if key not in RENAMED:
    return None
  if RENAMED[key] is None:
    return f"--config.{key} was removed: no setting replaces it"
  return f"--config.{key} was renamed: use --config.{RENAMED[key]}"
