r"""GRPO training with the rewards of UCO (paper 000).

  python -m pedrl.experiments.uco --config=experiments/uco.py:tiny --workdir=/tmp/uco
"""
from pedrl import cli
from pedrl.jobs.train import main

if __name__ == "__main__":
  cli.run(main)
