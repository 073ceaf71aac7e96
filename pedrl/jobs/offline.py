r"""Offline training of the tutor on the baseline data: what the sft and mdpo jobs share
(pedrl.experiments.sft, .mdpo; each a Method).

  python -m pedrl.experiments.sft --config=experiments/sft.py:tiny --workdir=/tmp/sft \
      --config.data.workdir=/tmp/baselines

The data is a pedrl.experiments.baseline_data workdir (`data.workdir`); the
tutor is the one that made it (its config.json's tutor.path) unless
`tutor.path` names another of the same architecture. Each step takes
`train.batch` items (accepted dialogues, or preference pairs) in a seeded order
that is a function of (seed, step) (pedrl.rl.loop.items_for_step), makes their
batch and applies one optimizer update of the method's objective with GRPO's
loop and update (pedrl.rl.loop, pedrl.rl.update): micro-batches split over the
mesh, clipping, AdamW, the non-finite guard, checkpoints with verification and
fallback. The run lasts `train.epochs` passes over the items (the last step
takes what is left), or `train.steps` steps when set. WORKDIR gets
checkpoints/ (a rerun resumes at the last one, same data order),
metrics.jsonl and tensorboard/ (a row per step: the objective's metrics, the
learning rate, the epoch, the time), run.json, config.json (tutor.path
resolved) and train_problems.json (the data's, pedrl.jobs.trained_on), so
pedrl.experiments.evaluate, pedrl.experiments.mathtutorbench, pedrl.serve and
pedrl.tools.export read it as a GRPO run (--config.tutor.workdir=WORKDIR).
"""
import dataclasses
import hashlib
import json
import os
import time
import typing
from typing import Protocol

import jax
import jax.numpy as jnp
import ml_collections
from absl import app, logging
from tqdm import tqdm

from pedrl import distributed
from pedrl.engine.distribution import SamplingParams
from pedrl.env import party as party_lib
from pedrl.jobs import metric_log, settings as settings_lib, trained_on
from pedrl.jobs import workdir as workdir_lib
from pedrl.jobs.exits import exit_on_signal
from pedrl.rl import checkpoint, loop, update as update_lib
from pedrl.rl.objective import Batch, Objective
from pedrl.tokenizer import load_tokenizer

if typing.TYPE_CHECKING:  # Annotations only: transformers loads with the tokenizer.
  import transformers


class Method(Protocol):
  """What a job adds to the shared offline trainer (pedrl.experiments.sft, .mdpo)."""
  name: str  # The job, in run.json.
  objective_type: type
  options_type: type | None  # The method's own settings (data.*), if any.
  data_file: str  # The set it trains on, in the data workdir.
  reference: bool  # Keeps a frozen copy of the initial tutor (ref_params).
  shown: tuple[str, ...]  # Metrics on the progress bar and printed at the end.

  def items(self, run: settings_lib.OfflineRunSettings, data_dir: str,
            tokenizer: "transformers.PreTrainedTokenizerBase") -> list:
    """The training items, read before any model loads."""

  def batch(self, trainer: "OfflineTrainer", items: list) -> Batch:
    """The batch (pedrl.rl.objective.Batch) of one step's items."""


def read(c: ml_collections.ConfigDict, method: Method) -> settings_lib.OfflineRunSettings:
  """The typed settings of an offline job's config, or one `error: …` line."""
  try:
    return settings_lib.read_offline_settings(c, method.objective_type, method.options_type)
  except ValueError as e:
    raise app.UsageError(str(e)) from None


def data_tutor(data_dir: str) -> str:
  """The tutor checkpoint a baseline data workdir's dialogues were sampled from."""
  path = os.path.join(data_dir, "config.json")
  try:
    with open(path) as f:
      return json.load(f)["tutor"]["path"]
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise app.UsageError(f"--config.data.workdir={data_dir!r}: not a baseline_data workdir "
                         f"({path}: {e})") from None


def resolve_paths(run: settings_lib.OfflineRunSettings, method: Method) -> tuple[str, str]:
  """(data workdir, tutor checkpoint), checked: the set exists, the tutor is a checkpoint
  of the data tutor's architecture (its token ids are the tutor's tokenizer's)."""
  data_dir = run.data.workdir
  if not data_dir or not os.path.exists(os.path.join(data_dir, method.data_file)):
    raise app.UsageError(f"--config.data.workdir={data_dir!r} has no {method.data_file}: give "
                         "a pedrl.experiments.baseline_data workdir whose run finished")
  made_by = data_tutor(data_dir)
  tutor = run.tutor.path or made_by
  if not os.path.isfile(os.path.join(tutor, "config.json")):
    raise app.UsageError(f"--config.tutor.path={tutor!r} is not a checkpoint directory "
                         "(no config.json)")
  mine, theirs = workdir_lib.architecture(tutor), workdir_lib.architecture(made_by)
  if theirs and mine != theirs:
    raise app.UsageError(f"--config.tutor.path={tutor!r} is a {mine}, but the data of "
                         f"{data_dir} was sampled by {made_by} ({theirs}): its token ids "
                         "are another tokenizer's")
  return data_dir, tutor


def file_id(path: str, count: int) -> str:
  """A set file's identity in checkpoint metadata: a resume on other data is refused."""
  digest = hashlib.sha1()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
      digest.update(block)
  return f"{os.path.basename(path)}: {count} items, sha1 {digest.hexdigest()[:16]}"


@dataclasses.dataclass(frozen=True)
class OfflineStepMetrics:
  """One offline step (one update): its row of metrics.jsonl is the update's metrics,
  with the epoch, the learning rate and the seconds."""
  step: int
  epoch: int  # 1-based: the pass over the items the step's last item is of.
  items: int
  update: update_lib.UpdateMetrics
  skipped_updates: int  # 0 or 1.
  skipped_values: dict[str, float]
  lr: float | None
  seconds: dict[str, float]  # batch, update.
  time: float  # Unix seconds.

  def to_row(self) -> dict:
    return {"step": self.step, "epoch": self.epoch, "items": self.items,
            **self.update.to_row(), "skipped_updates": self.skipped_updates,
            **({"lr": self.lr} if self.lr is not None else {}),
            **{f"seconds/{k}": v for k, v in self.seconds.items()}, "time": self.time}


@dataclasses.dataclass
class StepResult:
  metrics: OfflineStepMetrics


class OfflineTrainer(loop.Loop):
  """An offline run (pedrl.rl.loop.Loop): a step is one update on `batch` items."""

  def __init__(self, settings: settings_lib.OfflineSettings, method: Method,
               objective: Objective, tutor: party_lib.Party, items: list, data_id: str,
               optimizer, checkpoints, writer, lr_schedule=None, *, seed: int):
    super().__init__(settings, objective, tutor, optimizer, checkpoints, writer,
                     checkpoint.model_fingerprint(tutor.sampler.cfg), lr_schedule, seed=seed)
    self.method, self.items, self.data_id = method, items, data_id
    self.positions = None if settings.steps else settings.epochs * len(items)
    self.steps = settings.steps or -(-self.positions // settings.batch)
    # The frozen reference is a copy: the update donates (reuses) the trained params' buffers.
    self.ref_params = jax.tree.map(jnp.copy, tutor.params) if method.reference else None

  def data_meta(self) -> dict:
    # epochs and steps fix the run's length, so its learning-rate schedule (cosine decay
    # and warm-up over every update): a resume with others would jump along it.
    return {"seed": self.seed, "batch": self.settings.batch, "data": self.data_id,
            "epochs": self.settings.epochs, "steps": self.settings.steps}

  def train_step(self) -> StepResult:
    t0 = time.perf_counter()
    chosen = loop.items_for_step(self.items, self.step, self.settings.batch, self.seed,
                                 self.positions)
    batch = self.method.batch(self, [item for _, item in chosen])
    t1 = time.perf_counter()
    (m,) = self.update(batch)
    self.step += 1
    skips, values = loop.skipped([m])
    return StepResult(OfflineStepMetrics(
        step=self.step, epoch=chosen[-1][0] // len(self.items) + 1, items=len(chosen),
        update=m, skipped_updates=skips, skipped_values=values, lr=self.step_lr([m]),
        seconds={"batch": t1 - t0, "update": time.perf_counter() - t1}, time=time.time()))

  def record(self, out: StepResult) -> None:
    self.writer.write(self.step, out.metrics.to_row())


def build(c: ml_collections.ConfigDict, method: Method, workdir: str,
          config_name: str = "?") -> tuple[OfflineTrainer, metric_log.MetricsWriter,
                                           checkpoint.Checkpoints]:
  """(OfflineTrainer, writer, checkpoints) for config `c`, restored from `workdir` if it
  has a checkpoint. The config, paths, workdir and data are checked before the model loads."""
  run = read(c, method)
  data_dir, tutor_path = resolve_paths(run, method)
  main_process = distributed.is_main_process()
  identity = {"job": method.name, "tutor": workdir_lib.architecture(tutor_path),
              "data": os.path.abspath(data_dir)}
  changed = workdir_lib.guard(workdir, method.name, c, config_name)
  workdir_lib.claim(workdir, run, method.name, config_name, main_process, want=identity)
  workdir_lib.record_start(workdir, method.name, c, config_name, changed, claimed=True)
  if main_process:
    trained_on.inherit(data_dir, workdir)
  items = method.items(run, data_dir, load_tokenizer(tutor_path))
  if not items:
    raise app.UsageError(f"{os.path.join(data_dir, method.data_file)} holds no items: nothing "
                         f"to train on (see {os.path.join(data_dir, 'summary.json')})")
  t = run.train
  mesh = run.mesh.make()
  # The trained tutor's weights are float32 whatever the checkpoint stores (as GRPO's).
  tutor = party_lib.load(tutor_path, SamplingParams(max_new_tokens=1), mesh=mesh,
                         scan_layers=run.job.scan_layers, **t.tutor_runtime())
  steps = t.steps or -(-t.epochs * len(items) // t.batch)
  o = run.optimizer
  if t.warmup_fraction:
    o = dataclasses.replace(o, warmup_steps=round(t.warmup_fraction * steps))
  ckpt = checkpoint.Checkpoints(workdir, keep=t.keep)
  writer = metric_log.MetricsWriter(workdir, active=main_process)
  trainer = OfflineTrainer(t, method, run.objective, tutor, items,
                           file_id(os.path.join(data_dir, method.data_file), len(items)),
                           o.optimizer(steps), ckpt, writer, o.schedule(steps),
                           seed=run.job.seed)
  if trainer.restore_if_any():
    logging.info("resumed from %s at step %d", ckpt.directory, trainer.step)
  if main_process:
    c.tutor.path = tutor_path  # What evaluate, serve and export read the base model from.
    workdir_lib.write_config(workdir, c)
  logging.info("%s: %d items from %s; %d steps of %d", method.name, len(items), data_dir,
               trainer.steps, t.batch)
  return trainer, writer, ckpt


def train(trainer: OfflineTrainer, writer: metric_log.MetricsWriter,
          ckpt: checkpoint.Checkpoints, workdir: str) -> None:
  """Runs a built trainer (`build`) to its last step with a progress bar of the method's
  shown metrics, then prints them and the results: how both offline jobs end."""
  method = trainer.method
  main_process = distributed.is_main_process()
  with tqdm(total=trainer.steps, initial=trainer.step, unit="step", desc=method.name,
            disable=not main_process) as bar:
    def progress(step, m: OfflineStepMetrics):
      bar.update(1)
      row = m.to_row()
      bar.set_postfix({k.split("/")[-1]: f"{row[k]:.4f}" for k in method.shown})
    trainer.run(progress)
  writer.close()
  ckpt.close()
  exit_on_signal(trainer.stopped_by, f"step {trainer.step} (saved)")
  if main_process:
    if trainer.last is None:  # The run had finished before: metrics.jsonl's last row.
      workdir_lib.print_finished(f"the run had reached its last step, {trainer.step}, before")
    print(f"step={trainer.step}")
    rows = [trainer.last.to_row()] if trainer.last is not None else writer.rows()[-1:]
    for k in method.shown:
      if rows and k in rows[0]:
        print(f"{k}={rows[0][k]}")
    workdir_lib.print_results(workdir, "metrics.jsonl", "checkpoints", "tensorboard",
                              "run.json")
