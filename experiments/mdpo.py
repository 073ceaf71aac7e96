r"""Paper 003's MDPO baseline (A.3): multi-turn DPO of the untrained tutor on its scored pairs.

  python -m pedrl.experiments.mdpo --config=experiments/mdpo.py:tiny --workdir=/tmp/mdpo \
      --config.data.workdir=/tmp/baselines
  python -m pedrl.experiments.mdpo --config=experiments/mdpo.py --workdir=/runs/mdpo \
      --config.data.workdir=/runs/baselines

The data workdir is pedrl.experiments.baseline_data's (experiments/baselines.py);
the tutor, and the frozen reference, is the one that made it unless
--config.tutor.path names another. Variants: `paper` (A.3: batch 32, learning
rate 2e-7, 1 epoch, "all settings follow the original MDPO paper": β = 0.1 and
a cosine schedule from the M-DPO code; its warm-up is unverified, 10% is pedrl's
choice, see below) and `tiny` (the testdata tutor on a CPU, a few steps over the
tiny pairs).
"""
from pedrl.jobs import base_config, variants
from pedrl.rl.settings import DPOSettings

ENTRY_POINT = "pedrl.experiments.mdpo"  # The job it configures; others refuse it.
VARIANTS = dict(tiny=bool)
# One line per variant, for `python -m pedrl.tools.configs`.
VARIANT_HELP = {
    "paper": "paper 003 A.3: batch 32, lr 2e-7, 1 epoch; β 0.1, cosine with 10% warm-up (M-DPO's code)",
    "tiny": "the testdata tutor, a few steps over the tiny pairs",
}


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  # Paper 003 A.3: batch 32, lr 2e-7, 1 epoch, the rest "as the MDPO paper". Xiong et al.
  # 2025's code (github WeiXiongUST/Building-Math-Agents-with-Multi-Turn-Iterative-Preference-
  # Learning @ 9e56a27, alignment_algorithms/): run_dpo.py's beta = 0.1 ("the KL penalty in
  # the paper", η; DPOObjective.beta), the sigmoid loss and user turns masked; run_dpo.sh's
  # lr 2e-7, batch 32 (1 × 4 accumulation × 8 GPUs), 1 epoch and cosine schedule.
  # The warm-up is unverified: run_dpo.sh passes --warmup_ratio 0.1 (and --bf16), which are
  # not fields of run_dpo.py's ScriptArguments, so HfArgumentParser.parse_args_into_dataclasses
  # refuses the command as written; run_dpo.py gives TrainingArguments
  # warmup_steps=script_args.warmup_steps (default 50) and never passes its weight_decay
  # (0.01) on (TrainingArguments' 0 applies, as pedrl's OptimizerSettings). 10% of the updates
  # is pedrl's choice, the script's stated intent; train.warmup_fraction=0 with
  # --config.train.warmup_steps=50 is run_dpo.py's.
  c = base_config.offline_config(DPOSettings, batch=32, epochs=1, lr=2e-7,
                                 lr_schedule="cosine", warmup_fraction=0.1)
  if v.tiny:
    c.scan_layers = False
    # The tiny data's few pairs, 2 a step, 4 epochs: the margin on them grows.
    c.train.update(batch=2, epochs=4, micro_batch=2, lr=1e-4, save_every=1,
                   lr_schedule="constant", warmup_fraction=0.0)
  return c
