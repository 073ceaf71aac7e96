r"""GRPO training with the rewards of PedagogicalRL-Thinking (paper 001).

  python -m pedrl.experiments.thinking --config=experiments/thinking.py:tiny --workdir=/tmp/thinking
"""
from pedrl import cli
from pedrl.jobs.train import main

if __name__ == "__main__":
  cli.run(main)
