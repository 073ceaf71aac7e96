"""The evaluations' settings types: the protocol's, Ped-RM, the reasoning benchmarks,
MathTutorBench's harness and the analysis job's (the config's `eval` section, the
benchmark job's and the analysis job's top level, `views`, `label` and `label2`).

Importable without JAX: config files and pedrl.jobs.settings build on them, so a config is
read and its mistakes reported before a job loads anything heavy. Each type stays
importable from the module that uses it (pedrl.eval.pedrm, …).
"""
import dataclasses

from pedrl.env.settings import ProblemSettings
from pedrl.eval.mathtutorbench_harness import tasks

CONFIDENCE, RESAMPLES = 0.95, 10_000  # Bootstrap intervals (pedrl.eval.metrics).
UNSCORED = ("zero", "drop")  # A dialogue without Ped-RM scores in the macro: 0, or left out.
# Ped-RM's input formats (PedRMSettings.format).
FORMATS = ("pedagogical_rl", "mathtutorbench", "problem_only")
_WITH_SYSTEM_PROMPT = ("pedagogical_rl", "mathtutorbench")


@dataclasses.dataclass(frozen=True)
class PedRMSettings:
  """The config's `eval.pedrm` keys. path None: no Ped-RM scores (NaN in the table)."""
  path: str | None = None  # e.g. a local copy of eth-nlped/Qwen2.5-1.5B-pedagogical-rewardmodel
  format: str = "pedagogical_rl"  # One of FORMATS (see the module docstring).
  # The reward model's system prompt, a text file (formats pedagogical_rl, mathtutorbench).
  system_prompt_file: str | None = None
  rows_per_call: int = 8
  # Paper 003's evaluation runs the RM in float32 (eval.py: vLLM dtype=torch.float32), the
  # MathTutorBench script in bfloat16; the MathTutorBench job's config says bfloat16.
  dtype: str = "float32"
  # An input longer than the RM's context: an error, or (True) its start cut off, counted
  # in `PedRM.cut` (tiny runs, whose classifier has a short context).
  truncate_inputs: bool = False

  def __post_init__(self):
    if self.format not in FORMATS:
      raise ValueError(f"pedrm format {self.format!r} is not one of {FORMATS}")
    if self.path and self.format in _WITH_SYSTEM_PROMPT and not self.system_prompt_file:
      raise ValueError(
          f"pedrm format {self.format!r} needs system_prompt_file: a text file holding the "
          "reward model's system prompt, SYSTEM_PROMPT in PedagogicalRL's "
          "utils/pedagogical_reward.py or MathTutorBench's reward_model/"
          "compute_scaffolding_score.py (pedrl ships no copy)")
    if self.rows_per_call < 1:
      raise ValueError("rows_per_call must be positive")


BENCHMARKS = ("gsm8k", "math500", "mmlu", "wbeb")
MMLU_AVERAGES = ("subject", "question")


@dataclasses.dataclass(frozen=True)
class ReasoningSettings:
  """The config's `eval.reasoning` section. benchmarks "": the tutoring protocol runs."""
  benchmarks: str = ""  # Comma-separated, of BENCHMARKS (e.g. "gsm8k,math500,mmlu").
  # Each benchmark's data: a file (or directory, MMLU) or a tfds:NAME[/CONFIG]:SPLIT source.
  gsm8k_path: str | None = None  # GSM8K test JSONL (question, answer).
  gsm8k_shots_path: str | None = None  # GSM8K train JSONL for the shots.
  gsm8k_shots: int = 4  # Paper 003 table 3.
  math500_path: str | None = None  # MATH500 test JSONL (problem, answer).
  mmlu_path: str | None = None  # A directory with dev/ and test/ CSVs, or a TFDS test split.
  mmlu_shots: int = 5  # Paper 003 table 3.
  wbeb_path: str | None = None  # Multiple-choice JSONL (question, options, answer, category).
  # MMLU's number: the mean of its subjects' accuracies, as LightEval reports it (its
  # info_loggers.MetricsLogger.aggregate averages the mmlu:<subject> tasks into
  # mmlu:_average), or the share of all questions ("question").
  mmlu_average: str = "subject"
  # The reference's LightEval command (eth-lre/PedagogicalRL @ bae10cd, README "Reasoning
  # Benchmarks"): generation_parameters={max_new_tokens:8192,temperature:0.6,top_p:0.95},
  # max_model_length=8192. There vLLM also ends a sequence at 8192 tokens, prompt included;
  # pedrl bounds the reply alone (a difference only for a reply that runs to the limit).
  temperature: float = 0.6  # 0: greedy.
  top_p: float = 0.95
  max_new_tokens: int = 8192
  limit: int = 0  # > 0: the first `limit` examples of each benchmark (smoke runs).
  batch_examples: int = 64  # Questions sampled together (one resumable batch).

  @property
  def names(self) -> tuple:
    return tuple(b.strip() for b in self.benchmarks.split(",") if b.strip())

  def path(self, name: str) -> str | None:
    """Benchmark `name`'s data (its `<name>_path`)."""
    return {"gsm8k": self.gsm8k_path, "math500": self.math500_path, "mmlu": self.mmlu_path,
            "wbeb": self.wbeb_path}[name]

  def __post_init__(self):
    if self.batch_examples < 1:
      raise ValueError("batch_examples must be positive")
    if self.mmlu_average not in MMLU_AVERAGES:
      raise ValueError(f"mmlu_average {self.mmlu_average!r} is not one of {MMLU_AVERAGES}")
    for name in self.names:
      if name not in BENCHMARKS:
        raise ValueError(f"benchmark {name!r} is not one of {BENCHMARKS}")
      if not self.path(name):
        raise ValueError(f"benchmark {name} needs its data: --config.eval.reasoning."
                         f"{name}_path=...")


MODES = ("chat", "completion")


@dataclasses.dataclass(frozen=True)
class BenchSettings:
  """The config's top-level benchmark keys (defaults: the harness's)."""
  benchmark_dir: str | None = None  # A MathTutorBench checkout (its configs/): tasks.BENCHMARK.
  data_dir: str | None = None  # gsm8k/, stepverify/, mathtutorbench/: tasks.SOURCES.
  tasks: str = ",".join(tasks.TASKS)
  # completion (the harness's default, its README's commands): the prompt as raw text, the
  # reply stripped; chat (its is_chat=True, which chat-only models need): the prompt as the
  # only, system, message through the chat template, the reply as it comes.
  mode: str = "completion"
  max_new_tokens: int = 2048  # The harness's max_tokens.
  temperature: float = 0.0  # The harness's: greedy.
  limit: int = 0  # > 0: the first `limit` examples of each task (smoke runs).
  batch_examples: int = 16
  # A prompt longer than the context with max_new_tokens: an error, or (True) its start cut
  # off to fit, counted in results and flagged in the responses (tiny runs only).
  truncate_prompts: bool = False
  model_name: str = "model"  # In generations-<model>-<task>.json.

  @property
  def names(self) -> tuple:
    return tuple(t.strip() for t in self.tasks.split(",") if t.strip())

  def __post_init__(self):
    if self.mode not in MODES:
      raise ValueError(f"mode {self.mode!r} is not one of {MODES}")
    for t in self.names:
      if t not in tasks.TASKS:
        raise ValueError(f"unknown MathTutorBench task {t!r}; the tasks: {', '.join(tasks.TASKS)}")
    if "-" in self.model_name:
      raise ValueError("model_name must not contain '-': the benchmark's reward-model script "
                       "reads the model and task from generations-<model>-<task>.json")


BUCKETS = "0.01,0.1,0.2,0.3,0.4,0.5,0.6"  # Paper 003 section 5.2: solve rates of 1-60%.


@dataclasses.dataclass(frozen=True)
class ViewSettings:
  """The config's `views` section: what to draw besides the transcript analysis."""
  problems_path: str = ""  # A BigMath-style problems file: 003 table 1 and fig. 3.
  # With test_path, problems_path and test_path are the released training and test splits
  # (rd211/Big-Math-RL-Verified-Filtered's `train` and `test`, the papers' partition), read
  # as given (n_test rows in the test split); without, problems_path is a pool split here.
  test_path: str = ""
  filter: bool = True  # Paper 003's filter before the split (one number, 1-60% solve rate).
  n_train: int = ProblemSettings.n_train
  n_test: int = ProblemSettings.n_test
  # The split's seed: the training configs' (0), so the views show the problems the jobs
  # split off; not analysis.seed, which draws the sentences to label.
  split_seed: int = 0
  solve_rates_workdir: str = ""  # An evaluation workdir: fig. 3 from its measured rates.
  buckets: str = BUCKETS  # Bucket edges of fig. 3, ascending.
  sweep: str = ""  # 000 fig. 3: 'G=TRAINING_WORKDIR,...' (e.g. '2=/runs/g2,4=/runs/g4').
  sweep_evals: str = ""  # The same runs' evaluation workdirs: 'G=EVAL_WORKDIR,...'.

  def __post_init__(self):
    self.edges  # A bad `buckets` fails when the config is read.

  @property
  def edges(self) -> list:
    try:
      edges = [float(x) for x in self.buckets.split(",") if x.strip()]
    except ValueError:
      raise ValueError(f"buckets {self.buckets!r} are not comma-separated numbers") from None
    if len(edges) < 2 or edges != sorted(edges):
      raise ValueError(f"buckets {self.buckets!r}: give two or more ascending edges")
    return edges


@dataclasses.dataclass(frozen=True)
class ShardSettings:
  """Which shard of how many this process runs (`--config.eval.shard`, `num_shards`)."""
  shard: int = 0
  num_shards: int = 1

  def __post_init__(self):
    if self.num_shards < 1:
      raise ValueError(f"num_shards={self.num_shards} must be at least 1")
    if not 0 <= self.shard < self.num_shards:
      raise ValueError(f"shard={self.shard} is not in [0, num_shards={self.num_shards}): shards "
                       f"are numbered 0 to {self.num_shards - 1}")


@dataclasses.dataclass(frozen=True)
class EvalSettings(ShardSettings):
  """The config's `eval` section (the protocol's own settings; the rest is the dialogue
  config's: problems, rollout, solve, rewards.judges)."""
  samples_per_problem: int = 1  # Dialogues per problem (the reference evaluates one).
  # Ped-RM macro: a dialogue with no scored turn counts 0 (the reference's eval.py) or is
  # left out ("drop"); either way it is counted (metrics.json: pedrm_unscored_dialogues).
  pedrm_unscored: str = "zero"
  bootstrap_resamples: int = RESAMPLES
  confidence: float = CONFIDENCE

  def __post_init__(self):
    super().__post_init__()
    if self.samples_per_problem < 1:
      raise ValueError("samples_per_problem must be positive")
    if not 0 < self.confidence < 1:
      raise ValueError(f"confidence={self.confidence} is not in (0, 1)")
    if self.pedrm_unscored not in UNSCORED:
      raise ValueError(f"pedrm_unscored={self.pedrm_unscored!r} is not one of "
                       f"{UNSCORED}")


@dataclasses.dataclass(frozen=True)
class TutorRun:
  """The config's `tutor.workdir` and `tutor.step`: the tutor under test is a pedrl
  training run's checkpoint, read straight from orbax (no export step)."""
  workdir: str | None = None
  step: int | None = None  # None: the latest saved step, fixed when the evaluation starts.


# -- The analysis job (paper 001 section 4, appendices D-E) --------------------------------

SCHEMES = ("codebook", "schoenfeld")
BACKENDS = ("openai", "local", "rule")
THINKING_UNITS = ("sentence", "paragraph")
# Table 11's order: the first column's share (the paper's rows descend in NoThink), or the
# mean share over the columns.
TOP_CODES_RANKS = ("first", "mean")
ROLES = ("label", "label2")  # The config sections of the first labeller and the second.


@dataclasses.dataclass(frozen=True)
class LabelSettings:
  """One labeller: the config's `label` section, and `label2` for an optional second one
  (backend "": none) whose agreement with the first is reported as Cohen's κ."""
  backend: str = "openai"  # openai | local | rule (| "" for label2: no second labeller)
  schemes: str = "codebook,schoenfeld"  # Comma-separated, of SCHEMES.
  codebook_prompt: str = "analysis/codebook"  # A prompt name, or a Jinja file of the user's.
  schoenfeld_prompt: str = "analysis/schoenfeld"
  rounds: int = 3  # Asks of a unit whose reply does not parse (or whose API call failed).
  batch_units: int = 256  # Distinct texts asked together; a batch is written when it ends.
  retry_failures: bool = False  # Ask again for the texts the cache holds as failures.

  @property
  def names(self) -> tuple:
    return tuple(s.strip() for s in self.schemes.split(",") if s.strip())

  def __post_init__(self):
    if self.backend not in BACKENDS + ("",):
      raise ValueError(f"backend {self.backend!r} is not one of {BACKENDS} (or '' for none)")
    for name in self.names:
      if name not in SCHEMES:
        raise ValueError(f"scheme {name!r} is not one of {SCHEMES}")
    if self.rounds < 1 or self.batch_units < 1:
      raise ValueError("rounds and batch_units must be positive")

  def prompt(self, scheme: str) -> str:
    return {"codebook": self.codebook_prompt, "schoenfeld": self.schoenfeld_prompt}[scheme]


# Paper 001 table 8, as pedrl reads it (pedrl.eval.analysis.significance's docstring): (name, left, right, target).
PAPER_COMPARISONS = (
    "Major Categories: Ped.* vs Think*: table4; "
    "Math Problem Solving: Ped.* vs Think*: category=Mathematical Problem Solving; "
    "Praise (Ped vs Non-Ped): Ped.* vs Think*: code=Praise; "
    "Praise (NoThink vs Ped.): NoThink vs Ped.*: code=Praise; "
    "Step-by-Step: Ped.* vs Think*: code=Step-by-step instruction; "
    "Praise (Reward effect): Reward vs NoReward: code=Praise")
# Table 4 and 11's columns average these (their notes); table 8's sides pool them.
PAPER_GROUPS = ("Think*=Think NoReward+Think Reward; "
                "Ped.*=Ped. Think NoReward+Ped. Think Reward; "
                "Reward=Think Reward+Ped. Think Reward; "
                "NoReward=Think NoReward+Ped. Think NoReward")
TOTALS = ("sum", "pooled")  # Tables 3 and 9's Total and Unique (pedrl.eval.analysis.text).


@dataclasses.dataclass(frozen=True)
class AnalysisSettings:
  """The config's top level."""
  runs: str = ""  # 'CONDITION=WORKDIR,…': evaluation or rollout workdirs.
  groups: str = PAPER_GROUPS  # 'NAME=A+B; …' (Think*, Ped.* in tables 4, 8, 11).
  columns: str = "NoThink,Think*,Ped.*"  # Tables 4 and 11 (""): one per condition.
  comparisons: str = PAPER_COMPARISONS  # Table 8's, as pedrl reads them.
  codebook_file: str = ""  # In codebook.tsv's layout; "": paper 001's table 5.
  thinking_unit: str = "sentence"  # Schoenfeld units: sentence | paragraph.
  total: str = "sum"  # Tables 3 and 9's Total and Unique: sum | pooled (text.py).
  sample: int = 0  # > 0: label a seeded subset of this many units per condition and scheme.
  top_codes: int = 10  # Table 11's rows.
  top_codes_rank: str = "first"  # Which codes and in what order (TOP_CODES_RANKS).
  confidence: float = 0.95  # Every interval's.
  seed: int = 0
  scan_layers: bool = False  # A local labeller's layers (False decodes faster on CPU).
  figures: bool = True  # False: tables only (no matplotlib needed).

  def __post_init__(self):
    if self.thinking_unit not in THINKING_UNITS:
      raise ValueError(f"thinking_unit {self.thinking_unit!r} is not one of "
                       f"{THINKING_UNITS}")
    if self.top_codes_rank not in TOP_CODES_RANKS:
      raise ValueError(f"top_codes_rank {self.top_codes_rank!r} is not one of "
                       f"{TOP_CODES_RANKS}")
    if self.total not in TOTALS:
      raise ValueError(f"total {self.total!r} is not one of {TOTALS}")
    if not 0 < self.confidence < 1:
      raise ValueError(f"confidence={self.confidence} is not in (0, 1)")
