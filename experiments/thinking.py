r"""PedagogicalRL-Thinking (paper 001): r = r_sol + (r_ped − 1)·λ_ped + (r_think − θ)·λ_think.

  python -m pedrl.experiments.thinking --config=experiments/thinking.py:tiny --workdir=/tmp/think
  python -m pedrl.experiments.thinking --config=experiments/thinking.py:tiny,condition=no_think --workdir=/tmp/think0

The five conditions of paper 001 section 2.5 as variants (`condition=NAME` or the
bare name): `no_think` (thinking off, general prompt, r_sol + r_ped),
`think_no_reward`, `think_reward` (general prompt), `ped_think_no_reward`,
`ped_think_reward` (Polya prompt; the paper's method, the default `paper`).
`tiny` runs a condition (`ped_think_reward` unless given) on the testdata models
with rule judges and the general prompt. B 16, G 8, 16 turns, K 8, λ_ped 0.75,
λ_think 0.3, θ 0.6.
"""
from pedrl.experiments import base_config, rl_config, variants

CONDITIONS = {  # thinking, tutor prompt, thinking reward; the paper's method first (the default)
    "ped_think_reward": (True, "thinking/tutor_polya", True),
    "no_think": (False, "thinking/tutor_general", False),
    "think_no_reward": (True, "thinking/tutor_general", False),
    "think_reward": (True, "thinking/tutor_general", True),
    "ped_think_no_reward": (True, "thinking/tutor_polya", False),
}
VARIANTS = dict(condition=tuple(CONDITIONS), tiny=bool)


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  c = base_config.dialogue_config("tiny" if v.tiny else "paper")
  thinking, prompt, think_reward = CONDITIONS[v.condition]
  c.rollout.update(thinking=thinking, tutor_prompt=prompt,
                   student_prompt="thinking/student_system")
  # λ_ped 0.75, λ_think 0.3 and θ 0.6 are RewardSettings' defaults (paper 001 eq. 1).
  c.rewards.update(judges="thinking" if think_reward else "thinking_no_quality",
                   components="r_sol:1,pedagogy:1" + (",thinking:1" if think_reward else ""))
  c.problems.split = "train"
  c.rl = rl_config.rl_section()
  if v.tiny:
    c.problems.split = "all"
    c.rollout.tutor_prompt = "thinking/tutor_general"  # The Polya prompt overflows the tiny context.
    rl_config.tiny(c)
  return c
