"""From a config file to typed settings, one way for every section.

Each default is written once, on a settings type (a dataclass in its package's
`settings.py`, citing its paper, re-exported beside the code that reads it) or,
for a field without one, in the config file. `section(T, …)` makes a config
section of a type's fields; `Reader` builds the types back from the sections and
records every key it used, so a key that nothing reads (a typo, a leftover) is
an error before anything runs, not a silent no-op.

This module, the settings types and the config files built on them import no JAX
(tests/project/test_layers.py): a job reads its config, and reports its mistakes, before
it loads anything heavy (pedrl.cli.check_job).
"""
import dataclasses
import types
import typing
from collections.abc import Collection
from typing import Any

import ml_collections
from ml_collections import config_dict

from pedrl import fields
from pedrl.agents.settings import CPASettings, TutorAgentSettings
from pedrl.clients.settings import EndpointSettings
from pedrl.engine.params import SamplingParams
from pedrl.env.settings import PartySettings, ProblemSettings, RolloutSettings, SolveSettings
from pedrl.eval.settings import (EvalSettings, PedRMSettings, ReasoningSettings, ShardSettings,
                                 TutorRun)
from pedrl.rewards.assemble import RewardSettings
from pedrl.rewards.settings import JudgeSettings, OracleSettings, RuleJudgeSettings
from pedrl.rewards.uco_turns import UCOSettings
from pedrl.rl import offline_data
from pedrl.rl.settings import GRPOSettings, LoopSettings, OptimizerSettings, TrainSettings

if typing.TYPE_CHECKING:
  import jax

  from pedrl.rl.objective import Objective

T = typing.TypeVar("T")  # A settings type Reader builds.


def _fields(source) -> dict:
  """{name: default or MISSING} of a dataclass's init fields. Fields with a default
  factory are not settings (counters, caches)."""
  return {f.name: f.default for f in dataclasses.fields(source)
          if f.init and f.default_factory is dataclasses.MISSING}


def _none_type(source, name: str) -> type:
  """The type a None-default field takes when set (`float | None` -> float; `str` where a
  section leaves a `str` field None), so that --config.x.y=... parses it; object where
  the annotation does not say."""
  hint = typing.get_type_hints(source).get(name)
  if hint in (str, int, float, bool):
    return hint
  if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
    rest = [t for t in typing.get_args(hint) if t is not type(None)]
    if len(rest) == 1 and rest[0] in (str, int, float, bool):
      return rest[0]
  return object


def section(*sources: type, skip: Collection[str] = (),
            **values: Any) -> ml_collections.ConfigDict:  # Any: a config value.
  """A config section of the sources' fields with their defaults, then `values`.

  `skip`: fields a job's config leaves out (an offline job has no batch of problems).
  A field without a default must be given in `values`; a value for no field is
  an error."""
  out, owner = {}, {}
  for source in sources:
    for k, v in _fields(source).items():
      if k not in skip:
        out[k], owner[k] = v, source
  unknown = set(values) - set(out)
  if unknown:
    raise ValueError(f"{sorted(unknown)} are not fields of {[s.__name__ for s in sources]}")
  out.update(values)
  missing = sorted(k for k, v in out.items() if v is dataclasses.MISSING)
  if missing:
    raise ValueError(f"{missing} have no default: give them a value")
  # None defaults become typed placeholders, so --config.x.y=... can set them.
  return ml_collections.ConfigDict(
      {k: config_dict.placeholder(_none_type(owner[k], k)) if v is None else v
       for k, v in out.items()})


def _plain(value):
  """Config values as settings hold them: lists become tuples (frozen, hashable)."""
  if isinstance(value, (list, tuple)):
    return tuple(_plain(v) for v in value)
  return value


class UnreadKeys(ValueError):
  """A config carries keys that no setting reads."""


class Reader:
  """Builds settings from a config and records which keys were read."""

  def __init__(self, config: ml_collections.ConfigDict):
    self.config, self.used = config, set()

  def values(self, source: type, path: str = "", **given: Any) -> dict[str, Any]:
    """The section's values for `source`'s fields, then `given`; `path` "" is the top level."""
    node = self.config
    for part in filter(None, path.split(".")):
      node = node[part]
    names = [k for k in _fields(source) if k not in given and k in node
             and not isinstance(node[k], ml_collections.ConfigDict)]
    self.used.update(f"{path}.{k}" if path else k for k in names)
    return {**{k: _plain(node[k]) for k in names}, **given}

  def has(self, path: str) -> bool:
    """Whether the config has section `path`."""
    node = self.config
    for part in filter(None, path.split(".")):
      if not isinstance(node, ml_collections.ConfigDict) or part not in node:
        return False
      node = node[part]
    return True

  def read(self, source: type[T], path: str = "", **given: Any) -> T:
    """source(**values(source, path, **given)); a value it refuses is a ValueError naming
    the flag (a FieldError: `--config.PATH.NAME=VALUE: must be …`) or else the section."""
    try:
      return source(**self.values(source, path, **given))
    except fields.FieldError as e:
      raise ValueError(f"--config.{path + '.' if path else ''}{e}") from None
    except (ValueError, TypeError) as e:
      raise ValueError(f"--config.{path or '(top level)'}: {e}") from None

  def read_inheriting(self, source: type[T], path: str, parent: T,
                      own: Collection[str] = ()) -> T:
    """`read(source, path)`, each value the section leaves None taken from `parent` (a
    `source` read from another section), except the fields `own`."""
    values = self.values(source, path)
    given = {k: getattr(parent, k) for k, v in values.items() if v is None and k not in own}
    self.used.update(f"{path}.{k}" for k in given)
    return self.read(source, path, **given)

  def unread(self) -> list[str]:
    """Every leaf key of the config that nothing read."""
    out = []

    def walk(node, prefix):
      for k, v in node.items():
        key = f"{prefix}{k}"
        if isinstance(v, ml_collections.ConfigDict):
          walk(v, key + ".")
        elif key not in self.used:
          out.append(key)
    walk(self.config, "")
    return sorted(out)

  def check_all_read(self) -> None:
    if why := next(filter(None, map(fields.renamed, self.unread())), None):
      raise UnreadKeys(why)
    if unread := self.unread():
      raise UnreadKeys("nothing reads " + ", ".join(f"--config.{k}" for k in unread) +
                       " (a misspelt or leftover key?)")


# -- The settings of a run -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class JobSettings:
  """The config's top level: the run's seed and batch shape, read here once and passed to
  what uses them. Defaults are paper 003's generation batch (appendix A.2)."""
  # Every draw of a run is a function of it and an item's number (pedrl.streams): the
  # problem order, scenarios and personas, sampled tokens, solve attempts, mini-batches.
  seed: int = 0
  # A workdir holds one run (WORKDIR/run.json); "allow" lets a run of another job, reward
  # set or model take it over instead of stopping.
  resume_mismatch: str = "refuse"
  batch_problems: int = 16  # B problems per batch (paper 003 A.2).
  group_size: int = 8  # G rollouts per problem (paper 003 A.2 and 5.3).
  scan_layers: bool = True  # False: unrolled, faster decoding and GPU training, longer compiles.

  def __post_init__(self):
    if self.batch_problems < 1 or self.group_size < 1:
      raise ValueError(f"batch_problems={self.batch_problems} and group_size={self.group_size} "
                       "must be positive")


@dataclasses.dataclass(frozen=True)
class MeshSettings:
  """The config's `mesh`: sizes of the (data, fsdp, tensor) axes; -1 takes the rest."""
  data: int = 1
  fsdp: int = -1
  tensor: int = 1

  def __post_init__(self):
    for name in ("data", "fsdp", "tensor"):
      size = getattr(self, name)
      fields.need(isinstance(size, int) and (size >= 1 or size == -1), self, name,
                  "an integer >= 1, or -1 (the devices left)")

  def make(self) -> "jax.sharding.Mesh":
    from pedrl import sharding  # JAX: loaded when a job builds its mesh, after the checks.
    return sharding.make_mesh(self.data, self.fsdp, self.tensor)


@dataclasses.dataclass(frozen=True)
class BaselineDataSettings(ShardSettings):
  """The baseline data job's `baselines` section (paper 003 A.3), with this process's shard."""
  fraction: float = 0.3  # Of the training split: "we sample 30% of the full dataset".
  # Which dialogues MDPO pairs (pedrl.rl.offline_data.PAIR_RULES): accepted_rejected, a
  # judge-accepted dialogue against a judge-rejected one of its group rewarded less (A.3's
  # (D_acc, D_rej) with r(D_acc) > r(D_rej); 5.4: "pairs of chosen and rejected
  # conversations scored by judges"), or reward_order, any two whose rewards differ.
  pairs: str = "accepted_rejected"
  # Pairs need rewards differing by more than this (0: the paper's r(D_acc) > r(D_rej)).
  min_margin: float = 0.0
  # The SFT set's accepted dialogues: of every scored dialogue, or only of those in pairs
  # (A.3 "filter the MDPO data to keep only accepted responses"; pedrl.rl.offline_data).
  sft_source: str = "dialogues"

  def __post_init__(self):
    super().__post_init__()
    if not 0 < self.fraction <= 1:
      raise ValueError(f"fraction={self.fraction} is not in (0, 1]")
    if self.sft_source not in offline_data.SFT_SOURCES:
      raise ValueError(f"sft_source={self.sft_source!r} is not one of "
                       f"{offline_data.SFT_SOURCES}")
    if not self.min_margin >= 0:
      raise ValueError(f"min_margin={self.min_margin} must be >= 0")
    if self.pairs not in offline_data.PAIR_RULES:
      raise ValueError(f"pairs={self.pairs!r} is not one of {offline_data.PAIR_RULES}")


def from_section(path: str, optional: bool = False,
                 inherit: str | None = None) -> Any:  # A dataclasses.Field, as its value.
  """A field of a job's settings, read from the config section `path` ("": the top level)
  as its annotated type; `optional`: a config without the section gets the type's
  defaults; `inherit`: an earlier field of the same type whose values fill in those the
  section leaves None, the model aside (Reader.read_inheriting)."""
  return dataclasses.field(metadata={"section": path, "optional": optional,
                                     "inherit": inherit})


@dataclasses.dataclass(frozen=True)
class DialogueSettings:
  """What every dialogue job's config says, typed (the rollout and baseline data jobs' whole
  config; training and evaluation add their sections): the models, the problems, the
  dialogue rules, the solve attempts, the rewards and whatever answers for them."""
  job: JobSettings = from_section("")
  mesh: MeshSettings = from_section("mesh")
  tutor: PartySettings = from_section("tutor")
  student: PartySettings = from_section("student")
  problems: ProblemSettings = from_section("problems")
  rollout: RolloutSettings = from_section("rollout")
  solve: SolveSettings = from_section("solve")
  rewards: RewardSettings = from_section("rewards")
  judging: JudgeSettings = from_section("rewards")
  # The judges' endpoint, also the LLM level classifier's; its client reads the API key
  # only when built (process 0 only, after the checks).
  openai: EndpointSettings = from_section("rewards.openai")
  local_judge: PartySettings = from_section("rewards.local_judge")
  rule_judges: RuleJudgeSettings = from_section("rewards.rule_judges")
  uco: UCOSettings = from_section("rewards.uco")
  oracle: OracleSettings = from_section("rewards.uco")
  # UCO's oracle's endpoint (oracle=openai). Its section's values left None are the judges'
  # (`openai`): the same endpoint, key and client settings unless it names its own; but not
  # the model, which an LLM oracle needs given (pedrl.jobs.checks.check_uco).
  oracle_endpoint: EndpointSettings = from_section("rewards.uco.oracle_endpoint",
                                                   inherit="openai")

  @property
  def judged(self) -> bool:
    """Whether the job's dialogues go to the judges: when its rewards use them."""
    return self.rewards.needs_judges

  @property
  def endpoint_sides(self) -> tuple[str, ...]:
    """The sides played by an endpoint, not a local checkpoint: none."""
    return ()


@dataclasses.dataclass(frozen=True)
class TrainingSettings(DialogueSettings):
  """A GRPO training job's config, typed: a dialogue job's and its `rl` section."""
  train: TrainSettings = from_section("rl")
  grpo: GRPOSettings = from_section("rl")
  optimizer: OptimizerSettings = from_section("rl")

  def __post_init__(self):
    if self.job.group_size < 2:
      raise ValueError(f"--config.group_size={self.job.group_size}: group_size must be at "
                       "least 2 for group-relative advantages")


@dataclasses.dataclass(frozen=True)
class EvaluationSettings(DialogueSettings):
  """An evaluation job's config, typed: a dialogue job's, the protocol's own `eval`
  section (Ped-RM, the reasoning benchmarks) and what the tutor under test is (a training
  run's step, an endpoint, an agent) and whether the student is an endpoint."""
  evaluation: EvalSettings = from_section("eval")
  pedrm: PedRMSettings = from_section("eval.pedrm")
  tutor_run: TutorRun = from_section("tutor")
  tutor_endpoint: EndpointSettings = from_section("tutor.endpoint")
  tutor_agent: TutorAgentSettings = from_section("tutor")
  tutor_cpa: CPASettings = from_section("tutor.cpa", optional=True)  # The agent tutor's.
  student_endpoint: EndpointSettings = from_section("student.endpoint")
  reasoning: ReasoningSettings = from_section("eval.reasoning")

  @property
  def judged(self) -> bool:
    """Always: an evaluation's leak and helpful rates are the judges'."""
    return True

  @property
  def endpoint_sides(self) -> tuple[str, ...]:
    return tuple(side for side, e in (("tutor", self.tutor_endpoint),
                                      ("student", self.student_endpoint)) if e.model)


def sampling(side: PartySettings) -> SamplingParams:
  """The side's SamplingParams, stopping at the model's end-of-sequence ids."""
  return SamplingParams(max_new_tokens=side.max_new_tokens, temperature=side.temperature,
                        top_k=side.top_k, top_p=side.top_p)


S = typing.TypeVar("S", bound=DialogueSettings)


def read_settings(config: ml_collections.ConfigDict, kind: type[S] = DialogueSettings) -> S:
  """The typed settings of `config` as a job of `kind` reads them (DialogueSettings,
  TrainingSettings, EvaluationSettings: each field from its section, `from_section`);
  UnreadKeys if it carries a key nothing reads, a ValueError naming the section if a
  setting refuses a value."""
  read, types_ = Reader(config), typing.get_type_hints(kind)
  sections = {}
  for f in dataclasses.fields(kind):
    path, source = f.metadata["section"], types_[f.name]
    if f.metadata["inherit"]:
      sections[f.name] = read.read_inheriting(source, path, sections[f.metadata["inherit"]],
                                              own=("model",))
    else:
      sections[f.name] = (source() if f.metadata["optional"] and not read.has(path) else
                          read.read(source, path))
  read.check_all_read()
  return kind(**sections)


# -- Offline training (SFT, MDPO) --------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class OfflineSettings(LoopSettings):
  """The loop of an offline run (the `train` section, with the optimizer's and the
  objective's fields; checkpoints and the non-finite guard are LoopSettings'). Defaults
  are paper 003's SFT (A.3); MDPO's config sets its own."""
  save_every: int = 100  # A step is one optimizer update, not GRPO's rollout batch.
  batch: int = 16  # Items per optimizer update: dialogues (SFT) or pairs (MDPO).
  epochs: int = 1  # Passes over the items.
  steps: int = 0  # > 0: this many steps instead (the items cycle in further epochs).
  # Linear warm-up over this share of the run's updates (rounded), when the optimizer's
  # warmup_steps (a count) is 0: the count of a run over data of unknown size.
  warmup_fraction: float = 0.0

  def __post_init__(self):
    super().__post_init__()
    fields.counts(self, ("batch", "epochs"))
    fields.counts(self, ["steps"], least=0)
    fields.need(fields.finite(self.warmup_fraction) and 0 <= self.warmup_fraction < 1, self,
                "warmup_fraction", "in [0, 1)")


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """The config's `data` section."""
  workdir: str | None = None  # A pedrl.experiments.baseline_data workdir.


@dataclasses.dataclass(frozen=True)
class TrainedTutorSettings:
  """An offline job's `tutor` section."""
  path: str | None = None  # None: the tutor that made the data (its config.json's).


@dataclasses.dataclass(frozen=True)
class OfflineRunSettings:
  """Everything an offline job's config says, typed (`read_offline_settings`)."""
  job: JobSettings
  mesh: MeshSettings
  tutor: TrainedTutorSettings
  data: DataSettings
  train: OfflineSettings
  optimizer: OptimizerSettings
  objective: "Objective"  # The method's (GRPO's is in `rl`).
  options: offline_data.SequenceSettings | None  # SFT's data options; None for MDPO.

  def __post_init__(self):
    if self.train.warmup_fraction and self.optimizer.warmup_steps:
      raise ValueError(f"--config.train.warmup_fraction={self.train.warmup_fraction!r}: must "
                       "be 0 when warmup_steps is given")


def read_offline_settings(config: ml_collections.ConfigDict, objective_type: type,
                          options_type: type | None = None) -> OfflineRunSettings:
  """The typed settings of an offline job's config (pedrl.jobs.base_config's
  offline_config); UnreadKeys or a ValueError naming the section, as read_settings."""
  read = Reader(config)
  out = OfflineRunSettings(
      job=read.read(JobSettings), mesh=read.read(MeshSettings, "mesh"),
      tutor=read.read(TrainedTutorSettings, "tutor"), data=read.read(DataSettings, "data"),
      train=read.read(OfflineSettings, "train"),
      optimizer=read.read(OptimizerSettings, "train"),
      objective=read.read(objective_type, "train"),
      options=read.read(options_type, "train") if options_type else None)
  read.check_all_read()
  return out
