r"""The GRPO trainer of a config, checked and loaded: what the GRPO job
(pedrl.experiments.grpo, run by the uco, pedagogical_rl and thinking entry points)
and the learning benchmark (pedrl.bench.learning) share.

`build` checks everything it can before the models load (config values, paths,
the workdir's owner, the problems, the API endpoints), then loads the parties
and restores the last checkpoint, if any.
"""
from absl import app, logging
import jax
import ml_collections

from pedrl import distributed, sharding
from pedrl.jobs import metric_log, settings as settings_lib, trained_on
from pedrl.jobs import workdir as workdir_lib
from pedrl.jobs.checks import check_history_thinking, check_paths, read_settings
from pedrl.jobs.loading import load_party, load_problems, solver_party
from pedrl.jobs.reward_factory import api_backends, build_rewards
from pedrl.rl import checkpoint, trainer


def check_config(settings: settings_lib.TrainingSettings, mesh: jax.sharding.Mesh) -> None:
  """Errors a run should meet before any compute."""
  check_paths(settings)
  check_history_thinking(settings, "GRPO trains")
  rows = settings.job.batch_problems * settings.job.group_size
  shards = sharding.batch_shards(mesh)
  if rows % shards:
    raise app.UsageError(f"batch_problems × group_size = {rows} dialogues do not split over the "
                         f"mesh's {shards} batch shards")


def build(config: ml_collections.ConfigDict, workdir: str, config_name: str = "?"
          ) -> tuple[trainer.Trainer, metric_log.MetricsWriter, checkpoint.Checkpoints]:
  """(Trainer, writer, checkpoints) for `config`, restored from `workdir` if it has a checkpoint.

  Everything that can be checked without the models is checked first (config
  values, paths, the workdir's owner, the problems, the API endpoints)."""
  settings = read_settings(config, settings_lib.TrainingSettings)
  train, job = settings.train, settings.job
  mesh = settings.mesh.make()
  check_config(settings, mesh)
  changed = workdir_lib.guard(workdir, "train", config, config_name)
  workdir_lib.claim(workdir, settings, "train", config_name, distributed.is_main_process())
  workdir_lib.record_start(workdir, "train", config, config_name, changed, claimed=True)
  problems, _ = load_problems(settings.problems, job.seed)
  if distributed.is_main_process():  # Any of them may be drawn: the evaluation must avoid all.
    trained_on.record(workdir, problems, settings.problems.path)
  apis = api_backends(settings)
  ckpt = checkpoint.Checkpoints(workdir, keep=train.keep)
  # The trained tutor's weights are float32 whatever the checkpoint stores: at the papers'
  # learning rates, AdamW updates vanish in bfloat16 weights.
  tutor = load_party(settings.tutor, mesh, job.scan_layers,
                     {"enable_thinking": settings.rollout.thinking}, **train.tutor_runtime())
  student = load_party(settings.student, mesh, job.scan_layers)
  rewards = build_rewards(settings, student, solver_party(student, settings.solve), mesh, apis)
  rows = job.batch_problems * job.group_size
  updates = train.steps * train.passes * -(-rows // (train.mini_batch or rows))
  writer = metric_log.MetricsWriter(workdir, active=distributed.is_main_process(),
                                    dialogues=True)
  run = trainer.Trainer(train, settings.grpo, tutor, student, settings.rollout, rewards, problems,
                        settings.optimizer.optimizer(updates), workdir, ckpt, writer,
                        checkpoint.model_fingerprint(tutor.sampler.cfg),
                        settings.optimizer.schedule(updates), seed=job.seed,
                        batch_problems=job.batch_problems, group_size=job.group_size,
                        schedule_decays=settings.optimizer.lr_schedule != "constant")
  if run.restore_if_any():
    logging.info("resumed from %s at step %d", ckpt.directory, run.step)
  if distributed.is_main_process():
    workdir_lib.write_config(workdir, config)
  logging.info("%d problems; %d steps of %d×%d dialogues", len(problems), train.steps,
               job.batch_problems, job.group_size)
  return run, writer, ckpt
