r"""GRPO training with the rewards of PedagogicalRL (paper 003).

  python -m pedrl.experiments.pedagogical_rl --config=experiments/pedagogical_rl.py:tiny --workdir=/tmp/pedagogical_rl
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
