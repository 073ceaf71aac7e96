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
  32768 conversation tokens (`THINKING_TURN_TOKENS`, `THINKING_CONVERSATION_TOKENS`).
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
from pedrl.experiments import base_config, rl_config, variants

CONDITIONS = {  # thinking, tutor prompt, thinking reward; the paper's method first (the default)
    "ped_think_reward": (True, "thinking/tutor_polya", True),
    "no_think": (False, "thinking/tutor_general", False),
    "think_no_reward": (True, "thinking/tutor_general", False),
    "think_reward": (True, "thinking/tutor_general", True),
    "ped_think_no_reward": (True, "thinking/tutor_polya", False),
}
VARIANTS = dict(condition=tuple(CONDITIONS), tiny=bool)
THINKING_TURN_TOKENS, THINKING_CONVERSATION_TOKENS = 4096, 32768  # See the docstring.


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  c = base_config.dialogue_config("tiny" if v.tiny else "paper")
  thinking, prompt, think_reward = CONDITIONS[v.condition]
  c.rollout.update(thinking=thinking, tutor_prompt=prompt,
                   student_prompt="thinking/student_system")
  # λ_ped 0.75, λ_think 0.3 and θ 0.6 are RewardSettings' defaults (paper 001 eq. 1).
  c.rewards.update(judges="thinking" if think_reward else "thinking_no_quality",
                   components="r_sol:1,pedagogy:1" + (",thinking:1" if think_reward else ""))
  if thinking and not v.tiny:
    c.tutor.max_new_tokens = THINKING_TURN_TOKENS
    c.rollout.max_conversation_tokens = THINKING_CONVERSATION_TOKENS
  c.problems.split = "train"
  c.rl = rl_config.rl_section()
  if v.tiny:
    c.problems.split = "all"
    c.rollout.tutor_prompt = "thinking/tutor_general"  # The Polya prompt overflows the tiny context.
    if thinking:
      # A tutor that thinks in tags as a reasoning model does (a random one never closes
      # its <think>): testdata/make_thinking_tutor.py. Its turns open with the tag, as an
      # R1-style template opens them, then a few words of thought, </think>, a reply.
      c.tutor.path = "testdata/models/qwen2_think"
      c.rollout.force_thinking = True
    rl_config.tiny(c)
  return c
