"""What CPA's stages answer (pydantic schemas) and what a turn leaves behind (trace, memory).

Paper 002 names the artefacts but not their fields; these are pedrl's choices,
each tied to the paper's symbol. Lists accept a lone string (a small model's
frequent shortcut); every field but the essential ones has a default, so a
reply that says little still reads.
"""
import dataclasses
import typing

import pydantic

from pedrl.agents.structured import Schema


def _as_list(value):
  if value is None:
    return []
  return [value] if isinstance(value, (str, dict)) else value


Texts = typing.Annotated[list[str], pydantic.BeforeValidator(_as_list)]


def _as_steps(value):
  """Steps; one written as a bare string (a small model's shortcut) is its role and goal."""
  return [{"role": v, "goal": v} if isinstance(v, str) else v for v in _as_list(value)]


class Summary(Schema):
  """p̂_t (section 3.4): the instance rewritten in four parts."""
  problem: str = ""
  student_state: str = ""
  deliverable: str = ""
  constraints: str = ""


class TaskState(Schema):
  """M1's one call: A_t = <ctx, goal, bar, cst> (eq. 5), p̂_t and the evidence E_t."""
  context: str
  goal: str
  success_criteria: str = ""
  bottlenecks: Texts = []
  constraints: Texts = []
  summary: Summary = Summary()
  evidence: Texts = []
  # Section 3.3, asked of M1 when it is given M_{t-1}: did the goal, a bottleneck or a
  # requirement change since the last turn? Unread or absent: changed (re-synthesize).
  changed: bool = True

  def key(self) -> tuple:
    """What re-synthesis watches (section 3.3): goal, bottlenecks and requirements."""
    norm = lambda t: " ".join(str(t).lower().split())
    return (norm(self.goal), tuple(map(norm, self.bottlenecks)), tuple(map(norm, self.constraints)))


class Solution(Schema):
  """The solve stage's reply: the agent's own solution of the problem and its final
  answer, never shown to the student (what its leak rule checks against)."""
  solution: str = ""
  answer: str


class Step(Schema):
  role: str  # E.g. understand, verify, locate error, derive next action, compose guidance.
  goal: str


class Template(Schema):
  """S_t (section 3.5): ordered step roles with step goals; `deliverable` is τ_t, the
  1-based number of the step whose output becomes the response (out of range: the last)."""
  steps: typing.Annotated[list[Step], pydantic.BeforeValidator(_as_steps),
                          pydantic.Field(min_length=1)]
  deliverable: int = 0

  def tau(self) -> int:
    """τ_t as a 0-based index."""
    return self.deliverable - 1 if 1 <= self.deliverable <= len(self.steps) else len(self.steps) - 1


def _readable_templates(value):
  """The candidates that validate; one malformed template does not discard the others."""
  out = []
  for t in _as_list(value):
    try:
      out.append(Template.model_validate(t))
    except pydantic.ValidationError:
      continue
  return out


class Candidates(Schema):
  """GENERATE's reply: K candidate templates (at least one readable)."""
  templates: typing.Annotated[list[Template], pydantic.BeforeValidator(_readable_templates),
                              pydantic.Field(min_length=1)]


class Simulation(Schema):
  """SIMULATE's shadow trace C̃: a dry run of the first steps and the deliverable it
  would give."""
  steps: Texts = []
  deliverable: str


class Evaluation(Schema):
  """EVALUATE's verifier: the four criteria of section 3.5 and what to change."""
  feasibility: bool
  coverage: bool
  consistency: bool
  economy: bool
  feedback: str = ""

  @property
  def passed(self) -> bool:
    return self.feasibility and self.coverage and self.consistency and self.economy


class StepOutput(Schema):
  """One executed step's intermediate result c_i (never shown to the user)."""
  output: str


class Check(Schema):
  """The monitor's LLM check of (c_i, s_i) against the contract Γ_t."""
  ok: bool
  issue: str = ""


class Reply(Schema):
  """M4's guidance after minimal rewriting, and the baselines' final replies."""
  response: str


@dataclasses.dataclass
class Memory:
  """M_t = <A_t, S_t, k_t, τ_t, summary(C_t)> (section 3.3), carried to the next turn."""
  state: TaskState | None
  template: Template
  pointer: int  # k_t: steps executed.
  deliverable: int  # τ_t, 0-based.
  summary: str  # summary(C_t): the step outputs, shortened.
  passed: bool = False  # Whether S_t passed EVALUATE when it was synthesized.
  answer: str | None = None  # The agent's own final answer (solve stage), for later turns.


@dataclasses.dataclass
class Candidate:
  """One template as an M2 round checked it."""
  template: Template
  simulation: Simulation | None  # The dry run C̃; None: no M2-sim, or unread.
  evaluation: Evaluation | None  # The verifier's reply; None: unread (the candidate fails).
  rules: list  # The contract's rule issues of the dry run's deliverable.
  passed: bool
  score: int  # Criteria met minus rule issues: REVISE works on the round's best.
  feedback: str  # What REVISE is told.


@dataclasses.dataclass
class StepCheck:
  """One monitoring of a step's output against Γ_t."""
  rules: str | None  # The contract's rule issue; None: none (or not the deliverable step).
  llm: Check | None  # The monitor's reply; None: not asked, or unread.


@dataclasses.dataclass
class StepRecord:
  """c_i of the trace C_t: a step of S_t, its (last) output, each check, its repairs."""
  role: str
  goal: str
  output: str
  checks: list[StepCheck] = dataclasses.field(default_factory=list)
  repairs: int = 0


@dataclasses.dataclass
class Trace:
  """One instance's turn, every stage's artefact (JSON-able via `to_dict`)."""
  task: str
  uid: int
  variant: str
  state: TaskState | None = None  # A_t, p̂_t and E_t as M1 read them (None: no M1, or unread).
  rounds: list[list[Candidate]] = dataclasses.field(default_factory=list)  # M2, per round.
  revisions: list[Template] = dataclasses.field(default_factory=list)  # Each REVISE's template.
  template: Template | None = None  # The S_t executed last.
  passed: bool = False  # Whether S_t passed EVALUATE (False: the last revision, unchecked).
  reused_template: bool = False  # A turn whose goal, bottleneck and requirements held.
  steps: list[StepRecord] = dataclasses.field(default_factory=list)  # M3: C_t, Δ, repairs.
  # Executions given up for a re-synthesis, in order (their last step is the one that failed).
  abandoned: list[list[StepRecord]] = dataclasses.field(default_factory=list)
  unresolved: list[int] = dataclasses.field(default_factory=list)  # Steps kept failing (0-based).
  repairs: int = 0
  resyntheses: int = 0
  answer: str | None = None  # The agent's own final answer (solve stage; None: none).
  deliverable: str = ""  # The output of step τ_t.
  response: str = ""  # y_t.
  fallbacks: dict = dataclasses.field(default_factory=dict)  # Stage -> stand-ins used.
  calls: int = 0

  def fallback(self, stage: str) -> None:
    self.fallbacks[stage] = self.fallbacks.get(stage, 0) + 1

  def to_dict(self) -> dict:
    return _plain(self)

  @classmethod
  def from_dict(cls, row: dict) -> "Trace":
    """The trace a record holds as JSON (`to_dict`), typed again; ValueError naming the
    field that does not read."""
    try:
      return _TRACE.validate_python(row)
    except pydantic.ValidationError as e:
      raise ValueError(f"not an agent trace: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}"
                       ) from None


_TRACE = pydantic.TypeAdapter(Trace)


def _plain(x):
  """JSON-able: dataclasses and pydantic models as dicts, recursively."""
  if isinstance(x, pydantic.BaseModel):
    return x.model_dump()
  if dataclasses.is_dataclass(x):
    return {f.name: _plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
  if isinstance(x, (list, tuple)):
    return [_plain(v) for v in x]
  if isinstance(x, dict):
    return {k: _plain(v) for k, v in x.items()}
  return x
