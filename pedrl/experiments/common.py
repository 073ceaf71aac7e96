"""What the entry points share: loading the two models, the problems and the rewards,
and how a run ends (exit codes)."""
import dataclasses
import functools
import hashlib
import math
import os
import signal
import sys

import jax
from absl import app, logging

from pedrl import cli, distributed, logs
from pedrl.engine.scoring import Scorer
from pedrl.env import problems as problems_lib, solving, sources
from pedrl.env.dialogue import RecordError
from pedrl.env import party as party_lib
from pedrl.env.party import Party, PartySettings
from pedrl.eval import pedrm, protocol as protocol_lib, shards
from pedrl.eval.mathtutorbench import tasks as mtb_tasks
from pedrl.rewards import backends, embedding, judging, oracle as oracle_lib, pipeline
from pedrl.experiments import settings as settings_lib
from pedrl.experiments.workdir import WorkdirError
from pedrl.rl import checkpoint, loop, update

# Exit codes, for schedulers: 0 done; 1 a configuration, input, endpoint or checkpoint error
# (one line on stderr); 3 training diverged; 128 + N stopped on signal N after saving
# (130 SIGINT, 143 SIGTERM): run the same command again to resume.
EXIT_ERROR, EXIT_DIVERGED = 1, 3
# A user's mistake or a failing service: one line, no traceback. Anything else is a bug.
EXPECTED_ERRORS = (app.UsageError, checkpoint.CheckpointError, judging.JudgeError,
                   oracle_lib.OracleError, problems_lib.DataError, RecordError, WorkdirError,
                   shards.ShardError, pedrm.PedRMError, party_lib.EndpointError,
                   mtb_tasks.TaskError)


# The flags every job takes (--config, --workdir, --multihost): defined by pedrl.cli, which
# also checks them before a job's module is imported.
define_flags = cli.define_job_flags


def exits_cleanly(main):
  """Wraps an entry point's main: expected errors end it with `error: …` and an exit code."""
  @functools.wraps(main)
  def wrapped(argv):
    logs.quiet()  # Also when a main is called in process, not through cli.run.
    try:
      return main(argv)
    except EXPECTED_ERRORS as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(EXIT_ERROR)
    except loop.TrainingDiverged as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(EXIT_DIVERGED)
  return wrapped


def exit_on_signal(name: str | None, step_text: str):
  """After a run returned early on a signal: one log line, exit 128 + the signal's number."""
  if name is None:
    return
  logging.warning("stopping on %s at %s", name, step_text)
  print(f"stopped on {name} at {step_text}; run the same command again to resume",
        file=sys.stderr)
  sys.exit(128 + signal.Signals[name].value)

def value_check(section: str, values: dict):
  """need(ok, name, rule): when not ok, a UsageError naming --config.SECTION.NAME=value
  and the rule it breaks."""
  def need(ok: bool, name: str, rule: str):
    if not ok:
      raise app.UsageError(f"--config.{section}.{name}={values[name]!r}: must be {rule}")
  return need


def finite(x) -> bool:
  return isinstance(x, (int, float)) and math.isfinite(x)


def check_optimizer(need, values: dict) -> None:
  """OptimizerSettings' values that would make AdamW's updates meaningless or non-finite."""
  for name in ("lr", "adam_eps", "max_grad_norm"):
    need(finite(values[name]) and values[name] > 0, name, "a finite number > 0")
  need(finite(values["weight_decay"]) and values["weight_decay"] >= 0, "weight_decay",
       "finite and >= 0")
  need(values["lr_schedule"] in update.SCHEDULES, "lr_schedule", f"one of {update.SCHEDULES}")
  need(isinstance(values["warmup_steps"], int) and values["warmup_steps"] >= 0, "warmup_steps",
       "an integer >= 0")


JUDGE_PANELS = {"pedagogical_rl": judging.PEDAGOGICAL_RL, "thinking": judging.THINKING,
                "thinking_no_quality": judging.THINKING[:2]}  # 001's judges, no thinking score.


def read_settings(c, training: bool = False, evaluation: bool = False) -> settings_lib.RunSettings:
  """The config's typed settings, or one `error: …` line: a key nothing reads, a value
  a setting refuses."""
  try:
    return settings_lib.read_settings(c, training, evaluation)
  except ValueError as e:
    raise app.UsageError(str(e)) from None


def load_party(side: PartySettings, mesh, scan_layers: bool, template_kwargs=None, params=None,
               **runtime) -> Party:
  """A model from a checkpoint path with its tokenizer, sampler and sampling params
  (`params` given: those, placed, instead of the path's); `runtime` sets ModelConfig
  runtime fields (e.g. remat=True for the trained tutor)."""
  if not side.path:
    raise app.UsageError("give the checkpoint directory, e.g. --config.tutor.path=/ckpt/dir")
  return party_lib.load(side.path, settings_lib.sampling(side), mesh=mesh, scan_layers=scan_layers,
                        template_kwargs=template_kwargs, params=params, **runtime)


def endpoint_party(side: PartySettings, endpoint: party_lib.EndpointSettings, role: str,
                   temperature: float | None = None, max_new_tokens: int | None = None):
  """A side played by an OpenAI-compatible endpoint, checked with one small request (a
  wrong URL, key or model stops the run before any model loads). Sampling is the side's
  (or the given temperature and token budget: solve attempts); top-k has no API field."""
  if jax.process_count() > 1:
    raise app.UsageError(f"a {role} endpoint on a multi-host run is not supported: run the "
                         "evaluation on one host (its shards may run on many)")
  if side.top_k:
    logging.info("%s endpoint %s: top_k=%d is not sent (the chat API has no such field)",
                 role, endpoint.model, side.top_k)
  client = backends.OpenAIBackend(
      model=endpoint.model, base_url=endpoint.base_url, api_key_env=endpoint.api_key_env,
      temperature=side.temperature if temperature is None else temperature, top_p=side.top_p,
      max_tokens=side.max_new_tokens if max_new_tokens is None else max_new_tokens,
      max_concurrency=endpoint.max_concurrency, timeout=endpoint.timeout, role=role)
  client.preflight()
  return party_lib.EndpointParty(client, role)


def tutor_checkpoint(run: protocol_lib.TutorRun, workdir: str,
                     recorded_at: tuple) -> tuple[str, int]:
  """(base checkpoint, step) of the training run under test: the step given, else the
  one this evaluation's workdir recorded at `recorded_at` in its protocol (a resumed or
  later shard reads the weights the first one read, even if training saved newer steps
  since), else the latest."""
  base, _, steps = checkpoint.training_run(run.workdir)
  step = run.step
  if step is None:
    step = shards.recorded(workdir, recorded_at)
  if step is None and steps:
    step = steps[-1]
  if step not in steps:
    raise checkpoint.CheckpointError(f"{run.workdir}: no checkpoint at step {step}; saved "
                                     f"steps: {steps}")
  return base, step


def load_problems(s: settings_lib.RunSettings):
  """The configured split (pedrl.env.problems.load), and the loader's report of skipped rows."""
  p = s.problems
  if not p.path:
    raise app.UsageError("give the problems: --config.problems.path=rows.jsonl (or "
                         "tfds:NAME[/CONFIG]:SPLIT)")
  rows, report = problems_lib.load(p, s.job.seed)
  logging.info("%s; %d problems in split %r", report.summary(), len(rows), p.split)
  if not rows:
    raise app.UsageError(
        f"no problems left in --config.problems.path={p.path!r} after loading "
        f"({report.summary()}), filter={p.filter}, split={p.split!r}, limit={p.limit}")
  return rows, report


def solver_party(student, solve: solving.SolveSettings):
  """The student with the solve attempts' sampling (temperature, token budget)."""
  return dataclasses.replace(student, sampling=dataclasses.replace(
      student.sampling, temperature=solve.temperature, max_new_tokens=solve.max_new_tokens))


def _needs_judges(s: settings_lib.RunSettings) -> bool:
  """Rewards that use judges, or an evaluation (its leak and helpful rates)."""
  return s.rewards.needs_judges or s.evaluation is not None


def _api_roles(s: settings_lib.RunSettings) -> dict:
  """{role: OpenAI settings overrides} for each role the config gives to an API endpoint."""
  roles = {}
  if _needs_judges(s) and s.judging.judge_backend == "openai":
    roles["judges"] = {}
  if "uco" in s.rewards.names:
    o = s.oracle
    if o.oracle == "openai":
      roles["oracle"] = {k: v for k, v in dict(model=o.oracle_model, base_url=o.oracle_base_url,
                                               api_key_env=o.oracle_api_key_env).items() if v}
    if s.uco.level_method == "llm" and o.classifier_backend == "openai":
      roles["classifier"] = {}
  return roles


def api_backends(s: settings_lib.RunSettings) -> dict:
  """The API backends the config uses, by role, each checked with one minimal request.

  Built before any model loads: a missing key, a wrong model name or a dead
  endpoint costs seconds, not the minutes of loading 7B weights. On a multi-host
  run only process 0 calls the API (and needs the key); its replies are broadcast.
  """
  out = {}
  for role, overrides in _api_roles(s).items():
    make = lambda: backends.OpenAIBackend(**dict(s.openai, **overrides))
    backend = (make() if jax.process_count() == 1 else
               backends.MainProcessCalls(make() if distributed.is_main_process() else None))
    backend.preflight()
    logging.info("%s endpoint %s answers", role, getattr(backend, "endpoint", "(process 0)"))
    out[role] = backend
  return out


def check_uco(s: settings_lib.RunSettings) -> None:
  """UCO's rewards name their oracle endpoint and embedder (no offline stand-in by default)."""
  o = s.oracle
  if o.oracle not in ("openai", "local", "reference"):
    raise app.UsageError(f"--config.rewards.uco.oracle={o.oracle!r} is not one of openai, "
                         "local, reference")
  if o.oracle == "openai" and not o.oracle_model:
    raise app.UsageError(
        "UCO's oracle is an LLM on an OpenAI-compatible endpoint (paper 000 used "
        "Gemini-2.5-Pro); give --config.rewards.uco.oracle_model=NAME and, unless it is "
        "the judges' endpoint, --config.rewards.uco.oracle_base_url=URL and "
        "--config.rewards.uco.oracle_api_key_env=VAR; or --config.rewards.uco.oracle=local "
        "(the local judge model) or =reference (fixed offline stand-ins, smoke tests only)")
  if not o.embedder:
    raise app.UsageError(
        "UCO's semantic score needs an embedder: --config.rewards.uco.embedder=DIR (BGE-M3 "
        "in paper 000, whose δ = 0.7 was tuned on it), or =minilm for offline runs")


def check_paths(s: settings_lib.RunSettings, dialogues: bool = True) -> None:
  """Every checkpoint directory the config names exists, before anything loads. A job
  without dialogues (the reasoning benchmarks) needs only the tutor."""
  rewards, o = s.rewards, s.oracle
  if dialogues and "uco" in rewards.names:
    check_uco(s)
  flags = {f"{side}.path": getattr(s, side).path
           for side in (("tutor", "student") if dialogues else ("tutor",))
           if not getattr(getattr(s, f"{side}_endpoint", None), "model", None)}
  uses_local = dialogues and (
      (_needs_judges(s) and s.judging.judge_backend == "local") or
      ("uco" in rewards.names and "local" in (
          o.oracle, o.classifier_backend if s.uco.level_method == "llm" else None)))
  if uses_local:
    flags["rewards.local_judge.path"] = s.local_judge.path
  if dialogues and "uco" in rewards.names and o.embedder != "minilm":
    flags["rewards.uco.embedder"] = o.embedder
  for name, path in flags.items():
    if not path or not os.path.isfile(os.path.join(path, "config.json")):
      raise app.UsageError(f"--config.{name}={path!r} is not a checkpoint directory "
                           "(no config.json)")
  if dialogues:
    try:
      sources.check(s.problems.path, "problems file")
    except problems_lib.DataError as e:
      raise app.UsageError(f"--config.problems.path={s.problems.path!r}: {e}") from None


def text_backend(s: settings_lib.RunSettings, kind: str, role: str, mesh, apis: dict):
  """The backend answering `role`'s requests (judges, oracle, classifier): the API one
  from `api_backends`, a local model, or the rules."""
  if kind == "openai":
    return apis[role]
  if kind == "local":
    return backends.LocalBackend(load_party(s.local_judge, mesh, s.job.scan_layers),
                                 temperature=s.local_judge.temperature, seed=s.job.seed)
  if kind == "rule":
    return s.rule_judges
  raise app.UsageError(f"backend {kind!r} is not one of openai, local, rule")


def judge_panel(s: settings_lib.RunSettings, mesh, apis: dict) -> tuple:
  """(JudgeSpecs with the configured sample count, their backend)."""
  j = s.judging
  if j.judges not in JUDGE_PANELS:
    raise app.UsageError(f"rewards.judges {j.judges!r} is not one of {sorted(JUDGE_PANELS)}")
  specs = tuple(dataclasses.replace(x, samples=j.judge_samples) if x.kind == judging.DECISION
                else x for x in JUDGE_PANELS[j.judges])
  return specs, text_backend(s, j.judge_backend, "judges", mesh, apis)


def judges_protocol(s: settings_lib.RunSettings) -> dict:
  """The judges as a protocol records them: panel, backend, the model behind it, samples
  and rounds (whatever decides their verdicts)."""
  j = s.judging
  model = {"openai": {k: s.openai.get(k) for k in ("model", "base_url", "temperature",
                                                   "max_tokens", "top_p")},
           "local": protocol_lib.jsonable(s.local_judge),
           "rule": protocol_lib.jsonable(s.rule_judges)}.get(j.judge_backend)
  return {"panel": j.judges, "backend": j.judge_backend, "model": model,
          "samples": j.judge_samples, "rounds": j.judge_rounds}


def rollout_protocol(rollout) -> dict:
  """The dialogue rules as a protocol records them; a tutor prompt file by its path and
  its content's SHA-1, so an edited file at the same path makes another protocol."""
  out = protocol_lib.jsonable(rollout)
  if rollout.tutor_prompt_file:
    with open(rollout.tutor_prompt_file, "rb") as f:
      out["tutor_prompt_file_sha1"] = hashlib.sha1(f.read()).hexdigest()
  return out


def build_rewards(s: settings_lib.RunSettings, student, solver, mesh,
                  apis=None) -> pipeline.RewardPipeline:
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
                                 j.on_judge_failure, solve_always=s.solve.post_dialogue,
                                 max_failed_share=j.max_failed_share, **kw)
