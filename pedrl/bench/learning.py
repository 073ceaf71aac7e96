r"""Learning check: GRPO on the testdata models with a reward the tiny tutor can move.

  python -m pedrl.bench.learning --workdir=/tmp/pedrl_learning --steps=30

The reward is paper 003's pedagogy term with the rule judges (−λ when the
helpfulness rule finds the tutor saying more than half of the dialogue's
words): random tiny models vary around that share from rollout to rollout, so
GRPO has a signal, and a tutor that learns to say less moves the reward up.
Prints the mean reward of the first and last five steps and their difference;
a run that learns ends clearly above its start. Not a test: it takes minutes
on a CPU.
"""
import json
import os

import numpy as np
from absl import flags
from tqdm import tqdm

from pedrl import cli, paths
from pedrl.jobs import train

flags.DEFINE_integer("steps", 30, "GRPO steps.")
flags.DEFINE_float("lr", 1e-3, "Learning rate (large: the tiny model must move in 30 steps).")
flags.DEFINE_integer("window", 5, "Steps averaged at the start and at the end.")
flags.DEFINE_float("max_tutor_share", 0.5, "The rule helpfulness judge's word-share limit.")
FLAGS = flags.FLAGS


def config(steps: int, lr: float, max_tutor_share: float = 0.5):
  c = paths.load_config("pedagogical_rl.py", "tiny")
  c.rewards.components = "pedagogy:1"
  c.solve.post_dialogue = False
  c.batch_problems, c.group_size = 2, 8
  c.rl.update(steps=steps, lr=lr, save_every=steps, samples_every=steps, beta=0.0)
  # A share threshold near the random tutor's median word share: about half the
  # dialogues pass, so every group carries a signal.
  c.rewards.rule_judges.max_tutor_share = max_tutor_share
  return c


def main(argv):
  del argv
  c = config(FLAGS.steps, FLAGS.lr, FLAGS.max_tutor_share)
  run, writer, ckpt = train.build(c, FLAGS.workdir, "pedrl.bench.learning")
  with tqdm(total=run.s.steps, initial=run.step, unit="step", desc="learning") as bar:
    run.run(lambda step, m: (bar.update(1), bar.set_postfix(reward=f"{m['reward/total']:.3f}")))
  writer.close()
  ckpt.close()
  with open(os.path.join(FLAGS.workdir, "metrics.jsonl")) as f:
    rewards = [json.loads(line)["reward/total"] for line in f]
  w = FLAGS.window
  start, end = float(np.mean(rewards[:w])), float(np.mean(rewards[-w:]))
  print(f"steps={len(rewards)}")
  print(f"start_mean_reward={start:.4f}")
  print(f"end_mean_reward={end:.4f}")
  print(f"improvement={end - start:.4f}")


if __name__ == "__main__":
  cli.run(main)
