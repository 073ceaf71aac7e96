r"""UCO (paper 000): per-turn r_t = r_progress + r_scaffold, turn-level GRPO advantages.

  python -m pedrl.experiments.uco --config=experiments/uco.py:tiny --workdir=/tmp/uco

Paper 000 section IV: lr 5e-6, B 16, G 4, T 10 turns, γ 0.95, λ 0.5, α 2.0,
δ 0.7, c 0.2, KL 0.01, AdamW ε 1e-8 and weight decay 1e-4, n = 5 candidates,
BGE embeddings. Ablations as variants: `no_scaffold`, `no_progress` (table
III), `lam0.1` … `lam0.9` (table V), `alpha1.0` … `alpha3.0` (table VI),
`delta0.5` … `delta0.9` (table VII), `c0.1` … `c0.5` (table VIII). `tiny`: the testdata
models, the reference oracle and the testdata BERT embedder, 3 steps on a CPU.
The oracle: --config.rewards.uco.oracle=openai with --config.rewards.uco.oracle_model=...
"""
from pedrl.experiments import base_config, rl_config


def get_config(variant: str = "paper"):
  c = base_config.dialogue_config("tiny" if variant == "tiny" else "paper")
  c.batch_problems, c.group_size = 16, 4
  c.rollout.max_turns = 10
  c.rewards.components = "uco:1"
  c.rewards.uco.update(lam=0.5, alpha=2.0, delta=0.7, c=0.2, gamma=0.95)
  c.problems.split = "train"
  c.rl = rl_config.rl_section(lr=5e-6, beta=0.01, weight_decay=1e-4, adam_eps=1e-8,
                              advantage="turn", advantage_eps=1e-8)
  for name in ("lam", "alpha", "delta", "c"):  # Tables V, VI, VII, VIII.
    if variant.startswith(name) and variant[len(name):].replace(".", "").isdigit():
      c.rewards.uco[name] = float(variant[len(name):])
      return c
  if variant == "no_scaffold":  # Table III.
    c.rewards.uco.scaffold_weight = 0.0
  elif variant == "no_progress":
    c.rewards.uco.progress_weight = 0.0
  elif variant == "tiny":
    c.batch_problems, c.group_size = 2, 2
    c.rollout.max_turns = 4
    c.problems.split = "all"
    rl_config.tiny(c)
  elif variant != "paper":
    raise ValueError(f"unknown variant {variant!r}")
  return c
