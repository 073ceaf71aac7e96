r"""GRPO training with the rewards of PedagogicalRL-Thinking (paper 001).

  python -m pedrl.experiments.thinking --config=experiments/thinking.py:tiny --workdir=/tmp/thinking
"""
import sys

from pedrl import cli

if __name__ == "__main__":  # First, before the imports below load JAX (pedrl.cli.check_job).
  cli.check_job(__spec__.name, sys.argv[1:])

from pedrl.jobs.train import main

if __name__ == "__main__":
  cli.run(main)
