r"""GRPO training of the tutor: the job the uco, pedagogical_rl and thinking entry points run.

  python -m pedrl.experiments.pedagogical_rl --config=experiments/pedagogical_rl.py:tiny --workdir=/tmp/ped
  python -m pedrl.experiments.grpo --config=experiments/uco.py:tiny --workdir=/tmp/uco

The entry points are named for their papers' methods, and each refuses another's
config file; this module runs the config of any of them (the same job).

Each step: problems → rollouts (current tutor params, no copy) → rewards →
group-relative advantages → μ passes of the clipped GRPO update. WORKDIR gets
checkpoints/ (orbax; a rerun resumes at the last one, same data order),
train_problems.json (the training problems' ids: pedrl.jobs.trained_on),
metrics.jsonl (a row per step, with its learning rate and time), tensorboard/,
samples/ (a few dialogues per step as text: thinking, verdicts, solve attempts,
reward components, advantages) and dialogues.jsonl (every rl.dialogues_every
steps, the step's dialogue records). Steps low on learning signal are logged as
warnings (rl.warn_*). The trainer is built, checked and loaded by pedrl.jobs.train.
"""
import sys

from pedrl import cli
from pedrl.jobs import settings

if __name__ == "__main__":  # First, before the imports below load JAX (pedrl.cli.check_job).
  cli.check_job(__spec__.name, sys.argv[1:],
                lambda c: settings.read_settings(c, settings.TrainingSettings))

import ml_collections
from tqdm import tqdm

from pedrl import distributed
from pedrl.jobs import workdir as workdir_lib
from pedrl.jobs.exits import define_flags, exit_on_signal, job_main
from pedrl.jobs.train import build

define_flags("experiments/uco.py:tiny", "Run directory (checkpoints, metrics).")


@job_main
def main(config: ml_collections.ConfigDict, workdir: str) -> None:
  run, writer, ckpt = build(config, workdir, workdir_lib.config_name(sys.argv))
  main_process = distributed.is_main_process()
  with tqdm(total=run.settings.steps, initial=run.step, unit="step", desc="grpo",
            disable=not main_process) as bar:
    def progress(step, metrics):
      bar.update(1)
      bar.set_postfix(reward=f"{metrics.rewards.total:.3f}", kl=f"{metrics.signal.kl:.4f}")
    run.run(progress)
  writer.close()
  ckpt.close()
  exit_on_signal(run.stopped_by, f"step {run.step} (saved)")
  if not main_process:
    return
  if run.last is None:  # The run had finished before: its figures are metrics.jsonl's last.
    workdir_lib.print_finished(f"the run had reached its last step, {run.step}, before")
  print(f"step={run.step}")
  last = writer.rows()[-1:] if run.last is None else [{"reward/total": run.last.rewards.total}]
  if last and "reward/total" in last[0]:
    print(f"reward_total={last[0]['reward/total']}")
  workdir_lib.print_results(workdir, "metrics.jsonl", "checkpoints", "tensorboard", "samples",
                            "dialogues.jsonl", "run.json")



if __name__ == "__main__":
  cli.run(main)
