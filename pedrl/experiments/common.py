"""What the entry points share: loading the two models, the problems and the rewards,
and how a run ends (exit codes)."""
import dataclasses
import functools
import os
import signal
import sys

import jax
from absl import app, logging

from pedrl import distributed, models
from pedrl.engine import Sampler, SamplingParams
from pedrl.engine.scoring import Scorer
from pedrl.env import chat, problems as problems_lib, rollout, solving
from pedrl.rewards import (assemble, backends, embedding, judging, oracle as oracle_lib,
                           pipeline, uco_turns)
from pedrl.experiments.workdir import WorkdirError
from pedrl.rl import checkpoint, trainer
from pedrl.tokenizer import load_tokenizer

# Exit codes, for schedulers: 0 done; 1 a configuration, input, endpoint or checkpoint error
# (one line on stderr); 3 training diverged; 128 + N stopped on signal N after saving
# (130 SIGINT, 143 SIGTERM): run the same command again to resume.
EXIT_ERROR, EXIT_DIVERGED = 1, 3
# A user's mistake or a failing service: one line, no traceback. Anything else is a bug.
EXPECTED_ERRORS = (app.UsageError, checkpoint.CheckpointError, judging.JudgeError,
                   oracle_lib.OracleError, problems_lib.DataError, WorkdirError)


def exits_cleanly(main):
  """Wraps an entry point's main: expected errors end it with `error: …` and an exit code."""
  @functools.wraps(main)
  def wrapped(argv):
    try:
      return main(argv)
    except EXPECTED_ERRORS as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(EXIT_ERROR)
    except trainer.TrainingDiverged as e:
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

JUDGE_PANELS = {"pedagogical_rl": judging.PEDAGOGICAL_RL, "thinking": judging.THINKING,
                "thinking_no_quality": judging.THINKING[:2]}  # 001's judges, no thinking score.
LOADERS = {"bigmath": problems_lib.load_bigmath, "gsm8k": problems_lib.load_gsm8k,
           "math500": problems_lib.load_math500}


def load_party(side, mesh, scan_layers: bool, template_kwargs=None, **runtime) -> rollout.Party:
  """A model from a checkpoint path with its tokenizer, sampler and sampling params;
  `runtime` sets ModelConfig runtime fields (e.g. remat=True for the trained tutor)."""
  if not side.path:
    raise app.UsageError("give the checkpoint directory, e.g. --config.tutor.path=/ckpt/dir")
  cfg, model, params = models.load(side.path, shardings=mesh, scan_layers=scan_layers, **runtime)
  tokenizer = load_tokenizer(side.path, require_chat_template=True)
  sampling = SamplingParams(max_new_tokens=side.max_new_tokens, temperature=side.temperature,
                            top_k=side.top_k, top_p=side.top_p, stop_token_ids=cfg.eos_token_ids)
  return rollout.Party(Sampler(model, tokenizer, mesh=mesh), params,
                       chat.ChatFormat(tokenizer, dict(template_kwargs or {})), sampling)


def load_problems(c):
  """The configured split, and the loader's report of skipped rows."""
  p = c.problems
  if not p.path:
    raise app.UsageError("give the problems file: --config.problems.path=rows.jsonl")
  if p.format not in LOADERS:
    raise app.UsageError(f"problems.format {p.format!r} is not one of {sorted(LOADERS)}")
  rows, report = LOADERS[p.format](p.path, on_error=p.on_error)
  logging.info("%s", report.summary())
  if p.filter:
    rows = problems_lib.paper_filter(rows)
    logging.info("%d problems pass the paper's filter", len(rows))
  if p.split != "all":
    train, test = problems_lib.split(rows, p.n_train, p.n_test, c.seed)
    rows = {"train": train, "test": test}[p.split]
  rows = rows[:p.limit] if p.limit > 0 else rows
  if not rows:
    raise app.UsageError(
        f"no problems left in --config.problems.path={p.path!r} after loading "
        f"({report.summary()}), filter={p.filter}, split={p.split!r}, limit={p.limit}")
  return rows, report


def dialogue_settings(c):
  """(RolloutSettings, SolveSettings) of a config's `rollout` and `solve` sections."""
  settings = rollout.RolloutSettings(
      seed=c.seed, **dict(c.rollout.to_dict(), personas=tuple(c.rollout.personas)))
  solve = solving.SolveSettings(k=c.solve.k, match=c.solve.match, seed=c.seed,
                                prompts_per_call=c.solve.prompts_per_call,
                                student_prompt=settings.student_prompt)
  return settings, solve


def solver_party(student, c):
  """The student with the solve attempts' sampling (temperature, token budget)."""
  return dataclasses.replace(student, sampling=dataclasses.replace(
      student.sampling, temperature=c.solve.temperature, max_new_tokens=c.solve.max_new_tokens))


def reward_settings(c) -> assemble.RewardSettings:
  r = c.rewards
  try:
    components = assemble.parse_components(r.components)
  except ValueError as e:
    raise app.UsageError(f"--config.rewards.components={r.components!r}: {e}") from None
  return assemble.RewardSettings(components=components, lam=r.lam, hard=r.hard,
                                 lam_think=r.lam_think, theta=r.theta, gamma=r.uco.gamma)


def _api_roles(c) -> dict:
  """{role: OpenAI settings overrides} for each role the config gives to an API endpoint."""
  r, u = c.rewards, c.rewards.uco
  settings = reward_settings(c)
  roles = {}
  if settings.needs_judges and r.judge_backend == "openai":
    roles["judges"] = {}
  if "uco" in settings.names:
    if u.oracle == "openai":
      roles["oracle"] = {k: v for k, v in dict(model=u.oracle_model, base_url=u.oracle_base_url,
                                               api_key_env=u.oracle_api_key_env).items() if v}
    if u.level_method == "llm" and u.classifier_backend == "openai":
      roles["classifier"] = {}
  return roles


def api_backends(c) -> dict:
  """The API backends the config uses, by role, each checked with one minimal request.

  Built before any model loads: a missing key, a wrong model name or a dead
  endpoint costs seconds, not the minutes of loading 7B weights. On a multi-host
  run only process 0 calls the API (and needs the key); its replies are broadcast.
  """
  out = {}
  for role, overrides in _api_roles(c).items():
    make = lambda: backends.OpenAIBackend(**dict(c.rewards.openai.to_dict(), **overrides))
    backend = (make() if jax.process_count() == 1 else
               backends.MainProcessCalls(make() if distributed.is_main_process() else None))
    backend.preflight()
    logging.info("%s endpoint %s answers", role, getattr(backend, "endpoint", "(process 0)"))
    out[role] = backend
  return out


def check_paths(c) -> None:
  """Every checkpoint directory the config names exists, before anything loads."""
  r, u = c.rewards, c.rewards.uco
  settings = reward_settings(c)
  flags = {"tutor.path": c.tutor.path, "student.path": c.student.path}
  uses_local = ((settings.needs_judges and r.judge_backend == "local") or
                ("uco" in settings.names and "local" in (
                    u.oracle, u.classifier_backend if u.level_method == "llm" else None)))
  if uses_local:
    flags["rewards.local_judge.path"] = r.local_judge.path
  if "uco" in settings.names and u.embedder != "minilm":
    flags["rewards.uco.embedder"] = u.embedder
  for name, path in flags.items():
    if not path or not os.path.isfile(os.path.join(path, "config.json")):
      raise app.UsageError(f"--config.{name}={path!r} is not a checkpoint directory "
                           "(no config.json)")
  if not c.problems.path or not os.path.exists(c.problems.path):
    raise app.UsageError(f"--config.problems.path={c.problems.path!r} does not exist")


def build_rewards(c, student, solver, solve, mesh, apis=None) -> pipeline.RewardPipeline:
  """The reward pipeline the config asks for (judges, oracle, embedder, weights);
  `apis` are the API backends from `api_backends(c)` (built here when not given)."""
  r = c.rewards
  settings = reward_settings(c)
  apis = api_backends(c) if apis is None else apis
  backend = None

  def text_backend(kind, role):
    if kind == "openai":
      return apis[role]
    if kind == "local":
      return backends.LocalBackend(load_party(r.local_judge, mesh, c.scan_layers),
                                   temperature=r.local_judge.temperature, seed=c.seed)
    if kind == "rule":
      return backends.RuleBackend(**r.rule_judges.to_dict())
    raise app.UsageError(f"backend {kind!r} is not one of openai, local, rule")

  specs = ()
  if settings.needs_judges:
    if r.judges not in JUDGE_PANELS:
      raise app.UsageError(f"rewards.judges {r.judges!r} is not one of {sorted(JUDGE_PANELS)}")
    specs = tuple(dataclasses.replace(s, samples=r.judge_samples) if s.kind == judging.DECISION
                  else s for s in JUDGE_PANELS[r.judges])
    backend = text_backend(r.judge_backend, "judges")
  kw = {}
  if "uco" in settings.names:
    u = r.uco
    oracle = (oracle_lib.ReferenceOracle() if u.oracle == "reference" else
              oracle_lib.LLMOracle(text_backend(u.oracle, "oracle"), rounds=u.oracle_rounds,
                                   on_failure=u.on_oracle_failure,
                                   max_failed_share=r.max_failed_share))
    path = embedding.minilm_path() if u.embedder == "minilm" else u.embedder
    kw = dict(
        uco=uco_turns.UCOSettings(
            alpha=u.alpha, delta=u.delta, lam=u.lam, c=u.c, gamma=u.gamma, reduce=u.reduce,
            level_method=u.level_method, last_turn_semantic=u.last_turn_semantic,
            zpd_candidate=u.zpd_candidate, classifier_rounds=u.classifier_rounds,
            progress_weight=u.progress_weight, scaffold_weight=u.scaffold_weight,
            student_prompt=c.rollout.student_prompt, max_failed_share=r.max_failed_share),
        student=student, scorer=Scorer(student.sampler.model, mesh), oracle=oracle,
        embedder=embedding.Embedder(path),
        classifier=(text_backend(u.classifier_backend, "classifier")
                    if u.level_method == "llm" else None))
  return pipeline.RewardPipeline(settings, solver, solve, specs, backend, r.judge_rounds,
                                 r.on_judge_failure, solve_always=c.solve.post_dialogue,
                                 max_failed_share=r.max_failed_share, **kw)
