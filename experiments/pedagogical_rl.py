r"""PedagogicalRL (paper 003): r = r_sol + (r_ped − 1)·λ + template rewards, GRPO.

  python -m pedrl.experiments.pedagogical_rl --config=experiments/pedagogical_rl.py:tiny --workdir=/tmp/ped
  python -m pedrl.experiments.pedagogical_rl --config=experiments/pedagogical_rl.py:hard,lam=1.0 --workdir=/runs/ped_hard ...

Variants (comma-separated, they combine): `paper` (soft penalty, λ = 0.75, no
thinking), `lam=0`, `lam=1.5` (the λ sweep; the older `lam1.5` still parses),
`hard` (−λ on rejection, λ = 1.0 unless `lam` is given), `think` (+think: the tutor
thinks, the template's tag terms apply), `no_sol` (−r_sol: judges and templates
only), `tiny` (testdata models, rule judges, 3 steps on a CPU). The tutor,
student and problems come by path: --config.tutor.path=... --config.student.path=...
--config.problems.path=...; the judge key from $OPENAI_API_KEY (or
--config.rewards.judge_backend=local --config.rewards.local_judge.path=...).
"""
from pedrl.experiments import base_config, rl_config, variants

VARIANTS = dict(lam=float, hard=bool, think=bool, no_sol=bool, tiny=bool)


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  c = base_config.dialogue_config("tiny" if v.tiny else "paper")
  c.problems.split = "train"
  c.rl = rl_config.rl_section()
  # The main runs think without tags; with `think` the template reward's think terms have
  # tags to score.
  c.rollout.thinking = v.think or v.tiny
  if v.hard:
    c.rewards.update(hard=True, lam=1.0)  # Paper 003's RL-hard-λ=1.0.
  if v.lam is not None:
    c.rewards.lam = v.lam
  if v.no_sol:
    c.rewards.components = "pedagogy:1,template:1"
  if v.tiny:
    c.problems.split = "all"
    rl_config.tiny(c)
  return c
