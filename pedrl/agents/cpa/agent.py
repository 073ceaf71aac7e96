"""CPA (paper 002, section 3): perceive (M1), synthesize a plan template (M2), execute it
under a contract monitor (M3), derive the output (M4); all instances stage by stage.

Every stage of every live instance is one backbone call per stage and round:
a local backbone samples them as one batch, an endpoint as concurrent
requests. Each stage answers in JSON (`state`), read leniently and re-asked
(`structured.ask`); a reply still unread after `rounds` rounds gets an explicit
stand-in, counted in the instance's `Trace.fallbacks` (so a backbone that
answers garbage still yields a response for every instance):

  m1        no state: the contract of paper 002's table 1 stands in for A_t
  generate  one template: [derive the deliverable], the deliverable its step
  simulate  the candidate is evaluated without a dry run
  evaluate  the candidate fails with no feedback
  revise    the template is kept
  execute   the step's output is the reply's raw text (the monitor then judges it)
  monitor   the step passes the LLM check (the rule checks still apply)
  finish    M4 keeps the draft as it is
  format    a structured deliverable holds nothing the harness reads: y_t is the draft

Where paper 002 leaves a choice open, pedrl decides (CPASettings documents each):
GENERATE asks for K candidates in one call; round 0 simulates and evaluates all
K and returns the first that passes; later rounds revise the best one (most
criteria met) and evaluate it; after J revisions the last one is executed
unchecked, as algorithm 1's S^(J). The monitor checks every step with the
LLM verifier and the deliverable step also with the contract's rules; a step
still failing after `max_repairs` repairs sends the instance back to M2
(at most `max_resyntheses` times, then the output stands, flagged).
"""
import dataclasses
import json

from pedrl.agents import structured
from pedrl.agents.structured import user_turn
from pedrl.agents.cpa import contracts
from pedrl.agents.cpa.state import (Candidate, Candidates, Check, Evaluation, Memory, Reply,
                                    Simulation, Step, StepCheck, StepOutput, StepRecord,
                                    TaskState, Template, Trace)
from pedrl.rewards import asking


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
  # Table 3's ablations: each False removes its module.
  m1: bool = True  # False: no state; the task contract stands in for A_t.
  m2_loop: bool = True  # False: one template, generated once, never evaluated or revised.
  m2_sim: bool = True  # False: EVALUATE judges the template without a dry run.
  m3_monitor: bool = True  # False: no checks, no repairs, no re-synthesis.
  m4: bool = True  # False: y_t is the last step's output as it is.

  def __post_init__(self):
    for name in ("k", "sim_steps", "max_steps", "rounds"):
      if getattr(self, name) < 1:
        raise ValueError(f"cpa.{name}={getattr(self, name)} must be at least 1")
    for name in ("j", "max_repairs", "max_resyntheses"):
      if getattr(self, name) < 0:
        raise ValueError(f"cpa.{name}={getattr(self, name)} must not be negative")


# Table 3's rows: variant -> the settings it changes.
ABLATIONS = {"full": {}, "no_m1": {"m1": False}, "no_m2_loop": {"m2_loop": False},
             "no_m2_sim": {"m2_sim": False}, "no_m3_monitor": {"m3_monitor": False},
             "no_m4": {"m4": False}}
FALLBACK_TEMPLATE = Template(steps=[Step(role="derive deliverable",
                                         goal="produce the deliverable directly")],
                             deliverable=1)


@dataclasses.dataclass
class Instance:
  """One turn to answer: the task input as rendered (a MathTutorBench prompt, a
  dialogue's view), the task whose contract applies, the example the rule checks
  read (its reference solution), and the memory of the instance's last turn."""
  uid: int
  task: str
  text: str
  example: dict = dataclasses.field(default_factory=dict)
  memory: Memory | None = None


class _Work:
  """An instance's running state through the stages."""

  def __init__(self, inst: Instance, variant: str):
    self.inst, self.contract = inst, contracts.contract(inst.task)
    self.trace = Trace(inst.task, inst.uid, variant)
    self.state: TaskState | None = None
    self.template: Template | None = None
    self.outputs: list[str] = []
    self.failed = False  # A step failed its repairs: back to M2.

  def view(self) -> dict:
    """The variables every stage prompt shares."""
    c = self.contract
    return dict(task_input=self.inst.text, state=self.state, deliverable=c.deliverable,
                constraints="; ".join(self.constraints()))

  def constraints(self) -> list[str]:
    """Γ_t's constraints (eq. 7): the state's, else the contract's."""
    return list(self.state.constraints) if self.state and self.state.constraints else list(
        self.contract.constraints)

  def goal(self) -> str:
    return self.state.goal if self.state else self.contract.deliverable


class CPA:
  """Runs turns of many instances on one backbone (`pedrl.agents.backbone`)."""

  def __init__(self, backbone, settings: CPASettings = CPASettings(), variant: str = "full"):
    self.backbone, self.s, self.variant = backbone, settings, variant
    self.stats = asking.AskStats()

  def _ask(self, works, convs, schema, stage: str, raw: bool = False) -> list:
    """One structured stage for `works` (a work may appear more than once); with
    `raw`, also the last reply texts."""
    if not works:
      return ([], []) if raw else []
    steps = []
    for w in works:  # Each instance numbers its own calls: its random stream.
      steps.append(w.trace.calls)
      w.trace.calls += 1
    out, texts = structured.ask(self.backbone, convs, schema, stage,
                                [w.inst.uid for w in works], steps, self.s.rounds, self.stats)
    for w, a in zip(works, out):
      if a is None:
        w.trace.fallback(stage)
    return (out, texts) if raw else out

  # -- M1 -----------------------------------------------------------------------------------

  def perceive(self, works):
    """(A_t, p̂_t, E_t) in one call per instance (eq. 1, 5)."""
    if not self.s.m1:
      return
    out = self._ask(works, [user_turn("cpa/perceive", **w.view()) for w in works], TaskState, "m1")
    for w, state in zip(works, out):
      w.state = state
      w.trace.state = state.model_dump() if state else None

  # -- M2 -----------------------------------------------------------------------------------

  def synthesize(self, works):
    """S_t for each work by algorithm 1: generate, then simulate-evaluate-revise."""
    cands = self._ask(works, [user_turn("cpa/generate", k=self.s.k if self.s.m2_loop else 1,
                                    max_steps=self.s.max_steps, **w.view()) for w in works],
                      Candidates, "generate")
    pool = {}
    for w, c in zip(works, cands):
      kept = [self._cut(t) for t in c.templates[:self.s.k if self.s.m2_loop else 1]] if c else []
      pool[id(w)] = kept or [FALLBACK_TEMPLATE]
    if not self.s.m2_loop:
      for w in works:
        self._choose(w, pool[id(w)][0], passed=False)
      return
    open_ = list(works)
    for j in range(self.s.j + 1):
      if j == self.s.j:  # Algorithm 1 returns S^(J) after J revisions, unchecked.
        for w in open_:
          self._choose(w, pool[id(w)][0], passed=False)
        return
      verdicts = self._check(open_, pool)
      revise = []
      for w in open_:
        results = verdicts[id(w)]
        w.trace.rounds.append([c for _, c in results])
        first = next((t for t, c in results if c.passed), None)
        if first is not None:
          self._choose(w, first, passed=True)
        else:
          best, checked = max(results, key=lambda tc: tc[1].score)
          pool[id(w)] = [best]
          revise.append((w, checked))
      if not revise:
        return
      revised = self._ask([w for w, _ in revise], [
          user_turn("cpa/revise", template=pool[id(w)][0], feedback=c.feedback, **w.view())
          for w, c in revise], Template, "revise")
      for (w, _), t in zip(revise, revised):
        if t is not None:
          pool[id(w)] = [self._cut(t)]
        w.trace.revisions.append(pool[id(w)][0].model_dump())
      open_ = [w for w, _ in revise]

  def _cut(self, t: Template) -> Template:
    if len(t.steps) <= self.s.max_steps:
      return t
    tau = min(t.tau(), self.s.max_steps - 1)
    return Template(steps=t.steps[:self.s.max_steps], deliverable=tau + 1)

  def _check(self, works, pool) -> dict:
    """Per work, per template of its pool: (template, Candidate): dry run (up to
    sim_steps steps), verifier, and the contract's rules on the dry run's deliverable."""
    flat = [(w, t) for w in works for t in pool[id(w)]]
    sims = [None] * len(flat)
    if self.s.m2_sim:
      sims = self._ask([w for w, _ in flat], [
          user_turn("cpa/simulate", template=t, steps=min(self.s.sim_steps, len(t.steps)),
                **w.view()) for w, t in flat], Simulation, "simulate")
    sims = [s.model_copy(update={"steps": s.steps[:self.s.sim_steps]}) if s else None
            for s in sims]  # A dry run longer than asked is cut to its first sim_steps.
    rules = [self._rules(w, s.deliverable) if s else () for (w, _), s in zip(flat, sims)]
    evals = self._ask([w for w, _ in flat], [
        user_turn("cpa/evaluate", template=t, simulation=s, rules=r, **w.view())
        for (w, t), s, r in zip(flat, sims, rules)], Evaluation, "evaluate")
    out = {id(w): [] for w in works}
    for (w, t), s, r, e in zip(flat, sims, rules, evals):
      criteria = (e.feasibility, e.coverage, e.consistency, e.economy) if e else (False,) * 4
      feedback = "; ".join(filter(None, [e.feedback if e else "",
                                         *(f"rule check failed: {x}" for x in r)]))
      out[id(w)].append((t, Candidate(
          t.model_dump(), s.model_dump() if s else None, e.model_dump() if e else None, list(r),
          passed=bool(e and e.passed and not r), score=sum(criteria) - len(r),
          feedback=feedback or "the plan does not reach the deliverable")))
    return out

  def _rules(self, w, text: str) -> tuple:
    """The contract's deterministic checks on a would-be deliverable, as M4 would emit it."""
    shown = contracts.formatted(w.inst.task, text)
    return contracts.rule_issues(w.inst.task, shown or "", w.inst.example)

  def _choose(self, w, t: Template, passed: bool):
    w.template, w.trace.passed = t, passed
    w.trace.template = t.model_dump()

  # -- M3 -----------------------------------------------------------------------------------

  def execute(self, works):
    """C_t step by step for all works at once; each step is checked against Γ_t and
    repaired up to max_repairs times; works whose step still fails are marked."""
    for w in works:
      w.outputs, w.failed = [], False
      w.trace.steps = []
    i = 0
    while True:
      live = [w for w in works if not w.failed and i < len(w.template.steps)]
      if not live:
        return
      outs = self._step(live, i, {})
      for w, o in zip(live, outs):
        w.trace.steps.append(StepRecord(w.template.steps[i].role, w.template.steps[i].goal, o))
      issues = self._monitor(live, i, outs)
      for r in range(self.s.max_repairs + 1):
        bad = [(w, o, x) for w, o, x in zip(live, outs, issues) if x]
        if not bad:
          break
        if r == self.s.max_repairs:
          for w, _, _ in bad:
            w.failed = True
          break
        ws = [w for w, _, _ in bad]
        fixed = self._step(ws, i, {id(w): x for w, _, x in bad})
        for w, o in zip(ws, fixed):
          w.trace.steps[i].repairs += 1
          w.trace.repairs += 1
          w.trace.steps[i].output = o
        new = self._monitor(ws, i, fixed)
        at = {id(w): (o, x) for w, o, x in zip(ws, fixed, new)}
        outs = [at.get(id(w), (o, None))[0] for w, o in zip(live, outs)]
        issues = [at[id(w)][1] if id(w) in at else None for w in live]
      for w, o in zip(live, outs):
        w.outputs.append(o)
      i += 1

  def _step(self, works, i: int, issues: dict) -> list[str]:
    convs = []
    for w in works:
      final = i == w.template.tau()
      convs.append(user_turn("cpa/execute", template=w.template, done=w.outputs, index=i,
                         step=w.template.steps[i], final=final, issue=issues.get(id(w)),
                         **w.view()))
    got, texts = self._ask(works, convs, StepOutput, "repair" if issues else "execute",
                           raw=True)
    return [g.output.strip() if g else t.strip() for g, t in zip(got, texts)]

  def _monitor(self, works, i: int, outs) -> list:
    """Δ per work: None when step i's output meets the contract, else the issue."""
    if not self.s.m3_monitor:
      return [None] * len(works)
    issues = []
    for w, o in zip(works, outs):
      rules = self._rules(w, o) if i == w.template.tau() else ()
      issues.append(None if o and not rules else
                    "the output is empty" if not o else "breaks: " + ", ".join(rules))
    llm = [None] * len(works)
    if self.s.monitor_llm:
      llm = self._ask(works, [
          user_turn("cpa/monitor", goal=w.goal(), constraints="; ".join(w.constraints()),
                step=w.template.steps[i], output=o, final=i == w.template.tau(),
                deliverable=w.contract.deliverable) for w, o in zip(works, outs)], Check, "monitor")
    out = []
    for w, o, rule, check in zip(works, outs, issues, llm):
      issue = rule or (None if check is None or check.ok else check.issue or "the check failed")
      w.trace.steps[i].checks.append(StepCheck(rule, check.model_dump() if check else None))
      out.append(issue)
    return out

  # -- M4 -----------------------------------------------------------------------------------

  def derive(self, works):
    """y_t from the deliverable step: structured ones formatted, guidance rewritten
    minimally (one call), then formatted (eq. 8)."""
    for w in works:
      tau = min(w.template.tau(), len(w.outputs) - 1)
      w.trace.deliverable = w.outputs[tau] if w.outputs else ""
    if not self.s.m4:  # Direct output: the last step's text as it is.
      for w in works:
        w.trace.response = w.outputs[-1] if w.outputs else ""
      return
    guide = [w for w in works if w.contract.kind == "guidance"]
    drafts = {id(w): w.trace.deliverable for w in works}
    rewritten = self._ask(guide, [user_turn("cpa/finish", draft=drafts[id(w)], **w.view())
                                  for w in guide], Reply, "finish")
    for w, r in zip(guide, rewritten):
      if r is not None and r.response.strip():
        drafts[id(w)] = r.response.strip()
    for w in works:
      y = contracts.formatted(w.inst.task, drafts[id(w)])
      if y is None:
        w.trace.fallback("format")
        y = drafts[id(w)]
      w.trace.response = y

  # -- A turn ----------------------------------------------------------------------------------

  def run(self, instances) -> list[Trace]:
    """One turn of every instance; Trace per instance (its `response` is y_t)."""
    works = [_Work(inst, self.variant) for inst in instances]
    self.perceive(works)
    fresh = []
    for w in works:
      m = w.inst.memory
      if m is not None and w.state is not None and m.state is not None and (
          m.state.key() == w.state.key()):
        self._choose(w, m.template, passed=True)
        w.trace.reused_template = True
      else:
        fresh.append(w)
    self.synthesize(fresh)
    self.execute(works)
    for _ in range(self.s.max_resyntheses if self.s.m3_monitor else 0):
      again = [w for w in works if w.failed]
      if not again:
        break
      for w in again:
        w.trace.resyntheses += 1
      self.synthesize(again)
      self.execute(again)
    self.derive(works)
    return [w.trace for w in works]

  @staticmethod
  def memory(trace: Trace) -> Memory:
    """M_t after a turn, for the instance's next turn."""
    state = TaskState.model_validate(trace.state) if trace.state else None
    t = Template.model_validate(trace.template)
    summary = " | ".join(s.output[:200] for s in trace.steps)
    return Memory(state, t, len(trace.steps), t.tau(), summary)


def settings_for(variant: str, **overrides) -> CPASettings:
  """The settings of a table 3 row (`ABLATIONS`), with `overrides` on top."""
  if variant not in ABLATIONS:
    raise ValueError(f"unknown CPA variant {variant!r}; the variants: {', '.join(ABLATIONS)}")
  return CPASettings(**{**ABLATIONS[variant], **overrides})


def dumps(trace: Trace) -> str:
  return json.dumps(trace.to_dict(), ensure_ascii=False)
