r"""GRPO training with the rewards of PedagogicalRL-Thinking (paper 001).

  python -m pedrl.experiments.thinking --config=experiments/thinking.py:tiny --workdir=/tmp/thinking
"""
import sys

from pedrl import cli
from pedrl.jobs import settings

if __name__ == "__main__":  # First, before the imports below load JAX (pedrl.cli.check_job).
  cli.check_job(__spec__.name, sys.argv[1:],
                lambda c: settings.read_settings(c, settings.TrainingSettings))

from pedrl.experiments.grpo import main

if __name__ == "__main__":
  cli.run(main)
