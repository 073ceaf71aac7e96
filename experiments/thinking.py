r"""PedagogicalRL-Thinking (paper 001): r = r_sol + (r_ped − 1)·λ_ped + (r_think − θ)·λ_think.

  python -m pedrl.experiments.thinking --config=experiments/thinking.py:tiny --workdir=/tmp/think

The five conditions of paper 001 section 2.5 as variants: `no_think` (thinking
off, general prompt, r_sol + r_ped), `think_no_reward`, `think_reward` (general
prompt), `ped_think_no_reward`, `ped_think_reward` (Polya prompt; the paper's
method, the default `paper`). `tiny` runs `ped_think_reward` on the testdata
models with rule judges. B 16, G 8, 16 turns, K 8, λ_ped 0.75, λ_think 0.3, θ 0.6.
"""
from pedrl.experiments import base_config, rl_config

CONDITIONS = {  # thinking, tutor prompt, thinking reward
    "no_think": (False, "thinking/tutor_general", False),
    "think_no_reward": (True, "thinking/tutor_general", False),
    "think_reward": (True, "thinking/tutor_general", True),
    "ped_think_no_reward": (True, "thinking/tutor_polya", False),
    "ped_think_reward": (True, "thinking/tutor_polya", True),
}


def get_config(variant: str = "paper"):
  c = base_config.dialogue_config("tiny" if variant == "tiny" else "paper")
  condition = "ped_think_reward" if variant in ("paper", "tiny") else variant
  if condition not in CONDITIONS:
    raise ValueError(f"unknown variant {variant!r}: paper, tiny or one of {sorted(CONDITIONS)}")
  thinking, prompt, think_reward = CONDITIONS[condition]
  c.rollout.update(thinking=thinking, tutor_prompt=prompt,
                   student_prompt="thinking/student_system")
  c.rewards.update(judges="thinking" if think_reward else "thinking_no_quality",
                   lam=0.75, lam_think=0.3, theta=0.6,
                   components="r_sol:1,pedagogy:1" + (",thinking:1" if think_reward else ""))
  c.problems.split = "train"
  c.rl = rl_config.rl_section()
  if variant == "tiny":
    c.problems.split = "all"
    c.rollout.tutor_prompt = "thinking/tutor_general"  # The Polya prompt overflows the tiny context.
    rl_config.tiny(c)
  return c
