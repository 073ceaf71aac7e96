r"""The offline baselines' data of paper 003 (A.3): the untrained tutor's dialogues on 30% of
the training split, 8 per problem, scored with the training rewards.

  python -m pedrl.experiments.baseline_data --config=experiments/baselines.py:tiny --workdir=/tmp/baselines
  python -m pedrl.experiments.baseline_data --config=experiments/baselines.py --workdir=/runs/baselines \
      --config.tutor.path=/ckpt/Qwen2.5-7B-Instruct --config.student.path=/ckpt/Llama-3.1-8B-Instruct \
      --config.problems.path=/data/big_math_rl_verified_filtered_train.jsonl \
      --config.rewards.local_judge.path=/ckpt/Qwen2.5-14B-Instruct

Variants: `paper` (paper 003's setup: the released training split,
rd211/Big-Math-RL-Verified-Filtered `train`, as given (base_config.released_training_split),
fraction 0.3, G = 8, the reward of its λ = 0.75 run scored by the local training
judge, Qwen2.5-14B-Instruct, section 5.4) and `tiny` (the testdata models and
rule judges on a CPU, under two minutes). Shards: add
--config.baselines.shard=I --config.baselines.num_shards=N. The outputs feed
pedrl.experiments.sft (experiments/sft.py) and pedrl.experiments.mdpo
(experiments/mdpo.py) through --config.data.workdir.
"""
from pedrl.jobs import base_config, settings, variants

ENTRY_POINT = "pedrl.experiments.baseline_data"  # The job it configures; others refuse it.
VARIANTS = dict(tiny=bool)
# One line per variant, for `python -m pedrl.tools.configs`.
VARIANT_HELP = {
    "paper": "paper 003 A.3: the untrained tutor's dialogues on 30% of the training split, G 8, λ 0.75's reward",
    "tiny": "the testdata models and rule judges",
}


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  c = base_config.dialogue_config("tiny" if v.tiny else "paper")
  base_config.released_training_split(c)
  # pedrl's own split of a pool (problems.split=train) is the training configs' (seed 0),
  # whatever --config.seed draws the 30%.
  c.problems.split_seed = 0
  c.baselines = settings.section(settings.BaselineDataSettings)
  # A.3 ranks a pair by r(D) but names no λ: pedrl scores with the reward of table 2's
  # default run, r_sol + soft penalty λ = 0.75 + the template rewards (RewardSettings'
  # defaults; --config.rewards.lam, --config.rewards.components to change).
  if not v.tiny:  # Section 5.4: the training judge is a local Qwen2.5-14B-Instruct.
    c.rewards.judge_backend = "local"
    c.rollout.thinking = False  # The untrained Qwen2.5 tutor of table 2's SFT and MDPO rows.
  else:
    c.problems.limit = 8
    c.baselines.fraction = 0.5  # 4 of the 8 testdata problems, 2 rollouts each.
  return c
