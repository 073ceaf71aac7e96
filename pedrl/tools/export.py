r"""Writes a trained tutor from a training workdir as a transformers-loadable directory.

  python -m pedrl.tools.export --workdir=/runs/uco --step=300 --out=/models/uco-tutor

Reads the run's config.json for the tutor's base checkpoint (architecture,
tokenizer, generation config), restores the params of checkpoint --step (the
latest by default) and writes safetensors, config.json and the tokenizer.
"""
import os
import shutil
import sys

from absl import flags, logging

from pedrl import cli, runs
from pedrl.models import hf_checkpoint
from pedrl.tokenizer import load_tokenizer


def export(workdir: str, out: str, step: int | None = None) -> int:
  """Returns the step exported."""
  logging.info("restoring the tutor from %s", workdir)  # Progress: a 7B restore takes minutes.
  tutor = runs.trained_tutor(workdir, step)
  logging.info("writing step %d to %s", tutor.step, out)
  hf_checkpoint.save_params(tutor.params, tutor.cfg, out)
  load_tokenizer(tutor.base).save_pretrained(out)
  gen = os.path.join(tutor.base, "generation_config.json")
  if os.path.isfile(gen):
    shutil.copy(gen, out)
  return tutor.step


def main(argv: list[str]) -> None:
  del argv
  # The run is found as config paths are; the output goes where the command says.
  workdir = cli.input_path("workdir", flags.FLAGS.workdir)
  try:
    step = export(workdir, flags.FLAGS.out, flags.FLAGS.step)
  except (FileNotFoundError, runs.CheckpointError) as e:
    sys.exit(f"error: {e}")
  print(f"exported step {step} to {flags.FLAGS.out}")


if __name__ == "__main__":  # Flags only for the command: the functions import cleanly.
  flags.DEFINE_string("workdir", None, "Training workdir.", required=True)
  flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
  flags.DEFINE_string("out", None, "Output directory.", required=True)
  cli.run(main)
