"""Entry points: `python -m pedrl.experiments.NAME --config=experiments/NAME.py:VARIANT`."""
