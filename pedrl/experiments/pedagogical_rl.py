r"""GRPO training with the rewards of PedagogicalRL (paper 003).

  python -m pedrl.experiments.pedagogical_rl --config=experiments/pedagogical_rl.py:tiny --workdir=/tmp/pedagogical_rl
"""
import sys

from pedrl import cli

if __name__ == "__main__":  # First, before the imports below load JAX (pedrl.cli.check_job).
  cli.check_job(__spec__.name, sys.argv[1:])

from pedrl.jobs.train import main

if __name__ == "__main__":
  cli.run(main)
