r"""PedagogicalRL (paper 003): r = r_sol + (r_ped − 1)·λ + template rewards, GRPO.

  python -m pedrl.experiments.pedagogical_rl --config=experiments/pedagogical_rl.py:tiny --workdir=/tmp/ped

Variants: `paper` (soft penalty, λ = 0.75, no thinking), `lam0`, `lam1.5`
(the λ sweep), `hard` (−λ on rejection, λ = 1.0), `think` (+think: the tutor
thinks, the template's tag terms apply), `no_sol` (−r_sol: judges and templates
only), `tiny` (testdata models, rule judges, 3 steps on a CPU). The tutor,
student and problems come by path: --config.tutor.path=... --config.student.path=...
--config.problems.path=...; the judge key from $OPENAI_API_KEY (or
--config.rewards.judge_backend=local --config.rewards.local_judge.path=...).
"""
from pedrl.experiments import base_config, rl_config


def get_config(variant: str = "paper"):
  c = base_config.dialogue_config("tiny" if variant == "tiny" else "paper")
  c.problems.split = "train"
  c.rl = rl_config.rl_section()
  c.rollout.thinking = variant in ("think", "tiny")  # The main runs think without tags.
  if variant.startswith("lam"):
    c.rewards.lam = float(variant[3:])
  elif variant == "hard":
    c.rewards.update(hard=True, lam=1.0)  # Paper 003's RL-hard-λ=1.0.
  elif variant == "think":
    pass  # Thinking on; the template reward's think terms now have tags to score.
  elif variant == "no_sol":
    c.rewards.components = "pedagogy:1,template:1"
  elif variant == "tiny":
    c.problems.split = "all"
    rl_config.tiny(c)
  elif variant != "paper":
    raise ValueError(f"unknown variant {variant!r}")
  return c
