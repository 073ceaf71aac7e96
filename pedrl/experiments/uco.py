r"""GRPO training with the rewards of UCO (paper 000).

  python -m pedrl.experiments.uco --config=experiments/uco.py:tiny --workdir=/tmp/uco
"""
from pedrl import logs
from pedrl.experiments import train

if __name__ == "__main__":
  logs.run(train.main)
