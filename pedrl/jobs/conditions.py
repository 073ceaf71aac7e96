"""How each paper's tutor talks: the dialogue settings of every experimental condition,
defined once, for the training run and for its evaluation.

A condition's dialogue settings are the tutor's and student's prompts, the thinking
switches, the token limits, the turn limits and the scenario. A training config
(`experiments/{pedagogical_rl,thinking,uco}.py`) and the evaluation config
(`experiments/evaluate.py`) both call the function here, so a tutor is evaluated in the
dialogues it was trained in; what differs between them (sampling, problems, judges) is
the protocol's, not the condition's. Each training config's `evaluation_variant(arg)`
names the evaluation variant of a run, and a test checks that the two configs' dialogue
settings are equal for every training variant.
"""
import dataclasses
import json

# Paper 001 section 2.5, table 1: thinking, tutor prompt, thinking reward; its method first.
THINKING = {
    "ped_think_reward": (True, "thinking/tutor_polya", True),
    "no_think": (False, "thinking/tutor_general", False),
    "think_no_reward": (True, "thinking/tutor_general", False),
    "think_reward": (True, "thinking/tutor_general", True),
    "ped_think_no_reward": (True, "thinking/tutor_polya", False),
}
# Paper 001 leaves a thinking tutor's limits unstated; see experiments/thinking.py.
THINKING_TURN_TOKENS, THINKING_CONVERSATION_TOKENS = 4096, 32768
THINK_INSTRUCTION = "pedagogical_rl/think_instruction"  # pedrl's wording (003's +think rows).
# Paper 000: the tutor opens (guided) with table XII's teacher and student prompts, and a
# dialogue has at most T = 10 tutor turns (eq. 1).
UCO_DIALOGUES = dict(scenario="guided", tutor_prompt="uco/teacher", student_prompt="uco/student")
UCO_TUTOR_TURNS = 10


def pedagogical_rl(c, think: bool, tiny: bool = False):
  """Paper 003's dialogues (section 5, its reference code's defaults): the main runs think
  without tags (Qwen2.5's template ignores the switch); +think asks for tagged thinking
  (pedrl's instruction, as the reference renders its own) and forces each turn's opening
  tag, so the template reward's tag terms have something to score (the reference's
  use_thinking and force_thinking, config/eval/TutorRL-think.yaml)."""
  c.rollout.thinking = think or tiny
  if think:
    c.rollout.update(force_thinking=True, think_instruction=THINK_INSTRUCTION)
  return c


def thinking(c, condition: str, tiny: bool = False):
  """Paper 001's condition: thinking on or off, the general or the Polya tutor prompt
  (table 1's Prompt Style), its student prompt (appendix A.2), and a thinking tutor's
  token limits. The tiny runs use the general prompt (Polya overflows the tiny context)
  and, thinking, a tutor that thinks in tags as a reasoning model does
  (testdata/make_thinking_tutor.py; a random one never closes its <think>): each turn
  opens with the tag, as an R1-style template opens it, then a few words, </think>, a
  reply."""
  think, prompt, _ = THINKING[condition]
  # Earlier turns' thinking stays in the tutor's view, though its template (DeepSeek-R1-0528-
  # Qwen3, Qwen3) leaves it out: GRPO trains one sequence per dialogue, every turn's thinking
  # in it, and the evaluation runs the dialogues the tutor was trained in.
  c.rollout.update(thinking=think, tutor_prompt="thinking/tutor_general" if tiny else prompt,
                   student_prompt="thinking/student_system", tutor_history_thinking="keep")
  if think and not tiny:
    c.tutor.max_new_tokens = THINKING_TURN_TOKENS
    c.rollout.max_conversation_tokens = THINKING_CONVERSATION_TOKENS
  if think and tiny:
    c.tutor.path = "testdata/models/qwen2_think"
    c.rollout.force_thinking = True
  return c


def uco(c, tiny: bool = False):
  """Paper 000's dialogues: tutor first, table XII's prompts, T = 10 tutor turns (2 on the
  tiny models); messages are not limited before that (the 10th tutor message is the 19th)."""
  turns = 2 if tiny else UCO_TUTOR_TURNS
  c.rollout.update(max_tutor_turns=turns, max_turns=2 * turns, **UCO_DIALOGUES)
  return c


def dialogue_settings(s) -> dict:
  """The dialogue settings of typed run settings (pedrl.jobs.settings.DialogueSettings):
  what a condition decides, to compare a training run's with its evaluation's."""
  return {"rollout": dataclasses.asdict(s.rollout), "tutor.max_new_tokens": s.tutor.max_new_tokens,
          "student.max_new_tokens": s.student.max_new_tokens}


def differences(trained_config: dict, s) -> list[str]:
  """The dialogue settings in which a training run (its WORKDIR/config.json, as a dict)
  and the run settings `s` differ, as "key: trained X, here Y"; keys one side lacks
  (a run made before the key existed) are not compared."""
  ours = dialogue_settings(s)
  theirs = {"rollout": trained_config.get("rollout", {}),
            **{k: trained_config.get(k.split(".")[0], {}).get(k.split(".")[1])
               for k in ours if k != "rollout"}}
  norm = lambda v: json.loads(json.dumps(v))  # Tuples as the JSON file holds them.
  out = [f"rollout.{k}: trained {theirs['rollout'][k]!r}, here {v!r}"
         for k, v in norm(ours["rollout"]).items()
         if k in theirs["rollout"] and theirs["rollout"][k] != v]
  out += [f"{k}: trained {theirs[k]!r}, here {ours[k]!r}" for k in ours
          if k != "rollout" and theirs[k] is not None and theirs[k] != ours[k]]
  return out
