r"""Paper 003's MDPO baseline (A.3): multi-turn DPO of the untrained tutor on its scored pairs.

  python -m pedrl.experiments.mdpo --config=experiments/mdpo.py:tiny --workdir=/tmp/mdpo \
      --config.data.workdir=/tmp/baselines
  python -m pedrl.experiments.mdpo --config=experiments/mdpo.py --workdir=/runs/mdpo \
      --config.data.workdir=/runs/baselines

The data workdir is pedrl.experiments.baseline_data's (experiments/baselines.py);
the tutor, and the frozen reference, is the one that made it unless
--config.tutor.path names another. Variants: `paper` (A.3: batch 32, learning
rate 2e-7, 1 epoch, "all settings follow the original MDPO paper": β = 0.1 and
a cosine schedule with 3% warm-up, pedrl's reading of Xiong et al. 2025) and
`tiny` (the testdata tutor on a CPU, a few steps over the tiny pairs).
"""
from pedrl.experiments import base_config, variants
from pedrl.rl import dpo

VARIANTS = dict(tiny=bool)


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  # Paper 003 A.3: batch 32, lr 2e-7, 1 epoch, the rest "as the MDPO paper". pedrl's
  # reading of Xiong et al. 2025 (M-DPO), not yet checked against its text: η = 0.1
  # (DPOObjective.beta; also the default of TRL's DPOTrainer, which the M-DPO code adapts,
  # per its README) and cosine decay after a linear warm-up over 3% of the updates
  # (train.beta, train.warmup_fraction).
  c = base_config.offline_config(dpo.DPOObjective, batch=32, epochs=1, lr=2e-7,
                                 lr_schedule="cosine", warmup_fraction=0.03)
  if v.tiny:
    c.scan_layers = False
    # 2 pairs of the tiny data, both in each step, 4 steps: the margin on them grows.
    c.train.update(batch=2, epochs=4, micro_batch=2, lr=1e-4, save_every=1,
                   lr_schedule="constant", warmup_fraction=0.0)
  return c
