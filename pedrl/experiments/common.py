"""What the entry points share: loading the two models, the problems and the rewards."""
import dataclasses

import jax
from absl import app, logging

from pedrl import distributed, models
from pedrl.engine import Sampler, SamplingParams
from pedrl.engine.scoring import Scorer
from pedrl.env import chat, problems as problems_lib, rollout, solving
from pedrl.rewards import (assemble, backends, embedding, judging, oracle as oracle_lib,
                           pipeline, uco_turns)
from pedrl.tokenizer import load_tokenizer

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
  return (rows[:p.limit] if p.limit > 0 else rows), report


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


def build_rewards(c, student, solver, solve, mesh) -> pipeline.RewardPipeline:
  """The reward pipeline the config asks for (judges, oracle, embedder, weights)."""
  r = c.rewards
  settings = assemble.RewardSettings(
      components=assemble.parse_components(r.components), lam=r.lam, hard=r.hard,
      lam_think=r.lam_think, theta=r.theta, gamma=r.uco.gamma)
  backend = None

  def text_backend(kind, **openai_overrides):
    if kind == "openai":
      overrides = {k: v for k, v in openai_overrides.items() if v}
      if jax.process_count() == 1:
        return backends.OpenAIBackend(**dict(r.openai.to_dict(), **overrides))
      return backends.MainProcessCalls(  # Only process 0 calls the API (and needs the key).
          backends.OpenAIBackend(**dict(r.openai.to_dict(), **overrides))
          if distributed.is_main_process() else None)
    if kind == "local":
      return backends.LocalBackend(load_party(r.local_judge, mesh, c.scan_layers),
                                   temperature=r.local_judge.temperature, seed=c.seed)
    if kind == "rule":
      return backends.RuleBackend()
    raise app.UsageError(f"backend {kind!r} is not one of openai, local, rule")

  specs = ()
  if settings.needs_judges:
    if r.judges not in JUDGE_PANELS:
      raise app.UsageError(f"rewards.judges {r.judges!r} is not one of {sorted(JUDGE_PANELS)}")
    specs = tuple(dataclasses.replace(s, samples=r.judge_samples) if s.kind == judging.DECISION
                  else s for s in JUDGE_PANELS[r.judges])
    backend = text_backend(r.judge_backend)
  kw = {}
  if "uco" in settings.names:
    u = r.uco
    oracle_kind = u.oracle
    oracle = (oracle_lib.ReferenceOracle() if oracle_kind == "reference" else
              oracle_lib.LLMOracle(text_backend(oracle_kind, model=u.oracle_model,
                                                base_url=u.oracle_base_url,
                                                api_key_env=u.oracle_api_key_env),
                                   rounds=u.oracle_rounds, on_failure=u.on_oracle_failure))
    path = embedding.minilm_path() if u.embedder == "minilm" else u.embedder
    kw = dict(
        uco=uco_turns.UCOSettings(
            alpha=u.alpha, delta=u.delta, lam=u.lam, c=u.c, gamma=u.gamma, reduce=u.reduce,
            level_method=u.level_method, last_turn_semantic=u.last_turn_semantic,
            zpd_candidate=u.zpd_candidate, classifier_rounds=u.classifier_rounds,
            progress_weight=u.progress_weight, scaffold_weight=u.scaffold_weight,
            student_prompt=c.rollout.student_prompt),
        student=student, scorer=Scorer(student.sampler.model, mesh), oracle=oracle,
        embedder=embedding.Embedder(path),
        classifier=text_backend(u.classifier_backend) if u.level_method == "llm" else None)
  return pipeline.RewardPipeline(settings, solver, solve, specs, backend, r.judge_rounds,
                                 r.on_judge_failure, solve_always=c.solve.post_dialogue, **kw)


