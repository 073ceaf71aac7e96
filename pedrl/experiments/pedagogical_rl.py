r"""GRPO training with the rewards of PedagogicalRL (paper 003).

  python -m pedrl.experiments.pedagogical_rl --config=experiments/pedagogical_rl.py:tiny --workdir=/tmp/pedagogical_rl
"""
from pedrl import cli
from pedrl.jobs.train import main

if __name__ == "__main__":
  cli.run(main)
