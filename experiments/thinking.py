r"""PedagogicalRL-Thinking (paper 001): r = r_sol + (r_ped − 1)·λ_ped + (r_think − θ)·λ_think.

  python -m pedrl.experiments.thinking --config=experiments/thinking.py:tiny --workdir=/tmp/think
  python -m pedrl.experiments.thinking --config=experiments/thinking.py:tiny,condition=no_think --workdir=/tmp/think0

The five conditions of paper 001 section 2.5 as variants (`condition=NAME` or the
bare name): `no_think` (thinking off, general prompt, r_sol + r_ped),
`think_no_reward`, `think_reward` (general prompt), `ped_think_no_reward`,
`ped_think_reward` (Polya prompt; the paper's method, the default `paper`).
`tiny` runs a condition (`ped_think_reward` unless given) on the testdata models
with rule judges and the general prompt; a thinking condition's tutor is the
testdata tutor taught to think in tags (testdata/models/qwen2_think). B 16, G 8, 16 turns, K 8, λ_ped 0.75,
λ_think 0.3, θ 0.6.

Paper 001 leaves these unstated; pedrl decides them on purpose:
- A thinking tutor (DeepSeek-R1-0528-Qwen3-8B) gets 4096 new tokens per turn and
  32768 conversation tokens (`conditions.THINKING_TURN_TOKENS`, `THINKING_CONVERSATION_TOKENS`).
  An R1-style trace runs from hundreds to a few thousand tokens before the visible
  reply; 003's 1024 would cut most traces, and every cut turn costs the length
  penalty (0.5) and leaves the student an empty message. Eight tutor turns of that
  size (the tutor keeps its own traces in view) overflow 8192, so the conversation
  limit is raised within the model's 40960 positions. NoThink (Qwen2.5-7B) keeps
  003's 1024 / 8192.
- Inherited from paper 003 and its reference code, unchanged: learning rate 5e-7
  (constant), KL β 0.001, clip ε 0.2, 2 passes per batch, 150 steps, grad-norm clip
  1.0, float32 AdamW without weight decay; tutor temperature 1.0 with top-k 50,
  student temperature 0.6 with 1024 new tokens; solve attempts K 8; the rest of
  the dialogue rules (scenario mix, prompts aside).
"""
from pedrl.jobs import base_config, conditions, rl_config, variants

# The conditions (thinking, tutor prompt, thinking reward) are pedrl.jobs.conditions',
# shared with the evaluation; the paper's method first (the default).
ENTRY_POINT = "pedrl.experiments.thinking"  # The job it configures; others refuse it.
VARIANTS = dict(condition=tuple(conditions.THINKING), tiny=bool)
# One line per variant, for `python -m pedrl.tools.configs`.
VARIANT_HELP = {
    "paper": "paper 001's method, ped_think_reward (B 16, G 8, λ_ped 0.75, λ_think 0.3, θ 0.6)",
    "ped_think_reward": "section 2.5: Polya prompt, thinking, with the thinking reward (the paper's method)",
    "ped_think_no_reward": "section 2.5: Polya prompt, thinking, no thinking reward",
    "think_reward": "section 2.5: general prompt, thinking, with the thinking reward",
    "think_no_reward": "section 2.5: general prompt, thinking, no thinking reward",
    "no_think": "section 2.5: thinking off, general prompt, r_sol + r_ped",
    "tiny": "a condition on the testdata models with rule judges and the general prompt; 3 steps",
}


def evaluation_variant(arg: str = "paper") -> str:
  """The evaluation config's variant (experiments/evaluate.py) for a run of this one: the
  condition's dialogues (conditions.thinking), judged as paper 001."""
  v = variants.parse(arg, VARIANTS)
  return f"thinking,condition={v.condition}" + (",tiny" if v.tiny else "")


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  c = base_config.dialogue_config("tiny" if v.tiny else "paper")
  conditions.thinking(c, v.condition, v.tiny)  # Prompts, thinking, token limits.
  think_reward = conditions.THINKING[v.condition][2]
  # λ_ped 0.75, λ_think 0.3 and θ 0.6 are RewardSettings' defaults (paper 001 eq. 1).
  c.rewards.update(judges="thinking" if think_reward else "thinking_no_quality",
                   components="r_sol:1,pedagogy:1" + (",thinking:1" if think_reward else ""))
  base_config.released_training_split(c)
  c.rl = rl_config.rl_section()
  if v.tiny:
    rl_config.tiny(c)
  return c
