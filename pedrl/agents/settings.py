"""The agents' settings types: CPA's numbers and ablations, which agent tutors an evaluation
and which agents and seeds the CPA job runs (the config's `cpa`, `tutor` and `agents`
sections).

Importable without JAX: config files and pedrl.jobs.settings build on them, so a config is
read and its mistakes reported before a job loads anything heavy.
"""
import dataclasses

ANSWER_SOURCES = ("solve", "none")  # CPASettings.answer_source.


@dataclasses.dataclass(frozen=True)
class CPASettings:
  """Paper 002 section 4.4's numbers, and the ablations of its table 3."""
  k: int = 3  # Candidate templates GENERATE proposes.
  j: int = 3  # REVISE iterations at most (algorithm 1).
  sim_steps: int = 3  # Steps a dry run covers.
  max_repairs: int = 2  # Local repairs of a step before re-synthesis.
  max_resyntheses: int = 1  # Returns to M2 per turn (the paper gives no bound).
  max_steps: int = 6  # Steps of a template kept (longer ones are cut, the deliverable kept).
  rounds: int = 3  # Tries per structured reply (the first, then re-asks).
  monitor_llm: bool = True  # The monitor's LLM check of each step (rules always run).
  show_input: bool = True  # M2 and M3 also see the task as given (False: A_t and p̂_t only).
  # The answer "states_answer" checks a guidance reply against (the prompts never show the
  # reference): "solve", the agent's own (a solve stage), or "none" (the rule is not checked).
  answer_source: str = "solve"
  # Table 3's ablations: each False removes its module.
  m1: bool = True  # False: no state; the task contract stands in for A_t.
  m2_loop: bool = True  # False: one template, generated once, never evaluated or revised.
  m2_sim: bool = True  # False: EVALUATE judges the template without a dry run (and its rules).
  m3_monitor: bool = True  # False: no checks, no repairs, no re-synthesis.
  m4: bool = True  # False: y_t is the deliverable step's output as it is.

  def __post_init__(self):
    for name in ("k", "sim_steps", "max_steps", "rounds"):
      if getattr(self, name) < 1:
        raise ValueError(f"cpa.{name}={getattr(self, name)} must be at least 1")
    for name in ("j", "max_repairs", "max_resyntheses"):
      if getattr(self, name) < 0:
        raise ValueError(f"cpa.{name}={getattr(self, name)} must not be negative")
    if self.answer_source not in ANSWER_SOURCES:
      raise ValueError(f"cpa.answer_source={self.answer_source!r} is not one of: "
                       f"{', '.join(ANSWER_SOURCES)}")


# Table 3's rows: variant -> the settings it changes.
ABLATIONS = {"full": {}, "no_m1": {"m1": False}, "no_m2_loop": {"m2_loop": False},
             "no_m2_sim": {"m2_sim": False}, "no_m3_monitor": {"m3_monitor": False},
             "no_m4": {"m4": False}}


BASELINES = ("cot", "plan_solve", "sot")
METHODS = ("cpa",) + tuple(v for v in ABLATIONS if v != "full") + BASELINES


@dataclasses.dataclass(frozen=True)
class TutorAgentSettings:
  """The evaluation config's `tutor.agent`: "" (the model answers itself) or an agent
  over it as backbone: cpa, a table 3 ablation (no_m1, ...), cot, plan_solve or sot."""
  agent: str = ""
  truncate_prompts: bool = False  # Backbone prompts cut to the context (tiny models only).

  def __post_init__(self):
    if self.agent and self.agent not in METHODS:
      raise ValueError(f"tutor.agent={self.agent!r} is not one of: {', '.join(METHODS)}")


@dataclasses.dataclass(frozen=True)
class AgentRuns:
  """The CPA job's `agents` section: the agents (CPA, its ablations, the baselines) and
  the seeds each runs with."""
  methods: str = ",".join(METHODS)
  seeds: str = "42,43,44"  # Paper 002 section 4.4.
  truncate_prompts: bool = False  # Backbone prompts cut to the context (tiny models only).

  def __post_init__(self):
    """Bad methods or seeds fail when the config is read, before anything loads (the
    properties raise ValueError on an unknown method or a seed that is no integer)."""
    if not self.method_names or not self.seed_list:
      raise ValueError(f"agents.methods={self.methods!r} and agents.seeds={self.seeds!r} "
                       "must each name at least one")

  @property
  def method_names(self) -> tuple:
    names = tuple(m.strip() for m in self.methods.split(",") if m.strip())
    for m in names:
      if m not in METHODS:
        raise ValueError(f"unknown method {m!r}; the methods: {', '.join(METHODS)}")
    return names

  @property
  def seed_list(self) -> tuple:
    return tuple(int(x) for x in self.seeds.split(",") if x.strip())
