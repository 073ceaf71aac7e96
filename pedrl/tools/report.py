r"""Merges evaluation workdirs and lays their metrics out as papers 003 (table 2) and 001 (table 1).

  python -m pedrl.tools.report /runs/eval_base /runs/eval_ped [--out=/runs/report]

For each workdir: every shard must be there, finished and of one protocol
(else an error naming them); its records are merged into
WORKDIR/eval_dialogues.jsonl and its metrics written to WORKDIR/metrics.json.
Then one row per run (named by its config, and a tutor read from a training run
by its method as paper 003's rows name it: RL, SFT or MDPO) is printed as a
markdown table, followed by the recorded settings its rows differ in besides the
tutor under test (a student, a judge, a default changed since a run), and written
to OUT/report.md and OUT/report.csv (every reported number), with
OUT/pareto.png: Δ solve rate against leak rate with 95% intervals (paper 003
figure 1; needs matplotlib, `pip install "pedrl[plot]"`, checked first; `--nofigure`
writes the tables only). Reasoning runs
(`evaluate.py:reasoning`, `:wbeb`) get a table of their own, laid out like paper
003 table 3 (and 001 table 2: WBEB's categories), and MathTutorBench runs
(`pedrl.experiments.mathtutorbench`) one in the leaderboard's nine columns
(003 table 4). OUT defaults to the first workdir.
"""
import csv
import json
import math
import os
import sys
from collections.abc import Sequence

from absl import app, flags, logging

from pedrl import cli, fields, files, paths
from pedrl.eval import evaluations, protocol as protocol_lib, shards
from pedrl.eval.mathtutorbench_harness import results as bench_results
from pedrl.eval.protocol import EvalProtocol, TutorRun
from pedrl.jobs import workdir as workdir_lib
from pedrl.figures import pyplot, whiskers

flags.DEFINE_string("out", None, "Where report.md, report.csv and pareto.png go "
                    "(default: the first workdir).")
flags.DEFINE_bool("figure", True, "Write pareto.png (needs matplotlib: the `plot` extra); "
                  "--nofigure: the tables only.")
FLAGS = flags.FLAGS

# (metric, column title, shown as a percentage)
COLUMNS = (("delta_solve_rate", "Δ solve rate (%)", True),
           ("leak_rate", "leak rate (%)", True),
           ("leak_any_rate", "leak, any sample (%)", True),
           ("helpful_rate", "helpful rate (%)", True),
           ("thinking_score", "thinking score", False),
           ("pedrm_micro", "Ped-RM micro", False),
           ("pedrm_macro", "Ped-RM macro", False))


def _cell(metrics: dict, name: str, percent: bool) -> str:
  value, (low, high) = metrics.get(name), metrics.get(f"{name}_ci") or (None, None)
  if value is None or (isinstance(value, float) and math.isnan(value)):
    return "–"
  scale, digits = (100, 1) if percent else (1, 3)
  text = f"{value * scale:.{digits}f}"
  if low is not None and not math.isnan(low):
    text += f" [{low * scale:.{digits}f}, {high * scale:.{digits}f}]"
  return text


REASONING = (("mmlu_accuracy", "MMLU, 5-shot (%)", True),
             ("gsm8k_accuracy", "GSM8K, 4-shot (%)", True),
             ("math500_accuracy", "MATH500, 0-shot (%)", True))


def choice_columns(runs: dict) -> tuple:
  """A multiple-choice benchmark's columns (paper 001 table 2): each WBEB category, then
  the overall accuracy."""
  cats = sorted({k for m in runs.values() for k in m
                 if k.startswith("wbeb/") and k.endswith("_accuracy")})
  return tuple((k, f"WBEB {k[len('wbeb/'):-len('_accuracy')]} (%)", True) for k in cats) + (
      ("wbeb_accuracy", "WBEB overall (%)", True),)


# Paper 003's name for a tutor trained by each job (its tables' rows: RL, SFT, MDPO).
METHODS = {"train": "RL", "sft": "SFT", "mdpo": "MDPO"}


def run_name(workdir: str, config: str, protocol: EvalProtocol | None = None) -> str:
  """The row of an evaluation: its config and folder, and, when the tutor under test is a
  pedrl training run, its method as the paper's tables name it, its folder and step."""
  base = lambda path: os.path.basename(os.path.normpath(path))
  name = f"{config} ({base(workdir)})"
  if protocol is None:
    return name
  tutor = protocol.section(shards.evaluation(protocol.kind, workdir).tutor_section, TutorRun)
  if tutor.workdir:
    job = workdir_lib.recorded_job(tutor.workdir)
    name += f" [{METHODS.get(job, job)} tutor: {base(tutor.workdir)} step {tutor.step}]"
  return name


def _kind(m: dict) -> str:
  """The evaluation of a metrics.json row (its recorded protocol's kind)."""
  return protocol_lib.kind_of(m.get("protocol", {}))


def table(runs: dict, columns: Sequence[tuple] = COLUMNS, count: str = "n_problems") -> str:
  """Markdown: one row per run, the metrics with their 95% intervals."""
  shown = [c for c in columns if any(_cell(m, c[0], c[2]) != "–" for m in runs.values())]
  head = ["run", count.removeprefix("n_")] + [title for _, title, _ in shown]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for name, m in runs.items():
    lines.append("| " + " | ".join([name, str(m[count])] +
                                   [_cell(m, k, p) for k, _, p in shown]) + " |")
  return "\n".join(lines)


# A table's rows compare tutors: the tutor under test is what differs on purpose. The
# number of shards changes no number.
_COMPARED = ("path", "workdir", "step", "endpoint", "model_type", "vocab_size", "hidden_size",
             "num_hidden_layers", "intermediate_size")
_NO_EFFECT = ("num_shards", "eval.num_shards")


def differences(runs: dict) -> str:
  """The note under a table: the recorded settings its rows differ in besides the tutor
  under test (the student, the judges, a condition's prompt, a setting whose default
  changed since a run), each value with its rows (numbered as the table lists them); ""
  when they agree."""
  flat = []
  for m in runs.values():
    protocol = EvalProtocol.from_dict(m["protocol"])  # Defaults of older runs filled in.
    tutor = shards.evaluation(protocol.kind).tutor_section
    f = {k: v for k, v in fields.dotted(protocol.to_dict()).items() if k not in _NO_EFFECT
         and not any(k.startswith(f"{tutor}.{c}") for c in _COMPARED)}
    for section, before in (("eval", evaluations.BEFORE_EVAL),
                            ("reasoning", evaluations.BEFORE_REASONING)):
      if any(k.startswith(f"{section}.") for k in f):  # What a run before the key used.
        f.update({f"{section}.{k}": v for k, v in before.items() if f"{section}.{k}" not in f})
    flat.append(f)
  keys = sorted(k for k in set().union(*flat) if len({json.dumps(f.get(k)) for f in flat}) > 1)
  lines = []
  for k in keys:
    rows = {}
    for i, f in enumerate(flat, 1):
      rows.setdefault(json.dumps(f.get(k)), []).append(str(i))
    lines.append(f"- `{k}`: " + "; ".join(
        f"{value} (row{'s' * (len(at) > 1)} {', '.join(at)})" for value, at in rows.items()))
  return ("Settings these rows differ in, besides the tutor under test:\n" + "\n".join(lines)
          if lines else "")


def _with_differences(text: str, runs: dict) -> str:
  note = differences(runs) if len(runs) > 1 else ""
  return f"{text}\n\n{note}" if note else text


def tables(runs: dict) -> str:
  """The tutoring table (003 table 2, 001 table 1), the reasoning one (003 table 3) and
MathTutorBench's (003 table 4), each followed by the settings its rows differ in."""
  of = lambda kind: {k: m for k, m in runs.items() if _kind(m) == kind}
  tutoring, solving, bench = of("tutoring"), of("reasoning"), of("mathtutorbench")
  return "\n\n".join(
      ([_with_differences(table(tutoring), tutoring)] if tutoring else []) +
      ([_with_differences(table(solving, REASONING + choice_columns(solving), "n_examples"),
                          solving)] if solving else []) +
      ([_with_differences(bench_results.table({k: m["tasks"] for k, m in bench.items()}), bench)]
       if bench else []))


# Reported beside the tables' columns in report.csv.
EXTRA = (("pre_solve_rate", "", True), ("post_solve_rate", "", True),
         ("helpful_all_rate", "", True), ("mmlu_question_accuracy", "", True))


def write_csv(runs: dict, path: str) -> None:
  names = [k for k, _, _ in COLUMNS + EXTRA + REASONING + choice_columns(runs)]
  bench = [f"{task}/{metric}" for task, metric, _ in bench_results.COLUMNS]
  with open(path, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["run", "n_problems", "n_dialogues", "n_examples"] + [
        x for k in names for x in (k, f"{k}_low", f"{k}_high")] + bench)
    for run, m in runs.items():
      row = [run, m.get("n_problems"), m.get("n_dialogues"), m.get("n_examples")]
      for k in names:
        low, high = m.get(f"{k}_ci") or (None, None)
        row += [m.get(k), low, high]
      row += [m.get("tasks", {}).get(task, {}).get(metric)
              for task, metric, _ in bench_results.COLUMNS]
      w.writerow(["" if x is None or (isinstance(x, float) and math.isnan(x)) else x
                  for x in row])


def percent_whiskers(m: dict, key: str) -> list | None:
  """The error bar of metric `key` of metrics.json `m`, in %; None for a metric without a
  (finite) interval."""
  ci = m.get(f"{key}_ci")
  return whiskers(m[key], *ci, 100) if ci and None not in ci and not math.isnan(ci[0]) else None


def pareto(runs: dict, path: str) -> bool:
  """Δ solve rate (y) against leak rate (x), with intervals; False without matplotlib."""
  try:
    plt = pyplot()
  except ImportError as e:
    logging.warning("no pareto.png: %s", e)
    return False
  runs = {k: m for k, m in runs.items() if _kind(m) == "tutoring"}
  if not runs:
    return False
  fig, ax = plt.subplots(figsize=(6, 4.5))
  for name, m in runs.items():
    ax.errorbar(100 * m["leak_rate"], 100 * m["delta_solve_rate"],
                xerr=percent_whiskers(m, "leak_rate"), yerr=percent_whiskers(m, "delta_solve_rate"),
                fmt="o", capsize=3, label=name)
  ax.set_xlabel("leak rate (%)")
  ax.set_ylabel("Δ solve rate (%)")
  ax.set_title("Teaching vs. telling (up and left is better)")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return True


def report(workdirs: Sequence[str], out: str | None = None, figure: bool = True) -> dict:
  """Merges each workdir, writes the report files (pareto.png if `figure`); {run name:
  metrics}."""
  runs = {}
  for w in workdirs:
    metrics = shards.write_merged(w).to_json()
    written = files.read_json(os.path.join(w, "metrics.json"), shards.ShardError)
    metrics.update(protocol=written["protocol"], config=written.get("config", "?"))
    name = run_name(w, metrics["config"], EvalProtocol.from_dict(written["protocol"]))
    if name in runs:  # Same config, same folder name: keep both rows.
      name = f"{name} [{os.path.abspath(w)}]"
    runs[name] = metrics
  out = out or workdirs[0]
  os.makedirs(out, exist_ok=True)
  text = tables(runs)
  with open(os.path.join(out, "report.md"), "w") as f:
    f.write(text + "\n")
  write_csv(runs, os.path.join(out, "report.csv"))
  if figure:
    pareto(runs, os.path.join(out, "pareto.png"))
  print(text)
  return runs


def main(argv: list[str]) -> None:
  workdirs = [paths.find(w) for w in argv[1:]]  # Found as config paths are.
  if not workdirs:
    raise app.UsageError("give one or more evaluation workdirs")
  if FLAGS.figure:  # Before any merge: the figure is written last.
    cli.require("report's pareto.png (--nofigure: the tables only)", "matplotlib")
  try:
    report(workdirs, FLAGS.out, FLAGS.figure)
  except (shards.ShardError, ValueError) as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)


if __name__ == "__main__":
  cli.run(main)
