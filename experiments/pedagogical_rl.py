r"""PedagogicalRL (paper 003): r = r_sol + (r_ped − 1)·λ + template rewards, GRPO.

  python -m pedrl.experiments.pedagogical_rl --config=experiments/pedagogical_rl.py:tiny --workdir=/tmp/ped
  python -m pedrl.experiments.pedagogical_rl --config=experiments/pedagogical_rl.py:hard,lam=1.0 --workdir=/runs/ped_hard ...

Variants (comma-separated, they combine): `paper` (soft penalty, λ = 0.75, no
thinking), `lam=0`, `lam=1.5` (the λ sweep; the older `lam1.5` still parses),
`hard` (−λ on rejection, λ = 1.0 unless `lam` is given), `think` (+think: the
tutor's system prompt gains pedrl's thinking instruction, every tutor turn opens
with a forced `<think>`, and the template's tag terms score it), `no_sol` (−r_sol:
table 2's hard λ = 1.0 run without the solve reward), `tiny` (testdata models,
rule judges, 3 steps on a CPU). Table 2's rows by name: `lam1.5_think` (soft
λ = 1.5 +think), `hard_think` (hard λ = 1.0 +think). The tutor,
student and problems come by path: --config.tutor.path=... --config.student.path=...
--config.problems.path=... (the released training split, rd211/Big-Math-RL-Verified-
Filtered `train`: base_config.released_training_split); the training judge is a local
Qwen2.5-14B-Instruct (section 5.4): --config.rewards.local_judge.path=... (or an OpenAI-compatible
endpoint: --config.rewards.judge_backend=openai --config.rewards.openai.model=...,
the key from $OPENAI_API_KEY).
"""
from pedrl.jobs import base_config, conditions, rl_config, variants

ENTRY_POINT = "pedrl.experiments.pedagogical_rl"  # The job it configures; others refuse it.
VARIANTS = dict(lam=float, hard=bool, think=bool, no_sol=bool, tiny=bool,
                **{"lam1.5_think": bool, "hard_think": bool})
# One line per variant, for `python -m pedrl.tools.configs`.
VARIANT_HELP = {
    "paper": "paper 003: soft penalty, λ 0.75, no thinking; a local Qwen2.5-14B training judge",
    "tiny": "the testdata models and rule judges; 3 steps",
    "lam=<float>": "λ of eq. 4 (table 2's sweep: 0, 0.75, 1.5)",
    "hard": "−λ on a rejected dialogue, λ 1.0 unless lam is given",
    "think": "+think: a thinking instruction, a forced <think> each turn, tag rewards",
    "no_sol": "−r_sol: hard λ 1.0 without the solve reward",
    "lam1.5_think": "table 2's soft λ 1.5 +think row",
    "hard_think": "table 2's hard λ 1.0 +think row",
}


def _think(v) -> bool:
  return v.think or getattr(v, "lam1.5_think") or v.hard_think


def evaluation_variant(arg: str = "paper") -> str:
  """The evaluation config's variant (experiments/evaluate.py) for a run of this one: the
  same dialogues (conditions.pedagogical_rl)."""
  v = variants.parse(arg, VARIANTS)
  return ",".join(["pedagogical_rl"] + ["think"] * _think(v) + ["tiny"] * v.tiny)


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  c = base_config.dialogue_config("tiny" if v.tiny else "paper")
  base_config.released_training_split(c)
  c.rl = rl_config.rl_section()
  if not v.tiny:  # Section 5.4: the training judge is a local Qwen2.5-14B-Instruct.
    c.rewards.judge_backend = "local"
  hard = v.hard or v.hard_think or v.no_sol
  conditions.pedagogical_rl(c, _think(v), v.tiny)
  if hard:
    c.rewards.update(hard=True, lam=1.0)  # Paper 003's RL-hard-λ=1.0 (+think, −r_sol).
  if getattr(v, "lam1.5_think"):
    c.rewards.lam = 1.5
  if v.lam is not None:
    c.rewards.lam = v.lam
  if v.no_sol:
    c.rewards.components = "pedagogy:1,template:1"
  if v.tiny:
    rl_config.tiny(c)
  return c
