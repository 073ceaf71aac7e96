"""Entry points: `python -m pedrl.experiments.NAME --config=experiments/NAME.py:VARIANT`.

Python imports this package before the job's module: a job's command line is
checked here (pedrl.cli.check_job_command), so its mistakes are reported before
the job's imports (JAX, the models) take seconds. Imported otherwise, nothing happens.
"""
from pedrl import cli

cli.check_job_command()
