r"""Rollouts only: tutor–student dialogues on a problem split, with the student's solve attempts.

  python -m pedrl.experiments.rollout --config=experiments/rollout.py:tiny --workdir=/tmp/rollout
  python -m pedrl.experiments.rollout --config=experiments/rollout.py:tiny_uco --workdir=/tmp/rollout_uco

Variants: `paper` (paper 003's setup; give the checkpoints and problems:
--config.tutor.path=... --config.student.path=... --config.problems.path=...,
and the judge's key in $OPENAI_API_KEY), `tiny` (the testdata checkpoints on a
CPU, rule judges, about a minute) and `tiny_uco` (UCO's per-turn rewards with
the reference oracle and the testdata embedder). Writes
WORKDIR/dialogues.jsonl (appended batch by batch: a rerun resumes) and
WORKDIR/summary.json.
"""
from pedrl.jobs import base_config

ENTRY_POINT = "pedrl.experiments.rollout"  # The job it configures; others refuse it.
VARIANTS = base_config.VARIANTS
# One line per variant, for `python -m pedrl.tools.configs`.
VARIANT_HELP = {
    "paper": "paper 003's setup: give the checkpoints and problems; judges over the API",
    "tiny": "the testdata models and rule judges",
    "tiny_uco": "tiny with UCO's per-turn rewards (reference oracle, testdata BERT embedder)",
}


def get_config(arg: str = "paper"):
  return base_config.dialogue_config(arg)
