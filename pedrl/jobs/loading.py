"""What a job loads: local models (a checkpoint, or a training run's tutor), endpoint
sides, the tutor checkpoint under test, the problems."""
import dataclasses
from typing import Any

import jax
from absl import app, logging

from pedrl import distributed, runs
from pedrl.clients import openai_compat
from pedrl.clients.settings import EndpointSettings
from pedrl.env import problems as problems_lib, solving
from pedrl.env import party as party_lib
from pedrl.env.party import Party, PartySettings
from pedrl.eval import protocol as protocol_lib, shards
from pedrl.jobs import settings as settings_lib


def load_party(side: PartySettings, mesh: jax.sharding.Mesh | None, scan_layers: bool,
               template_kwargs: dict | None = None, params: party_lib.Params | None = None,
               **runtime: Any) -> Party:
  """A model from a checkpoint path with its tokenizer, sampler and sampling params
  (`params` given: those, placed, instead of the path's); `runtime` sets ModelConfig
  runtime fields (e.g. remat=True for the trained tutor)."""
  if not side.path:
    raise app.UsageError("give the checkpoint directory, e.g. --config.tutor.path=/ckpt/dir")
  return party_lib.load(side.path, settings_lib.sampling(side), mesh=mesh, scan_layers=scan_layers,
                        template_kwargs=template_kwargs, params=params, compact=side.compact,
                        **runtime)


def tutor_party(side: PartySettings, run: protocol_lib.TutorRun, mesh: jax.sharding.Mesh | None,
                scan_layers: bool, template_kwargs: dict | None = None) -> Party:
  """The local tutor under test: the side's checkpoint directory, or with `run.workdir`
  the params that training run saved at `run.step` (the side's path is its base)."""
  params = None
  if run.workdir:
    params = runs.trained_tutor(run.workdir, run.step, scan_layers, mesh).params
    logging.info("the tutor under test: %s step %s", run.workdir, run.step)
  return load_party(side, mesh, scan_layers, template_kwargs, params=params)


def endpoint_party(side: PartySettings, endpoint: EndpointSettings, role: str,
                   temperature: float | None = None, max_new_tokens: int | None = None,
                   completions: bool = False) -> party_lib.EndpointParty:
  """A side played by an OpenAI-compatible endpoint, checked with one small request (a
  wrong URL, key or model stops the run before any model loads; `completions`: a text
  completion, for a run that asks only those). Sampling is the side's (or the given
  temperature and token budget: solve attempts); top-k has no API field."""
  if jax.process_count() > 1:
    raise app.UsageError(f"a {role} endpoint on a multi-host run is not supported: run the "
                         "evaluation on one host (its shards may run on many)")
  if side.top_k:
    logging.info("%s endpoint %s: top_k=%d is not sent (the chat API has no such field)",
                 role, endpoint.model, side.top_k)
  client = openai_compat.OpenAIBackend(dataclasses.replace(
      endpoint, temperature=side.temperature if temperature is None else temperature,
      top_p=side.top_p,
      max_tokens=side.max_new_tokens if max_new_tokens is None else max_new_tokens), role)
  client.preflight(raw=completions)
  return party_lib.EndpointParty(client, role)


def tutor_checkpoint(run: protocol_lib.TutorRun, workdir: str,
                     recorded_at: tuple) -> tuple[str, int]:
  """(base checkpoint, step) of the training run under test: the step given, else the
  one this evaluation's workdir recorded at `recorded_at` in its protocol (a resumed or
  later shard reads the weights the first one read, even if training saved newer steps
  since), else the latest. Process 0 chooses for all: a training run that saves a step
  meanwhile must not give the processes of one evaluation different weights."""
  base, step = distributed.on_main_process(_tutor_checkpoint, run, workdir, recorded_at)
  return base, step


def _tutor_checkpoint(run: protocol_lib.TutorRun, workdir: str,
                      recorded_at: tuple) -> tuple[str, int]:
  base, _, steps = runs.training_run(run.workdir)
  step = run.step
  if step is None:
    step = shards.recorded(workdir, recorded_at)
  if step is None and steps:
    step = steps[-1]
  if step not in steps:
    raise runs.CheckpointError(f"{run.workdir}: no checkpoint at step {step}; saved "
                               f"steps: {steps}")
  return base, step


def load_problems(p: problems_lib.ProblemSettings,
                  seed: int) -> tuple[list[problems_lib.Problem], problems_lib.LoadReport]:
  """The configured split (pedrl.env.problems.load; `seed`: the run's, which splits a raw
  pool unless `split_seed` is set), and the loader's report of skipped rows."""
  if not p.path:
    raise app.UsageError("give the problems: --config.problems.path=rows.jsonl (or "
                         "tfds:NAME[/CONFIG]:SPLIT)")
  rows, report = problems_lib.load(p, seed)
  logging.info("%s; %d problems in split %r", report.summary(), len(rows), p.split)
  if not rows:
    raise app.UsageError(
        f"no problems left in --config.problems.path={p.path!r} after loading "
        f"({report.summary()}), filter={p.filter}, split={p.split!r}, limit={p.limit}")
  return rows, report


def solver_party(student: Party, solve: solving.SolveSettings) -> Party:
  """The student with the solve attempts' sampling (temperature, token budget)."""
  return dataclasses.replace(student, sampling=dataclasses.replace(
      student.sampling, temperature=solve.temperature, max_new_tokens=solve.max_new_tokens))
