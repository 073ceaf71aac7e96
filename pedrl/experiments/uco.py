r"""GRPO training with the rewards of UCO (paper 000).

  python -m pedrl.experiments.uco --config=experiments/uco.py:tiny --workdir=/tmp/uco
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
