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

import ml_collections

from pedrl.env.settings import PartySettings, RolloutSettings
from pedrl.jobs import settings as settings_lib
from pedrl.jobs.settings import DialogueSettings

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


def pedagogical_rl(c: ml_collections.ConfigDict, think: bool,
                   tiny: bool = False) -> ml_collections.ConfigDict:
  """Paper 003's dialogues (section 5, its reference code's defaults): the main runs think
  without tags (Qwen2.5's template ignores the switch); +think asks for tagged thinking
  (pedrl's instruction, as the reference renders its own) and forces each turn's opening
  tag, so the template reward's tag terms have something to score (the reference's
  use_thinking and force_thinking, config/eval/TutorRL-think.yaml)."""
  c.rollout.thinking = think or tiny
  if think:
    c.rollout.update(force_thinking=True, think_instruction=THINK_INSTRUCTION)
  return c


def thinking(c: ml_collections.ConfigDict, condition: str,
             tiny: bool = False) -> ml_collections.ConfigDict:
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


def uco(c: ml_collections.ConfigDict, tiny: bool = False) -> ml_collections.ConfigDict:
  """Paper 000's dialogues: tutor first, table XII's prompts, T = 10 tutor turns (2 on the
  tiny models); messages are not limited before that (the 10th tutor message is the 19th)."""
  turns = 2 if tiny else UCO_TUTOR_TURNS
  c.rollout.update(max_tutor_turns=turns, max_turns=2 * turns, **UCO_DIALOGUES)
  return c


@dataclasses.dataclass(frozen=True)
class Dialogues:
  """What a condition decides, typed: the dialogue rules and each side's turn limit; a
  training run's and its evaluation's are compared."""
  rollout: RolloutSettings
  tutor_max_new_tokens: int
  student_max_new_tokens: int


def dialogue_settings(s: DialogueSettings) -> Dialogues:
  """The dialogue settings of typed run settings (pedrl.jobs.settings.DialogueSettings)."""
  return Dialogues(s.rollout, s.tutor.max_new_tokens, s.student.max_new_tokens)


@dataclasses.dataclass(frozen=True)
class Recorded:
  """A run's dialogue settings as its WORKDIR/config.json holds them, read by the settings
  types; `keys` are the config keys the file had (a run made before a field existed lacks
  it, and its value here is today's default, not the run's)."""
  dialogues: Dialogues
  keys: frozenset[str]  # "rollout.max_turns", "tutor.max_new_tokens", ...


def recorded(config: dict) -> Recorded:
  """The dialogue settings of a run's recorded config (config.json as a dict) by the types
  a job reads its config with; ValueError (naming the section) if they refuse a value."""
  reader = settings_lib.Reader(ml_collections.ConfigDict(config))
  rollout = reader.read(RolloutSettings, "rollout") if reader.has("rollout") else \
      RolloutSettings()
  tutor, student = (reader.read(PartySettings, side) for side in ("tutor", "student"))
  return Recorded(Dialogues(rollout, tutor.max_new_tokens, student.max_new_tokens),
                  frozenset(reader.used))


def _compared(d: Dialogues) -> dict[str, object]:
  """{config key: value} of the dialogue settings, as differences names them."""
  return {**{f"rollout.{f.name}": getattr(d.rollout, f.name)
             for f in dataclasses.fields(RolloutSettings)},
          "tutor.max_new_tokens": d.tutor_max_new_tokens,
          "student.max_new_tokens": d.student_max_new_tokens}


def differences(trained_config: dict, s: DialogueSettings) -> list[str]:
  """The dialogue settings in which a training run (its WORKDIR/config.json, as a dict)
  and the run settings `s` differ, as "key: trained X, here Y"; keys the run did not
  record (made before they existed) are not compared. A recorded config that today's
  settings types refuse is one difference that says why."""
  try:
    theirs = recorded(trained_config)
  except ValueError as e:
    return [f"its recorded dialogue settings are not readable by this pedrl ({e})"]
  ours = _compared(dialogue_settings(s))
  return [f"{key}: trained {value!r}, here {ours[key]!r}"
          for key, value in _compared(theirs.dialogues).items()
          if key in theirs.keys and value != ours[key]]
