r"""`pedrl`, the console command: one name for every job and tool.

  pedrl train uco --config=experiments/uco.py:tiny --workdir=/tmp/uco
  pedrl evaluate --config=experiments/evaluate.py:tiny --workdir=/tmp/eval
  pedrl serve --model=testdata/models/qwen2
  pedrl configs

Each command runs its module as `python -m MODULE` would (the modules keep working
on their own), with the rest of the command line as its flags. This module imports
neither JAX nor the commands' modules before it dispatches: a mistake (an unknown
command, a job's missing flag or config file) is one `error:` line in a fraction
of a second, and `pedrl --help` lists the commands.
"""
import difflib
import runpy
import sys

# (command, module, what it does), in the order `pedrl --help` lists them.
TRAINING = (("uco", "GRPO with UCO's rewards (paper 000)"),
            ("pedagogical_rl", "GRPO with PedagogicalRL's rewards (paper 003)"),
            ("thinking", "GRPO with PedagogicalRL-Thinking's rewards (paper 001)"),
            ("sft", "SFT on the baseline data (paper 003's baseline)"),
            ("mdpo", "multi-turn DPO on the baseline data (paper 003's baseline)"))
COMMANDS = (
    ("rollout", "pedrl.experiments.rollout", "tutor-student dialogues and their rewards"),
    ("evaluate", "pedrl.experiments.evaluate", "a tutor on the papers' evaluation protocols"),
    ("mathtutorbench", "pedrl.experiments.mathtutorbench", "MathTutorBench's nine numbers"),
    ("cpa", "pedrl.experiments.cpa", "CPA, its ablations and baselines (paper 002)"),
    ("analyze", "pedrl.experiments.analyze", "what tutors say and think (paper 001)"),
    ("baseline_data", "pedrl.experiments.baseline_data", "paper 003's baselines' data"),
    ("serve", "pedrl.serve", "an OpenAI-compatible server for a checkpoint or a run"),
    ("configs", "pedrl.tools.configs", "the config files and their variants; one resolved"),
    ("report", "pedrl.tools.report", "evaluation tables from evaluation workdirs"),
    ("plot", "pedrl.tools.plot", "a run's metrics as PNGs"),
    ("export", "pedrl.tools.export", "a trained tutor as a transformers directory"),
    ("check_parity", "pedrl.tools.check_parity", "a checkpoint's port against transformers"),
    ("show_trace", "pedrl.tools.show_trace", "an agent's trace"),
    ("plan", "pedrl.tools.plan", "will a GRPO run fit: memory per device"),
    ("warm", "pedrl.tools.warm", "a job's first rollout compiled ahead, into the caches"),
)
BENCHMARKS = ("rollout", "sampling", "serve", "cache_size", "train_step", "learning")


def usage() -> str:
  width = max(len(c) for c, _, _ in COMMANDS) + 2
  lines = ["usage: pedrl COMMAND [FLAGS]   (pedrl COMMAND --helpshort: its flags)", "",
           "  train METHOD    a training job; METHOD is one of:"]
  lines += [f"    {m:<{width + 2}}{what}" for m, what in TRAINING]
  lines += [f"  {c:<{width + 4}}{what}" for c, _, what in COMMANDS]
  lines += [f"  {'bench NAME':<{width + 4}}a benchmark: {', '.join(BENCHMARKS)}", "",
            "Each is `python -m MODULE` (pedrl train uco: python -m pedrl.experiments.uco)."]
  return "\n".join(lines)


def _fail(message: str) -> None:
  print(f"error: {message} (pedrl --help lists the commands)", file=sys.stderr)
  sys.exit(1)


def _choose(kind: str, name: str, names) -> None:
  if name not in names:
    close = difflib.get_close_matches(name, names, n=1)
    _fail(f"unknown {kind} {name!r}" + (f" (did you mean {close[0]}?)" if close else "")
          + f"; the {kind}s: {', '.join(names)}")


def module_of(args: list[str]) -> tuple[str, list[str]]:
  """(the module a command line names, the flags it passes on); one `error:` line for a
  command line that names none."""
  if not args or args[0].startswith("-"):
    _fail("give a command")
  command, rest = args[0].replace("-", "_"), args[1:]
  if command in ("train", "bench"):
    names = [m for m, _ in TRAINING] if command == "train" else list(BENCHMARKS)
    kind = "training method" if command == "train" else "benchmark"
    if not rest or rest[0].startswith("-"):
      _fail(f"`pedrl {command}` needs a {kind}: one of {', '.join(names)}")
    _choose(kind, rest[0], names)
    package = "pedrl.experiments" if command == "train" else "pedrl.bench"
    return f"{package}.{rest[0]}", rest[1:]
  modules = {c: m for c, m, _ in COMMANDS}
  _choose("command", command, list(modules) + ["train", "bench"])
  return modules[command], rest


def main(argv: list[str] | None = None) -> None:
  args = sys.argv[1:] if argv is None else argv
  if not args or args[0] in ("-h", "--help", "help", "--helpshort"):
    print(usage())
    sys.exit(0)
  module, rest = module_of(args)
  # A job's module checks its command line itself, before JAX loads (pedrl.cli.check_job).
  sys.argv = [module, *rest]
  runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
  main()
