"""Entry points: `python -m pedrl.experiments.NAME --config=experiments/NAME.py:VARIANT`.

Each job's module checks its command line first (pedrl.cli.check_job), before its
imports load JAX and the models, so a mistake is one line in a fraction of a second.
"""
