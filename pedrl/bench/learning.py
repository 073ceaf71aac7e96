r"""Learning check: GRPO with rule judges whose reward the tutor can move.

  python -m pedrl.bench.learning --workdir=/tmp/pedrl_learning              # SmolLM2 if imported
  python -m pedrl.bench.learning --workdir=/tmp/pedrl_tiny --model=testdata --steps=30

--model picks tutor and student: a checkpoint directory, `testdata` (the random
tiny Qwen2 tutor and Llama 3 student), or by default SmolLM2-135M-Instruct when
`python -m pedrl.tools.import_gguf` has put it in the model cache (testdata
otherwise). A real model is tutor and student both, thinking off.

The reward is paper 003's pedagogy term with the rule judges (pedrl.rewards.
backends.RuleBackend), both things a small model can learn: not writing the
reference answer before the student does (leakage), and helpfulness, which
rejects a tutor message over --max_tutor_words words or a tutor saying more
than --max_tutor_share of the dialogue's words (−λ either way). A random tiny
tutor varies around the share from rollout to rollout and SmolLM2 around the
word limit, so GRPO has a signal in each group, and a tutor that learns to say
less, and not the answer, moves the reward up.

Prints the mean reward by windows of --window steps, the first and last
window's difference, and two sample dialogues from the first step and two from
the last (WORKDIR/samples/). A run that learns ends clearly above its start.
Not a test: minutes on a CPU for the testdata models, hours for SmolLM2.
"""
import json
from collections.abc import Sequence
import os
import sys

import ml_collections
import numpy as np
from absl import flags
from tqdm import tqdm

from pedrl import cli, paths
from pedrl.jobs import train
from pedrl.tools import import_gguf

# allow_override: pedrl.bench.rollout defines --model too, and the tests import both.
flags.DEFINE_string("model", None, "Tutor and student: a checkpoint directory, `testdata`, or "
                    "unset: SmolLM2-135M-Instruct from the model cache when imported there.",
                    allow_override=True)
flags.DEFINE_integer("steps", None, "GRPO steps (default: 30 testdata, 40 a real model).")
flags.DEFINE_float("lr", None, "Learning rate (default: 1e-3 testdata, large so that the tiny "
                   "model moves in 30 steps; 1e-5 a real model).")
flags.DEFINE_integer("window", 5, "Steps per window of the printed mean rewards.")
flags.DEFINE_float("max_tutor_share", None, "The rule helpfulness judge's word-share limit "
                   "(default: 0.5 testdata, 0.9 a real model).")
flags.DEFINE_integer("max_tutor_words", None, "The rule helpfulness judge's words per tutor "
                     "message (default: 150 testdata, 50 a real model).")
# --workdir (and --config, unused: the run's config is built here) as the training job's.
cli.define_job_flags("experiments/uco.py:tiny", "Run directory (checkpoints, metrics, samples).")
FLAGS = flags.FLAGS

TESTDATA = "testdata"


def pick_model(model: str | None) -> str:
  """`model` as given, or SmolLM2 when the model cache has it, else `testdata`."""
  if model:
    return model
  cached = os.path.join(import_gguf.cache_dir(), import_gguf.SMOLLM2)
  return cached if os.path.isfile(os.path.join(cached, import_gguf.DONE)) else TESTDATA


def config(steps: int, lr: float, max_tutor_share: float | None = None, model: str = TESTDATA,
           max_tutor_words: int | None = None) -> ml_collections.ConfigDict:
  c = paths.load_config("pedagogical_rl.py", "tiny")
  c.rewards.components = "pedagogy:1"
  c.solve.post_dialogue = False
  c.batch_problems, c.group_size = 2, 8
  c.rl.update(steps=steps, lr=lr, save_every=steps, samples_every=steps, samples_dialogues=2,
              beta=0.0)
  # A share threshold near the random tutor's median word share: about half the
  # dialogues pass, so every group carries a signal.
  c.rewards.rule_judges.max_tutor_share = 0.5
  if model != TESTDATA:
    c.tutor.path = c.student.path = model
    c.rollout.thinking = False  # SmolLM2 has no thinking; the prompt asks for none.
    # Short turns keep a step within minutes on a CPU. The judge reads a dialogue's
    # longest tutor message and the tutor's share of its words. SmolLM2's 16 dialogues
    # of a first 2 steps (2026-11-28): longest messages of 42-56 words (median 49.5; at
    # 30 and 40 words every dialogue failed, no group carried a signal), shares of
    # 0.53-0.75 (its 64-token turns against the student's 40: at 0.5 every one failed).
    # So the word limit sits at the median and the share limit out of the way: a group
    # differs in whether its longest message fits.
    c.tutor.max_new_tokens, c.student.max_new_tokens = 64, 40
    c.solve.k, c.solve.max_new_tokens = 1, 16
    c.group_size, c.rl.micro_batch = 4, 4
    c.rewards.rule_judges.max_tutor_words = 50
    c.rewards.rule_judges.max_tutor_share = 0.9
    c.scan_layers = True  # One compiled layer body: 30 unrolled layers compile for minutes.
  if max_tutor_share is not None:
    c.rewards.rule_judges.max_tutor_share = max_tutor_share
  if max_tutor_words is not None:
    c.rewards.rule_judges.max_tutor_words = max_tutor_words
  return c


def windows(rewards: Sequence[float], width: int) -> list[tuple[int, int, float]]:
  """(first step, last step, mean reward) of each run of `width` steps (the last may be
  shorter)."""
  return [(i + 1, min(i + width, len(rewards)), float(np.mean(rewards[i:i + width])))
          for i in range(0, len(rewards), width)]


def main(argv: list[str]) -> None:
  del argv
  model = pick_model(FLAGS.model)
  real = model != TESTDATA
  if real and not os.path.isfile(os.path.join(model, "config.json")):
    sys.exit(f"error: --model={model}: no config.json there (a checkpoint directory, or "
             f"`{TESTDATA}`)")
  steps = FLAGS.steps or (40 if real else 30)
  lr = FLAGS.lr or (1e-5 if real else 1e-3)
  c = config(steps, lr, FLAGS.max_tutor_share, model, FLAGS.max_tutor_words)
  print(f"model={model} steps={steps} lr={lr:g} "
        f"max_tutor_words={c.rewards.rule_judges.max_tutor_words} "
        f"max_tutor_share={c.rewards.rule_judges.max_tutor_share}", flush=True)
  run, writer, ckpt = train.build(c, FLAGS.workdir, "pedrl.bench.learning")
  with tqdm(total=run.settings.steps, initial=run.step, unit="step", desc="learning") as bar:
    run.run(lambda step, m: (bar.update(1), bar.set_postfix(
        reward=f"{m.to_row()['reward/total']:.3f}")))
  writer.close()
  ckpt.close()
  with open(os.path.join(FLAGS.workdir, "metrics.jsonl")) as f:
    rewards = [json.loads(line)["reward/total"] for line in f]
  w = FLAGS.window
  for first, last, mean in windows(rewards, w):
    print(f"steps {first}-{last}: mean_reward={mean:.4f}")
  start, end = float(np.mean(rewards[:w])), float(np.mean(rewards[-w:]))
  for name in sorted({1, len(rewards)}):
    path = os.path.join(FLAGS.workdir, "samples", f"step_{name:06d}.txt")
    if os.path.isfile(path):
      with open(path, encoding="utf-8") as f:
        print(f"\n=== sample dialogues, step {name} ===\n{f.read().rstrip()}")
  print(f"\nsteps={len(rewards)}")
  print(f"start_mean_reward={start:.4f}")
  print(f"end_mean_reward={end:.4f}")
  print(f"improvement={end - start:.4f}")


if __name__ == "__main__":
  cli.run(main)
