r"""Paper 003's SFT baseline (A.3): the untrained tutor fine-tuned on its accepted dialogues.

  python -m pedrl.experiments.sft --config=experiments/sft.py:tiny --workdir=/tmp/sft \
      --config.data.workdir=/tmp/baselines
  python -m pedrl.experiments.sft --config=experiments/sft.py --workdir=/runs/sft \
      --config.data.workdir=/runs/baselines

The data workdir is pedrl.experiments.baseline_data's (experiments/baselines.py);
the tutor is the one that made it unless --config.tutor.path names another.
Variants: `paper` (A.3: batch 16, learning rate 2e-5, 1 epoch; the reference
SFT trainer's cosine decay, no warm-up) and `tiny` (the testdata tutor on a
CPU, a few steps over the tiny data). The loss counts the tutor's tokens
(train.tokens=all: every token, as the reference trainer) and its thinking
as it was rolled out (train.thinking=false masks it).
"""
from pedrl.jobs import base_config, variants
from pedrl.rl import offline_data
from pedrl.rl.settings import SFTSettings

ENTRY_POINT = "pedrl.experiments.sft"  # The job it configures; others refuse it.
VARIANTS = dict(tiny=bool)
# One line per variant, for `python -m pedrl.tools.configs`.
VARIANT_HELP = {
    "paper": "paper 003 A.3: batch 16, lr 2e-5, 1 epoch, cosine decay, on the accepted dialogues",
    "tiny": "the testdata tutor, a few steps over the tiny data",
}


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  # Paper 003 A.3: batch 16, lr 2e-5, 1 epoch. The reference (eth-lre/PedagogicalRL
  # train_sft.py, config/train_sft/7b.yaml): TRL's SFTTrainer with lr_scheduler_type
  # cosine and the TrainingArguments defaults for the rest: no warm-up, AdamW (0.9,
  # 0.999, 1e-8), weight decay 0, gradient norm clipped at 1.0.
  c = base_config.offline_config(SFTSettings, offline_data.SequenceSettings, batch=16,
                                 epochs=1, lr=2e-5, lr_schedule="cosine", micro_batch=4)
  if v.tiny:
    c.scan_layers = False
    # The tiny data's few accepted dialogues, 2 a step, 3 epochs: the loss on dialogues
    # already trained on falls (tests/experiments/test_baselines.py).
    c.train.update(batch=2, epochs=3, micro_batch=2, lr=1e-3, save_every=1)
  return c
