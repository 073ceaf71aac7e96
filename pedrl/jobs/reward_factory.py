"""The judges and rewards a config asks for: API backends checked before any model
loads, the judge panel, the reward pipeline; the judges and dialogue rules as a
protocol records them."""
import dataclasses
import hashlib

import jax
from absl import app, logging

from pedrl import distributed
from pedrl.clients import openai_compat
from pedrl.engine.scoring import Scorer
from pedrl.eval import protocol as protocol_lib
from pedrl.jobs import settings as settings_lib
from pedrl.jobs.loading import load_party
from pedrl.env.party import EndpointParty, Party
from pedrl.env.settings import RolloutSettings, SolveSettings
from pedrl.rewards import asking, backends, embedding, judging, oracle as oracle_lib, pipeline


JUDGE_PANELS = {"pedagogical_rl": judging.PEDAGOGICAL_RL, "thinking": judging.THINKING,
                "thinking_no_quality": judging.THINKING[:2]}  # 001's judges, no thinking score.


def api_roles(s: settings_lib.DialogueSettings) -> dict:
  """{role: EndpointSettings} for each role the config gives to an API endpoint: the
  judges' and the level classifier's is `rewards.openai`, the oracle's its own."""
  roles = {}
  if s.judged and s.judging.judge_backend == "openai":
    roles["judges"] = s.openai
  if "uco" in s.rewards.names:
    if s.oracle.oracle == "openai":
      roles["oracle"] = s.oracle_endpoint
    if s.uco.level_method == "llm" and s.oracle.classifier_backend == "openai":
      roles["classifier"] = s.openai
  return roles


def api_backends(s: settings_lib.DialogueSettings) -> dict:
  """The API backends the config uses, by role, each checked with one minimal request.

  Built before any model loads: a missing key, a wrong model name or a dead
  endpoint costs seconds, not the minutes of loading 7B weights. On a multi-host
  run only process 0 calls the API (and needs the key); its replies are broadcast.
  """
  out = {}
  for role, endpoint in api_roles(s).items():
    make = lambda: openai_compat.OpenAIBackend(endpoint, "judge" if role == "judges" else role)
    backend = (make() if jax.process_count() == 1 else
               backends.MainProcessCalls(make() if distributed.is_main_process() else None))
    backend.preflight()
    logging.info("%s endpoint %s answers", role, getattr(backend, "endpoint", "(process 0)"))
    out[role] = backend
  return out


def text_backend(s: settings_lib.DialogueSettings, kind: str, role: str,
                 mesh: jax.sharding.Mesh | None, apis: dict) -> asking.TextBackend:
  """The backend answering `role`'s requests (judges, oracle, classifier): the API one
  from `api_backends`, a local model, or the rules."""
  if kind == "openai":
    return apis[role]
  if kind == "local":
    return backends.LocalBackend(load_party(s.local_judge, mesh, s.job.scan_layers),
                                 temperature=s.local_judge.temperature, seed=s.job.seed)
  if kind == "rule":
    return backends.RuleBackend(s.rule_judges)
  raise app.UsageError(f"backend {kind!r} is not one of openai, local, rule")


def judge_panel(s: settings_lib.DialogueSettings, mesh: jax.sharding.Mesh | None,
                apis: dict) -> tuple:
  """(JudgeSpecs with the configured sample count, their backend)."""
  j = s.judging
  if j.judges not in JUDGE_PANELS:
    raise app.UsageError(f"rewards.judges {j.judges!r} is not one of {sorted(JUDGE_PANELS)}")
  specs = tuple(dataclasses.replace(x, samples=j.judge_samples) if x.kind == judging.DECISION
                else x for x in JUDGE_PANELS[j.judges])
  files = {judging.LEAKAGE: j.leakage_prompt_file, judging.HELPFULNESS: j.helpfulness_prompt_file}
  specs = tuple(dataclasses.replace(x, prompt_file=files[x.name],
                                    reference=judging.REFERENCE_PROMPTS[x.name])
                if files.get(x.name) else x for x in specs)
  return specs, text_backend(s, j.judge_backend, "judges", mesh, apis)


def judges_protocol(s: settings_lib.DialogueSettings) -> dict:
  """The judges as a protocol records them: panel, backend, the model behind it, samples,
  rounds, parsing, transcript and prompt files (whatever decides their verdicts)."""
  j = s.judging
  model = {"openai": {k: getattr(s.openai, k) for k in ("model", "base_url", "temperature",
                                                        "max_tokens", "top_p")},
           "local": protocol_lib.jsonable(s.local_judge),
           "rule": protocol_lib.jsonable(s.rule_judges)}.get(j.judge_backend)
  # A prompt file by its path and its content's SHA-1, only when given (protocols written
  # before these settings compare equal).
  files = {k: v for k, v in protocol_lib.jsonable(j).items() if k.endswith("_prompt_file") and v}
  return {"panel": j.judges, "backend": j.judge_backend, "model": model,
          "samples": j.judge_samples, "rounds": j.judge_rounds, "parse": j.judge_parse,
          "transcript": j.judge_transcript, **files, **_prompt_file_hashes(j)}


def rollout_protocol(rollout: RolloutSettings, seed: int) -> dict:
  """The dialogue rules as a protocol records them, with the seed that draws their
  scenarios and tokens (where protocols have always recorded it, so that a resumed
  workdir's compare equal); a tutor prompt file by its path and its content's SHA-1, so
  an edited file at the same path makes another protocol."""
  out = {**protocol_lib.jsonable(rollout), "seed": seed}
  return {**out, **_prompt_file_hashes(rollout)}


def _prompt_file_hashes(section) -> dict:
  """{"<key>_sha1": the SHA-1 of the file} for each prompt file a section names."""
  out = {}
  for key, path in protocol_lib.jsonable(section).items():
    if key.endswith("_prompt_file") and path:
      with open(path, "rb") as f:
        out[f"{key}_sha1"] = hashlib.sha1(f.read()).hexdigest()
  return out


def solve_protocol(solve: SolveSettings, seed: int) -> dict:
  """The solve attempts as a protocol records them: what decides them, with their seed
  (as rollout_protocol), not how many prompts share a call."""
  return {**{k: v for k, v in protocol_lib.jsonable(solve).items() if k != "prompts_per_call"},
          "seed": seed, **_prompt_file_hashes(solve)}


def build_rewards(s: settings_lib.DialogueSettings, student: Party | EndpointParty,
                  solver: Party | EndpointParty, mesh: jax.sharding.Mesh | None,
                  apis: dict | None = None) -> pipeline.RewardPipeline:
  """The reward pipeline the config asks for (judges, oracle, embedder, weights);
  `apis` are the API backends from `api_backends(s)` (built here when not given)."""
  j, o = s.judging, s.oracle
  apis = api_backends(s) if apis is None else apis
  specs, backend = judge_panel(s, mesh, apis) if s.rewards.needs_judges else ((), None)
  kw = {}
  if "uco" in s.rewards.names:
    oracle = (oracle_lib.ReferenceOracle() if o.oracle == "reference" else
              oracle_lib.LLMOracle(text_backend(s, o.oracle, "oracle", mesh, apis),
                                   rounds=o.oracle_rounds, on_failure=o.on_oracle_failure,
                                   max_failed_share=j.max_failed_share))
    path = embedding.minilm_path() if o.embedder == "minilm" else o.embedder
    kw = dict(uco=s.uco, student=student, scorer=Scorer(student.sampler.model, mesh),
              oracle=oracle, embedder=embedding.Embedder(path),
              classifier=(text_backend(s, o.classifier_backend, "classifier", mesh, apis)
                          if s.uco.level_method == "llm" else None))
  return pipeline.RewardPipeline(s.rewards, solver, s.solve, specs, backend, j.judge_rounds,
                                 j.on_judge_failure, judge_parse=j.judge_parse,
                                 judge_transcript=j.judge_transcript,
                                 solve_always=s.solve.post_dialogue,
                                 max_failed_share=j.max_failed_share, seed=s.job.seed, **kw)
