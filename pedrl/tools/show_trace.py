r"""Prints one agent trace of a MathTutorBench job (pedrl.experiments.cpa) readably.

  python -m pedrl.tools.show_trace /tmp/cpa/cpa/seed42 --task=pedagogy_following --index=0

The trace is the record's: M1's state, every round of candidate templates with
their dry runs, evaluations and rule checks, the revisions, the executed
template, each step's output with its checks and repairs, and the reply.
"""
import json

from absl import app, flags

from pedrl import cli, paths
from pedrl.agents.cpa.state import StepRecord, Trace
from pedrl.eval import shards
from pedrl.eval.records import BenchRecord

flags.DEFINE_string("task", None, "The task (default: the first task of the job).")
flags.DEFINE_integer("index", 0, "The example's index in the task (the harness's order).")
FLAGS = flags.FLAGS


def _short(value, width: int = 160) -> str:
  text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
  text = " ".join(text.split())
  return text if len(text) <= width else text[:width - 1] + "…"


def _steps(steps: list[StepRecord]) -> list[str]:
  lines = []
  for n, s in enumerate(steps, 1):
    lines.append(f"  step {n} [{s.role}] {_short(s.goal, 80)}")
    lines.append(f"    -> {_short(s.output)}")
    for c in s.checks:
      llm = c.llm.model_dump() if c.llm is not None else None
      lines.append(f"    check: rules {c.rules or 'ok'}, llm {_short(llm, 100)}")
    if s.repairs:
      lines.append(f"    repairs: {s.repairs}")
  return lines


def render(record: BenchRecord) -> str:
  t = Trace.from_dict(record.trace)
  lines = [f"{record.task} #{record.index} ({t.variant}): {t.calls} calls, "
           f"fallbacks {t.fallbacks or 'none'}"]
  if s := t.state:
    lines += ["M1 state:", f"  goal: {_short(s.goal)}", f"  context: {_short(s.context)}",
              f"  bottlenecks: {_short(s.bottlenecks)}",
              f"  constraints: {_short(s.constraints)}", f"  summary: {_short(s.summary)}"]
  if t.answer is not None:
    lines.append(f"own answer (solve stage, what the leak rule checks): {t.answer}")
  roles = lambda template: _short([st.role for st in template.steps])
  for n, candidates in enumerate(t.rounds):
    lines.append(f"M2 round {n}:")
    for c in candidates:
      lines.append(f"  {'PASS' if c.passed else 'fail'} score {c.score}: {roles(c.template)}"
                   f" rules {c.rules or 'ok'}; {_short(c.feedback, 100)}")
  for n, r in enumerate(t.revisions):
    lines.append(f"M2 revision {n + 1}: {roles(r)}")
  if t.template:
    steps, d = t.template.steps, t.template.deliverable
    lines.append(f"S_t ({'passed' if t.passed else 'unchecked'}"
                 f"{', reused' if t.reused_template else ''}), deliverable step "
                 f"{d if 1 <= d <= len(steps) else len(steps)}")
  for n, steps in enumerate(t.abandoned, 1):
    lines.append(f"execution {n}, given up for a re-synthesis:")
    lines += _steps(steps)
  if t.abandoned:
    lines.append("execution after re-synthesis:")
  lines += _steps(t.steps)
  if t.unresolved:
    lines.append(f"still failing after repairs (kept): steps "
                 f"{', '.join(str(i + 1) for i in t.unresolved)}")
  lines += [f"repairs {t.repairs}, re-syntheses {t.resyntheses}", f"reply: {record.response}"]
  return "\n".join(lines)


def main(argv: list[str]) -> None:
  if len(argv) != 2:
    raise app.UsageError("usage: python -m pedrl.tools.show_trace WORKDIR --task=T --index=I")
  argv = [argv[0], paths.find(argv[1])]  # Found as config paths are.
  records, _ = shards.merge(argv[1])
  if not records:
    raise app.UsageError(f"{argv[1]} holds no records (is it WORKDIR/<method>/seed<seed>?)")
  task = FLAGS.task or records[0].task
  found = [r for r in records if r.task == task and r.index == FLAGS.index]
  if not found:
    raise app.UsageError(f"{argv[1]} has no record of task {task} at index {FLAGS.index}")
  if found[0].trace is None:
    raise app.UsageError(f"{argv[1]}: the record has no trace (not an agent's job)")
  print(render(found[0]))


if __name__ == "__main__":
  cli.run(main)
