r"""Writes a trained tutor from a training workdir as a transformers-loadable directory.

  python -m pedrl.tools.export --workdir=/runs/uco --step=300 --out=/models/uco-tutor

Reads the run's config.json for the tutor's base checkpoint (architecture,
tokenizer, generation config), restores the params of checkpoint --step (the
latest by default) and writes safetensors, config.json and the tokenizer.
"""
import json
import os
import shutil
import sys

import orbax.checkpoint as ocp
from absl import app, flags

from pedrl import models
from pedrl.models import hf_checkpoint
from pedrl.rl import checkpoint
from pedrl.tokenizer import load_tokenizer


def export(workdir: str, out: str, step: int | None = None) -> int:
  """Returns the step exported."""
  config_path = os.path.join(workdir, "config.json")
  if not os.path.isfile(config_path):
    raise FileNotFoundError(f"{config_path}: not a training workdir (no config.json)")
  with open(config_path) as f:
    run = json.load(f)
  base = run["tutor"]["path"]
  cfg = models.from_hf(base, scan_layers=run.get("scan_layers", True))
  manager = ocp.CheckpointManager(os.path.join(os.path.abspath(workdir), "checkpoints"))
  step = manager.latest_step() if step is None else step
  if step is None or step not in manager.all_steps():
    raise FileNotFoundError(f"{workdir}: no checkpoint at step {step}; have {manager.all_steps()}")
  abstract = hf_checkpoint.abstract_params(cfg)
  target = {"params": abstract}  # The optimizer state stays on disk.
  restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
      target, restore_args=ocp.checkpoint_utils.construct_restore_args(target),
      partial_restore=True)))
  params = restored["state"]["params"]
  meta = manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
  saved = {k: v for k, v in meta.get("checksums", {}).items() if k.startswith("['params']")}
  if saved:  # Checkpoints saved before pedrl wrote checksums have none.
    try:
      checkpoint.verify({"params": params}, saved)
    except ValueError as e:
      raise checkpoint.CheckpointError(f"{workdir}: checkpoint step {step} is corrupt ({e}); "
                                       "export another --step") from None
  hf_checkpoint.save_params(params, cfg, out)
  load_tokenizer(base).save_pretrained(out)
  gen = os.path.join(base, "generation_config.json")
  if os.path.isfile(gen):
    shutil.copy(gen, out)
  manager.close()
  return step


def main(argv):
  del argv
  try:
    step = export(flags.FLAGS.workdir, flags.FLAGS.out, flags.FLAGS.step)
  except (FileNotFoundError, checkpoint.CheckpointError) as e:
    sys.exit(f"error: {e}")
  print(f"exported step {step} to {flags.FLAGS.out}")


if __name__ == "__main__":  # Flags only for the command: the functions import cleanly.
  flags.DEFINE_string("workdir", None, "Training workdir.", required=True)
  flags.DEFINE_integer("step", None, "Checkpoint step (default: the latest).")
  flags.DEFINE_string("out", None, "Output directory.", required=True)
  app.run(main)
