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
  repair    the same, for a repaired output
  monitor   the step passes the LLM check (the rule checks still apply)
  finish    M4 keeps the draft as it is (also when the rewrite breaks a rule the draft keeps)
  format    a structured deliverable holds nothing the harness reads (a verdict whose
            meaning is not clear, `contracts.formatted`): y_t is the draft
  solve     no answer of its own: the rules do not check for a stated answer this turn
  candidates  GENERATE gave fewer than K readable templates: the search goes on with those
  stop      (counted by pedrl.agents.bench.AgentPolicy) the task's stop strings cut y_t:
            the harness reads what precedes the first one (the trace keeps y_t whole)

Where paper 002 leaves a choice open, pedrl decides (CPASettings documents each):
GENERATE asks for K candidates in one call; round 0 simulates and evaluates all
K and returns the first that passes; later rounds revise the best one (most
criteria met) and evaluate it; after J revisions the last one is executed
unchecked, as algorithm 1's S^(J). The monitor checks every step with the
LLM verifier and the deliverable step also with the contract's rules; a step
still failing after `max_repairs` repairs sends the instance back to M2, told
why (at most `max_resyntheses` times; after that the step's output stands,
listed in `Trace.unresolved`, and execution goes on to the deliverable).
Γ_t's constraints are the contract's and M1's together. M2 and M3 see the task
as given beside A_t and p̂_t (`show_input`; the paper conditions them on A_t and
p̂_t alone, and a small backbone's summary drops the numbers and the student's
steps that the tasks need).

The information boundary: an instance is the task input as its prompt shows it
(the rendered MathTutorBench prompt, a dialogue's tutor view), its task, its
memory and the task's stop strings (the task file's, which every policy is given);
nothing else of the example reaches the agent. The rule "states the
answer" needs the problem's answer, which no tutoring prompt shows: with
`answer_source="solve"` a solve stage (one call per guidance instance, counted
like every stage; a dialogue solves once and carries the answer in M_t) asks the
backbone for the final answer and the rules check against that; with "none"
the rule is left out of the agent (the LLM monitor still holds Γ_t's "do not
state the final answer"), and only BVR, the metric, reads the reference.
"""
from collections.abc import Sequence
import dataclasses
import json

from pedrl.agents import structured
from pedrl.agents.structured import user_turn
from pedrl.agents.cpa import contracts
from pedrl.agents.cpa.state import (Candidate, Candidates, Check, Evaluation, Memory, Reply,
                                    Simulation, Solution, Step, StepCheck, StepOutput,
                                    StepRecord, TaskState, Template, Trace)
from pedrl.mathtutorbench_rules import constraints
from pedrl.rewards import asking
# Re-exported: defined there, importable without JAX.
from pedrl.agents.settings import ANSWER_SOURCES, CPASettings, ABLATIONS


FALLBACK_TEMPLATE = Template(steps=[Step(role="derive deliverable",
                                         goal="produce the deliverable directly")],
                             deliverable=1)


@dataclasses.dataclass
class Instance:
  """One turn to answer: the task input exactly as the prompt shows it (a rendered
  MathTutorBench prompt, a dialogue's tutor view), the task whose contract applies,
  the memory of the instance's last turn, and the stop strings every policy of the
  task is given. Nothing else: no reference solution, no answer, no field the prompt
  does not show."""
  uid: int
  task: str
  text: str
  memory: Memory | None = None
  # The task's stop strings, which cut y_t after the agent (the benchmark's; a dialogue
  # has none): the rule checks judge a would-be reply as the cut leaves it.
  stop: tuple[str, ...] = ()


class _Work:
  """An instance's running state through the stages."""

  def __init__(self, inst: Instance, variant: str, show_input: bool) -> None:
    self.inst, self.contract = inst, contracts.contract(inst.task)
    self.show_input = show_input
    self.trace = Trace(inst.task, inst.uid, variant)
    self.state: TaskState | None = None
    self.pool: list[Template] = []  # M2's templates under evaluation.
    self.template: Template | None = None
    self.outputs: list[str] = []
    self.failed = False  # A step failed its repairs: back to M2.
    self.issue: str | None = None  # Why, told to GENERATE.
    self.answer: str | None = None  # The agent's own final answer (solve stage).

  def view(self) -> dict:
    """The variables every stage prompt shares."""
    shown = self.state is None or self.show_input
    return dict(task_input=self.inst.text if shown else "", state=self.state,
                deliverable=self.contract.deliverable, constraints="; ".join(self.constraints()))

  def constraints(self) -> list[str]:
    """Γ_t's constraints (eq. 7): the contract's, then M1's that it lacks."""
    out = list(self.contract.constraints)
    for c in self.state.constraints if self.state else ():
      if c.strip() and c not in out:
        out.append(c)
    return out

  def goal(self) -> str:
    """Γ_t's goal (eq. 7): the turn objective with its success criteria."""
    if self.state is None:
      return self.contract.deliverable
    return " ".join(filter(None, [self.state.goal, self.state.success_criteria and
                                  f"(success: {self.state.success_criteria})"]))


class CPA:
  """Runs turns of many instances on one backbone (`pedrl.agents.backbone`)."""

  def __init__(self, backbone, settings: CPASettings = CPASettings(),
               variant: str = "full") -> None:
    self.backbone, self.s, self.variant = backbone, settings, variant
    self.stats = asking.AskStats()

  def _asked(self, works, convs, schema, stage: str) -> tuple[list, list]:
    """One structured stage for `works` (a work may appear more than once): each
    reply read as `schema` or None (a stand-in, counted), and the last raw texts."""
    if not works:
      return [], []
    steps = []
    for w in works:  # Each instance numbers its own calls: its random stream.
      steps.append(w.trace.calls)
      w.trace.calls += 1
    out, texts = structured.ask(self.backbone, convs, schema, stage,
                                [w.inst.uid for w in works], steps, self.s.rounds, self.stats)
    for w, a in zip(works, out):
      if a is None:
        w.trace.fallback(stage)
    return out, texts

  def _ask(self, works, convs, schema, stage: str) -> list:
    return self._asked(works, convs, schema, stage)[0]

  # -- M1 -----------------------------------------------------------------------------------

  def perceive(self, works: Sequence[_Work]) -> None:
    """(A_t, p̂_t, E_t) in one call per instance (eq. 1, 5), given M_{t-1}."""
    if not self.s.m1:
      return
    convs = []
    for w in works:
      m = w.inst.memory
      convs.append(user_turn("cpa/perceive", memory=m if m and m.state else None, **w.view()))
    for w, state in zip(works, self._ask(works, convs, TaskState, "m1")):
      w.state = w.trace.state = state

  # -- The answer a leak is judged against ---------------------------------------------------

  def solve(self, works: Sequence[_Work]) -> None:
    """Per guidance instance, the final answer the backbone derives from the task input
    alone (answer_source="solve"), what "states_answer" checks; a dialogue's later turns
    reuse M_{t-1}'s. None (counted): unread or no number, the rule unchecked."""
    if self.s.answer_source != "solve":
      return
    ask = []
    for w in works:
      m = w.inst.memory
      if w.contract.kind != "guidance":
        continue
      if m is not None and m.answer is not None:
        w.answer = w.trace.answer = m.answer
      else:
        ask.append(w)
    got = self._ask(ask, [user_turn("cpa/solve", task_input=w.inst.text) for w in ask],
                    Solution, "solve")
    for w, g in zip(ask, got):
      w.answer = w.trace.answer = constraints.final_answer(g.answer) if g else None
      if g is not None and w.answer is None:
        w.trace.fallback("solve")

  # -- M2 -----------------------------------------------------------------------------------

  def synthesize(self, works: Sequence[_Work]) -> None:
    """S_t for each work by algorithm 1: generate, then simulate-evaluate-revise."""
    k = self.s.k if self.s.m2_loop else 1
    cands = self._ask(works, [user_turn("cpa/generate", k=k, max_steps=self.s.max_steps,
                                        issue=w.issue, **w.view()) for w in works],
                      Candidates, "generate")
    for w, c in zip(works, cands):
      w.pool = [self._cut(t) for t in c.templates[:k]] if c else [FALLBACK_TEMPLATE]
      if c and len(c.templates) < k:  # Fewer than K readable: the search is narrower.
        w.trace.fallback("candidates")
    if not self.s.m2_loop:
      for w in works:
        self._choose(w, w.pool[0], passed=False)
      return
    open_ = list(works)
    for _ in range(self.s.j):
      revise = []
      for w, checked in zip(open_, self._check(open_)):
        w.trace.rounds.append(checked)
        first = next((c for c in checked if c.passed), None)
        if first is not None:
          self._choose(w, first.template, passed=True)
        else:
          revise.append((w, max(checked, key=lambda c: c.score)))
      if not revise:
        return
      revised = self._ask([w for w, _ in revise], [
          user_turn("cpa/revise", template=best.template, feedback=best.feedback, **w.view())
          for w, best in revise], Template, "revise")
      for (w, best), t in zip(revise, revised):
        w.pool = [best.template if t is None else self._cut(t)]
        w.trace.revisions.append(w.pool[0])
      open_ = [w for w, _ in revise]
    for w in open_:  # Algorithm 1 returns S^(J) after J revisions, unchecked.
      self._choose(w, w.pool[0], passed=False)

  def _cut(self, t: Template) -> Template:
    """At most max_steps steps, the deliverable step among them."""
    if len(t.steps) <= self.s.max_steps:
      return t
    tau = t.tau()
    if tau < self.s.max_steps:
      return Template(steps=t.steps[:self.s.max_steps], deliverable=tau + 1)
    return Template(steps=t.steps[:self.s.max_steps - 1] + [t.steps[tau]],
                    deliverable=self.s.max_steps)

  def _check(self, works) -> list[list[Candidate]]:
    """Per work, its pool's templates checked: dry run (up to sim_steps steps), the
    verifier, and the contract's rules on the dry run's deliverable."""
    flat = [(w, t) for w in works for t in w.pool]
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
      out[id(w)].append(Candidate(
          t, s, e, list(r), passed=bool(e and e.passed and not r), score=sum(criteria) - len(r),
          feedback=feedback or "the plan does not reach the deliverable"))
    return [out[id(w)] for w in works]

  def _rules(self, w, text: str) -> tuple:
    """The contract's deterministic checks on a would-be deliverable, as M4 would emit it
    (a structured one M4 cannot read is checked as written: unparsable) and as the task's
    stop strings then cut it: what the harness reads ("Problem: How many?" is empty)."""
    shown, _ = self._emitted(w, text)
    return contracts.rule_issues(w.inst.task, contracts.harness_cut(shown, w.inst.stop),
                                 w.answer)

  @staticmethod
  def _emitted(w, text: str) -> tuple[str, bool]:
    """(y_t as M4 emits `text`, whether it was formatted): the structured part the harness
    reads (none found: `text` as written), guidance laid out as one paragraph where the
    task's stop strings end a reply at a line break, so it is scored whole."""
    y = contracts.formatted(w.inst.task, text)
    formatted = y is not None
    y = y if formatted else text
    if w.contract.kind == "guidance":
      y = contracts.within_stops(y, w.inst.stop)
    return y, formatted

  def _choose(self, w, t: Template, passed: bool) -> None:
    w.template = w.trace.template = t
    w.trace.passed = passed

  # -- M3 -----------------------------------------------------------------------------------

  def execute(self, works: Sequence[_Work]) -> None:
    """C_t step by step for all works at once. Each step is checked against Γ_t and
    repaired up to max_repairs times; a step still failing marks its work for
    re-synthesis while it has one left, else stands, listed as unresolved."""
    for w in works:
      if w.trace.steps:
        w.trace.abandoned.append(w.trace.steps)
      w.outputs, w.failed, w.trace.steps = [], False, []
    i = 0
    while live := [w for w in works if not w.failed and i < len(w.template.steps)]:
      outs = self._step(live, i, [None] * len(live))
      for w, o in zip(live, outs):
        w.trace.steps.append(StepRecord(w.template.steps[i].role, w.template.steps[i].goal, o))
      issues = self._monitor(live, i, outs)
      todo = [n for n, x in enumerate(issues) if x]  # Indices into live still failing.
      for _ in range(self.s.max_repairs):
        if not todo:
          break
        ws = [live[n] for n in todo]
        fixed = self._step(ws, i, [issues[n] for n in todo])
        for n, w, o in zip(todo, ws, fixed):
          outs[n] = w.trace.steps[i].output = o
          w.trace.steps[i].repairs += 1
          w.trace.repairs += 1
        for n, x in zip(todo, self._monitor(ws, i, fixed)):
          issues[n] = x
        todo = [n for n in todo if issues[n]]
      for n in todo:
        w = live[n]
        if w.trace.resyntheses < self.s.max_resyntheses:
          w.failed, w.issue = True, f"step {i + 1} [{w.template.steps[i].role}]: {issues[n]}"
        else:
          w.trace.unresolved.append(i)
      for w, o in zip(live, outs):
        if not w.failed:
          w.outputs.append(o)
      i += 1

  def _step(self, works, i: int, issues: list) -> list[str]:
    """Step i's output per work; an issue asks for a repair of the previous output."""
    convs = [user_turn("cpa/execute", template=w.template, done=w.outputs, index=i,
                       step=w.template.steps[i], final=i == w.template.tau(), issue=x,
                       **w.view()) for w, x in zip(works, issues)]
    got, texts = self._asked(works, convs, StepOutput, "repair" if any(issues) else "execute")
    return [g.output.strip() if g else t.strip() for g, t in zip(got, texts)]

  def _monitor(self, works, i: int, outs) -> list:
    """Δ per work: None when step i's output meets the contract, else the issue. The
    rules apply to the deliverable step; the LLM check to every step."""
    if not self.s.m3_monitor:
      return [None] * len(works)
    rules = []
    for w, o in zip(works, outs):
      broken = self._rules(w, o) if o and i == w.template.tau() else ()
      if not o:
        rules.append("the output is empty")
      else:
        rules.append("breaks: " + ", ".join(broken) if broken else None)
    llm = [None] * len(works)
    if self.s.monitor_llm:
      llm = self._ask(works, [
          user_turn("cpa/monitor", goal=w.goal(), constraints="; ".join(w.constraints()),
                    step=w.template.steps[i], output=o, final=i == w.template.tau(),
                    deliverable=w.contract.deliverable) for w, o in zip(works, outs)],
          Check, "monitor")
    out = []
    for w, rule, check in zip(works, rules, llm):
      w.trace.steps[i].checks.append(StepCheck(rule, check))
      if rule is None and check is not None and not check.ok:
        rule = check.issue or "the check failed"
      out.append(rule)
    return out

  # -- M4 -----------------------------------------------------------------------------------

  def derive(self, works: Sequence[_Work]) -> None:
    """y_t = f_out(C_t, S_t, A_t) from the deliverable step (eq. 8, section 3.7):
    structured ones formatted, guidance rewritten minimally (one call that sees A_t, S_t,
    C_t and the dialogue; kept only if it breaks no rule the draft keeps), then
    formatted. The rules judge both texts as the task's stop strings will cut them."""
    for w in works:
      w.trace.deliverable = w.outputs[w.template.tau()]
    if not self.s.m4:  # Direct output: the deliverable step's text as it is.
      for w in works:
        w.trace.response = w.trace.deliverable
      return
    drafts = {id(w): w.trace.deliverable for w in works}
    guide = [w for w in works if w.contract.kind == "guidance"]
    rewritten = self._ask(guide, [self._finish_prompt(w, drafts[id(w)]) for w in guide],
                          Reply, "finish")
    for w, r in zip(guide, rewritten):
      if r is None:
        continue  # Unread: counted by _ask.
      # Kept only if every rule it breaks the draft breaks too: breaking fewer rules is no
      # licence to break another (a shorter reply that states the answer). An empty
      # rewrite breaks "empty", so it is refused (and counted) unless the draft is empty.
      if set(self._rules(w, r.response)) <= set(self._rules(w, drafts[id(w)])):
        drafts[id(w)] = r.response.strip()
      else:
        w.trace.fallback("finish")
    for w in works:
      w.trace.response, formatted = self._emitted(w, drafts[id(w)])
      if not formatted:
        w.trace.fallback("format")

  @staticmethod
  def _finish_prompt(w, draft: str) -> list[dict]:
    """M4's rewrite is y_t = f_out(C_t, S_t, A_t) (eq. 8), "to fit the dialogue context"
    (section 3.7): it sees A_t (with p̂_t and E_t), S_t, every executed step's output, and
    the dialogue itself, shown even where M2 and M3 see A_t and p̂_t only (show_input=False):
    a rewrite that fits a dialogue it cannot read would fit a summary of it."""
    return user_turn("cpa/finish", draft=draft, template=w.template, done=w.outputs,
                     **{**w.view(), "task_input": w.inst.text})

  # -- A turn ----------------------------------------------------------------------------------

  def run(self, instances: Sequence[Instance]) -> list[Trace]:
    """One turn of every instance; Trace per instance (its `response` is y_t)."""
    works = [_Work(inst, self.variant, self.s.show_input) for inst in instances]
    self.perceive(works)
    self.solve(works)
    fresh = []
    for w in works:
      if self._unchanged(w):
        self._choose(w, w.inst.memory.template, passed=w.inst.memory.passed)
        w.trace.reused_template = True
      else:
        fresh.append(w)
    self.synthesize(fresh)
    self.execute(works)
    while again := [w for w in works if w.failed]:  # At most max_resyntheses rounds.
      for w in again:
        w.trace.resyntheses += 1
        w.trace.reused_template = False
      self.synthesize(again)
      self.execute(again)
    self.derive(works)
    return [w.trace for w in works]

  @staticmethod
  def _unchanged(w) -> bool:
    """Section 3.3: the last turn's template serves this one when its goal, bottlenecks
    and requirements held: M1 says so, or they read the same."""
    m = w.inst.memory
    if m is None or m.state is None or w.state is None:
      return False
    return not w.state.changed or m.state.key() == w.state.key()

  @staticmethod
  def memory(trace: Trace) -> Memory:
    """M_t after a turn, for the instance's next turn."""
    summary = " | ".join(s.output[:200] for s in trace.steps)
    return Memory(trace.state, trace.template, len(trace.steps), trace.template.tau(), summary,
                  trace.passed, trace.answer)


def dumps(trace: Trace) -> str:
  return json.dumps(trace.to_dict(), ensure_ascii=False)
