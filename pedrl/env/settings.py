"""The environment's settings types: the parties, the problems, the dialogue rules and the
solve attempts (the config's tutor, student, problems, rollout and solve sections).

Importable without JAX, numpy or the models: config files and pedrl.jobs.settings build
on them, so a config is read and its mistakes reported before a job loads anything heavy.
Each type stays importable from the module that uses it (pedrl.env.party, …).
"""
import dataclasses
import os

from pedrl import fields
from pedrl.env import prompts
# Re-exported: a side played by an endpoint (the evaluation's `tutor.endpoint` /
# `student.endpoint`) is the client's one endpoint type, its sampling the side's own.
from pedrl.clients.settings import EndpointSettings  # pylint: disable=unused-import
from pedrl.env.dialogue import ATTEMPTED, GUIDED, TUTOR


@dataclasses.dataclass(frozen=True)
class PartySettings:
  """A model by path and how it samples (the config's tutor, student, local_judge)."""
  path: str | None  # A Hugging Face checkpoint directory.
  temperature: float
  top_k: int
  top_p: float
  max_new_tokens: int  # Per turn (per reply, for a judge).
  # Rows whose turn ended leave a sampling call's decode batch once the live ones fit one
  # half as large (engine.Sampler's `compact`): the same samples, fewer row-steps.
  compact: bool = True

  def __post_init__(self):
    fields.non_negative(self, ["temperature"])
    fields.counts(self, ["top_k"], least=0)
    fields.need(fields.finite(self.top_p) and 0 < self.top_p <= 1, self, "top_p", "in (0, 1]")
    fields.counts(self, ["max_new_tokens"])


ON_ERROR = ("skip", "fatal")
FORMATS = ("bigmath", "gsm8k", "math500")
SPLITS = ("test", "train", "all", "published", "published_train")
RELEASED = ("published", "published_train")  # Splits read as released: no filter, no row dropped.


@dataclasses.dataclass(frozen=True)
class ProblemSettings:
  """Which problems a job runs on (the config's `problems` section)."""
  # A BigMath, GSM8K or MATH500 source: a file (JSONL, or Parquet) or tfds:NAME[/CONFIG]:SPLIT.
  path: str | None = None
  format: str = "bigmath"  # One of FORMATS.
  on_error: str = "skip"  # A bad row: skipped (counted, by row number) or fatal.
  filter: bool = True  # Paper 003: one numeric answer, Llama-8B solve rate in [0.01, 0.60].
  split: str = "test"  # One of SPLITS (paper 003: 10,000 train / 500 test).
  n_train: int = 10_000  # pedrl's own split (train / test) only.
  n_test: int = 500  # Also the rows the published split has (eval.py's max_val_examples).
  limit: int = 0  # > 0: only the first `limit` problems of the split.
  # The seed of the train/test split; None: the job's seed. An evaluation must split as its
  # training run did (the training configs' seed is 0), whatever seed it samples with.
  split_seed: int | None = None

  def __post_init__(self):
    if self.split not in SPLITS:
      raise ValueError(f"split {self.split!r} is not one of {SPLITS}")
    if self.format not in FORMATS:
      raise ValueError(f"format {self.format!r} is not one of {FORMATS}")
    if self.on_error not in ON_ERROR:
      raise ValueError(f"on_error {self.on_error!r} is not one of {ON_ERROR}")
    if self.split in RELEASED and (self.filter or self.on_error != "fatal"
                                   or self.format != "bigmath"):
      raise ValueError(f"split={self.split!r} reads a released split as given: it needs "
                       "format='bigmath', filter=False and on_error='fatal' (no row dropped)")


SCENARIOS = ("mixed", GUIDED, ATTEMPTED)
TURN_LIMITS = (TUTOR, "message")
HISTORY_THINKING = ("template", "drop", "keep")
# The student's names in the tutor's and the student's prompts, "" for none: paper 003's
# reference code (eth-lre/PedagogicalRL @ bae10cd config/train_rl_model.py,
# `student_names`: eight names and None), one per problem (src/classroom.py:
# student_names[hash(problem) % 9]); the paper's dialogues show "Sam" and "Riley".
STUDENT_NAMES = ("Alex", "Jamie", "Taylor", "Jordan", "Sam", "Casey", "Morgan", "Riley", "")


@dataclasses.dataclass(frozen=True)
class RolloutSettings:
  """Dialogue rules; defaults are paper 003's (values from its reference code)."""
  # Messages per dialogue, the student's attempt included, checked after each tutor message
  # (`turn_limit`). Paper 003 section 5.3 says "at most 16 turns"; its reference code sets
  # max_turns = 15 ("will actually be 16 turns", eth-lre/PedagogicalRL @ bae10cd
  # config/train_rl_model.py) and ends a dialogue after a teacher message once
  # len(conversation) >= max_turns (src/classroom.py, Conversation.add_message). So a
  # guided dialogue (tutor first) ends at 15 messages, an attempted one at 16, each with 8
  # tutor turns. max_turns=16 is pedrl's earlier limit (a guided dialogue then runs 17
  # messages with 9 tutor turns).
  max_turns: int = 15
  turn_limit: str = "tutor"  # max_turns checked after "tutor" messages (reference) or any "message".
  max_tutor_turns: int = 0  # Tutor messages per dialogue; 0: no limit of its own.
  max_conversation_tokens: int = 8192
  scenario: str = "mixed"  # "mixed": guided or attempted, uniformly per problem.
  tutor_prompt: str = "pedagogical_rl/tutor_system"
  # A Jinja file given by path that replaces tutor_prompt, rendered with `problem`,
  # `student_name` (the problem's, None for none) and `include_thinking` (`thinking`,
  # the reference's use_thinking): the reference's variables for a teacher prompt, so a
  # tutor's own prompt file works as given (SocraticLM's, config/eval/SocraticLM.yaml in
  # paper 003's reference code; pedrl ships none).
  tutor_prompt_file: str = ""
  student_prompt: str = "pedagogical_rl/student_system"
  # The attempted scenario's first attempt: the reference writes it from its own prompt file
  # (`student_initial_attempt_prompt_path`), sent as a lone system message (src/classroom.py,
  # Conversation.get_conversation), not figure 10 (which prompts no sampling there). pedrl
  # ships its own wording of that prompt (attempt_prompt); attempt_prompt_file, the
  # reference's file by path (checked by SHA-256, prompts.REFERENCE_FILES), replaces it.
  # attempt_prompt=pedagogical_rl/student_pre_dialogue attempt_role=user: pedrl's earlier
  # attempt (figure 10 as a user message).
  attempt_prompt: str = "pedagogical_rl/student_initial_attempt"
  attempt_prompt_file: str = ""
  attempt_role: str = "system"  # The attempt prompt's role: "system" (reference) or "user".
  attempt_prefix: str = "Here is my attempt at this problem: "
  # Who reads the attempt wrapped in attempt_prefix: "all", the reference's (its
  # conversation holds the wrapped text, src/classroom.py add_message: the student's own
  # view, the post-dialogue solve chat, the judges and Ped-RM see it so); "tutor", pedrl's
  # earlier view (the others read the attempt bare).
  attempt_view: str = "all"
  personas: tuple = ()  # Student persona texts; one per problem, drawn like the scenario.
  # One per problem, drawn like the scenario ("" draws no name); () names no student
  # (pedrl's earlier prompts).
  student_names: tuple = STUDENT_NAMES
  thinking: bool = True  # Passed to the tutor's template as enable_thinking (Qwen3).
  # The tutor's earlier turns' thinking in its own view: "template", as its chat template
  # renders the conversation (the reference renders the whole conversation through the
  # template every turn, src/classroom.py: Qwen3 and DeepSeek-R1-0528-Qwen3 drop it, Qwen2.5
  # and Llama keep it); "drop": always left out (chat.history_text); "keep": as sampled
  # (pedrl's earlier view). Where it is left out, the turn after a thinking turn encodes the
  # tutor's whole view again, so the cache holds exactly what the template renders. A GRPO
  # run trains one sequence per dialogue and so needs it kept (pedrl.jobs.train checks).
  tutor_history_thinking: str = "template"
  force_thinking: bool = False  # Each tutor turn starts with "<think>\n" (not trained on).
  # A prompt appended to the tutor's system prompt telling it to think in tags (003 +think).
  think_instruction: str = ""

  def __post_init__(self):
    if self.scenario not in SCENARIOS:
      raise ValueError(f"scenario {self.scenario!r} is not one of {SCENARIOS}")
    if self.max_turns < 1 or self.max_conversation_tokens < 1 or self.max_tutor_turns < 0:
      raise ValueError("max_turns and max_conversation_tokens must be positive, "
                       "max_tutor_turns non-negative")
    if self.tutor_history_thinking not in HISTORY_THINKING:
      raise ValueError(f"tutor_history_thinking {self.tutor_history_thinking!r} is not one of "
                       f"{HISTORY_THINKING}")
    if self.turn_limit not in TURN_LIMITS:
      raise ValueError(f"turn_limit {self.turn_limit!r} is not one of {TURN_LIMITS}")
    if self.force_thinking and not self.thinking:
      raise ValueError("force_thinking needs thinking=True")
    for key in ("tutor_prompt_file", "attempt_prompt_file"):
      if getattr(self, key) and not os.path.isfile(getattr(self, key)):
        raise ValueError(f"{key} {getattr(self, key)!r} does not exist")
    if self.attempt_view not in ("all", "tutor"):
      raise ValueError(f"attempt_view {self.attempt_view!r} is not one of ('all', 'tutor')")
    if self.attempt_role not in ("system", "user"):
      raise ValueError(f"attempt_role {self.attempt_role!r} is not one of ('system', 'user')")
    for name in (self.tutor_prompt, self.student_prompt, self.attempt_prompt,
                 *filter(None, [self.think_instruction])):
      if name not in prompts.SOURCES:
        raise ValueError(f"unknown prompt {name!r}; known: {', '.join(sorted(prompts.SOURCES))}")


POST_FORMATS = ("chat", "transcript")


@dataclasses.dataclass(frozen=True)
class SolveSettings:
  k: int = 8  # Samples per attempt (paper 003 section 5.1).
  match: str = "math_verify"
  temperature: float = 0.6  # The student's sampling for attempts (reference code).
  max_new_tokens: int = 3900  # Reference code.
  # The student alone before the dialogue: the reference measures it with its own prompt
  # file (`student_attempt_prompt_path`, Conversation.get_student_no_tutor_attempt in
  # src/classroom.py, a user message), not figure 10. pedrl ships its own wording
  # (pre_prompt); pre_prompt_file, the reference's file by path (checked by SHA-256,
  # prompts.REFERENCE_FILES), replaces it. pre_prompt=pedagogical_rl/student_pre_dialogue
  # is figure 10, pedrl's earlier prompt.
  pre_prompt: str = "pedagogical_rl/student_attempt"
  pre_prompt_file: str = ""
  post_prompt: str = "pedagogical_rl/student_post_dialogue"
  post_format: str = "chat"  # The dialogue as "chat" turns (reference) or an inline "transcript".
  pre_dialogue: bool = True  # Jobs: attempts before the dialogue (Δ solve rate reports).
  post_dialogue: bool = True  # Jobs: attempts after it even when no reward uses r_sol.
  prompts_per_call: int = 16  # Prompts sampled together (× k rows).

  def __post_init__(self):
    if self.k < 1 or self.prompts_per_call < 1:
      raise ValueError("k and prompts_per_call must be positive")
    if self.post_format not in POST_FORMATS:
      raise ValueError(f"post_format {self.post_format!r} is not one of {POST_FORMATS}")
    if self.match not in MATCH_MODES:
      raise ValueError(f"match {self.match!r} is not one of {MATCH_MODES}")
    if self.pre_prompt_file and not os.path.isfile(self.pre_prompt_file):
      raise ValueError(f"pre_prompt_file {self.pre_prompt_file!r} does not exist")
    for name in (self.pre_prompt, self.post_prompt):
      if name not in prompts.SOURCES:
        raise ValueError(f"unknown prompt {name!r}; known: {', '.join(sorted(prompts.SOURCES))}")


MATCH_MODES = ("math_verify", "exact")
