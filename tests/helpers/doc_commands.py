"""The `python -m pedrl…` commands the documentation shows, and a check that each still parses.

`commands(root)` reads README.md and docs/*.md (and the files they include with
`--8<--`), takes every fenced code block that is not Python and every inline code
span that starts with `python -m pedrl`, and returns each `python -m pedrl.…`
command in them (continuation lines joined, comments, `...`
placeholders and [optional] brackets dropped). `check(commands)` hands the
modules to a few worker processes (this file run as a script). A worker imports
what every pedrl command imports (jax, flax, transformers, ..., `pedrl.cli`)
once, then forks a child per module: the child imports the module as `python -m`
would, with `pedrl.cli.run` held back (its flags are then defined, those under
`if __name__ == "__main__"` too), and, in a forked grandchild per command, parses
the command's flags exactly as the command would (`pedrl.cli.run`: config file,
variant, `--config.*` overrides and their values), then exits before the job's
main. So a renamed module, flag, config file, variant or config key in a doc fails,
without running any job. Modules in RUN are cheap enough to run as shown. (One
process per module cost about 3 s each, most of it the shared imports.)
"""
import concurrent.futures
import dataclasses
import glob
import importlib
import json
import os
import re
import runpy
import shlex
import subprocess
import sys
import tempfile

RUN = ("pedrl.tools.configs",)  # Run as shown: no model, under a second.
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
SNIPPET = re.compile(r'^\s*--8<--\s+"([^":]+)')
INLINE = re.compile(r"`(python -m pedrl[^`]*)`")
# A module name; not prose such as `pedrl…`, nor a placeholder such as `pedrl.experiments.X`.
MODULE = re.compile(r"pedrl(\.[a-z_][a-z0-9_]*)*")


@dataclasses.dataclass(frozen=True)
class Command:
  where: str  # docs/training.md:42
  module: str  # pedrl.experiments.uco
  args: tuple[str, ...]

  def __str__(self):
    return f"{self.where}: python -m {self.module} {shlex.join(self.args)}".strip()


def _code(path: str, root: str, seen: set):
  """(where, text) of each line of the non-Python fenced blocks of a file, and of each inline
  code span outside them that starts with `python -m pedrl`; the same for included files."""
  seen.add(os.path.abspath(path))
  name = os.path.relpath(path, root)
  fence, language = None, ""
  with open(path) as f:
    lines = f.read().split("\n")
  prose = []  # (number, line) outside fences: inline spans may cross line breaks.
  for number, line in enumerate(lines + [""], 1):
    m = FENCE.match(line)
    if m and (fence is None or m.group(1).startswith(fence)):
      fence, language = (m.group(1), m.group(2).lower()) if fence is None else (None, "")
      continue
    if fence is not None:
      if language not in ("python", "py", "pycon"):
        yield f"{name}:{number}", line
      continue
    snippet = SNIPPET.match(line)
    if snippet:
      included = os.path.join(root, snippet.group(1))
      if os.path.abspath(included) not in seen and os.path.exists(included):
        yield from _code(included, root, seen)
    prose.append((number, line))
  text = "\n".join(line for _, line in prose)
  for span in INLINE.finditer(text):
    number = prose[text.count("\n", 0, span.start())][0]
    yield f"{name}:{number}", " ".join(span.group(1).split())


def commands(root: str) -> list[Command]:
  """Every `python -m pedrl…` command in the docs under `root` (see the module docstring)."""
  files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
  found, seen = [], set()
  for path in files:
    pending = None  # A command continued with a trailing backslash.
    for where, line in _code(path, root, seen):
      if pending:
        where, text = pending[0], pending[1] + " " + line.strip()
      else:
        text = line.strip()
      if text.endswith("\\"):
        pending = (where, text[:-1])
        continue
      pending = None
      found += _parse(where, text)
  unique = {}
  for c in found:
    unique.setdefault((c.module, c.args), c)
  return list(unique.values())


def _parse(where: str, text: str) -> list[Command]:
  if "-m pedrl" not in text:
    return []
  try:
    tokens = shlex.split(text, comments=True)
  except ValueError as e:
    raise ValueError(f"{where}: cannot split {text!r} ({e})") from None
  out, segment = [], []
  for token in tokens + ["&&"]:
    if token in ("&&", "||", "|", ";"):
      for i in range(len(segment) - 2):
        if (os.path.basename(segment[i]).startswith("python") and segment[i + 1] == "-m"
            and MODULE.fullmatch(segment[i + 2])):
          # A "$NAME" token is a group of flags a page defines in its shell setup
          # (docs/reproduction.md); tests/experiments/test_reproduction.py expands and loads those.
          args = tuple(t.strip("[]") for t in segment[i + 3:]
                       if t not in ("...", "…") and not t.startswith("$"))
          out.append(Command(where, segment[i + 2], tuple(a for a in args if a)))
          break
      segment = []
    else:
      segment.append(token)
  return out


def check(cmds: list[Command], root: str, workers: int = 2, timeout: int = 240) -> list[str]:
  """One line per command that does not parse (empty: all do); the modules split over
  `workers` worker processes."""
  by_module = {}
  for c in cmds:
    by_module.setdefault(c.module, []).append(c)
  modules = sorted(by_module)

  def one(share):
    env = dict(os.environ, XLA_FLAGS="", JAX_PLATFORMS="cpu")
    job = {m: [list(c.args) for c in by_module[m]] for m in share}
    out = subprocess.run([sys.executable, os.path.abspath(__file__)], cwd=root, env=env,
                         input=json.dumps(job), capture_output=True, text=True, timeout=timeout)
    try:
      results = json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
      why = (out.stderr.strip().splitlines() or ["no output"])[-1]
      return [f"{c}\n    the check's worker failed: {why}" for m in share for c in by_module[m]]
    lines = []
    for m in share:
      if isinstance(results[m], str):  # The module did not import.
        lines += [f"{c}\n    python -m {m} does not import: {results[m]}" for c in by_module[m]]
      else:
        lines += [f"{c}\n    {message}" for c, (ok, message) in zip(by_module[m], results[m])
                  if not ok]
    return lines

  shares = [modules[i::workers] for i in range(workers) if modules[i::workers]]
  with concurrent.futures.ThreadPoolExecutor(len(shares) or 1) as pool:
    return [line for lines in pool.map(one, shares) for line in lines]


# What nearly every pedrl command imports: imported once by a worker, before it forks a
# child per module. Third-party packages and pedrl.cli only (which the check needs anyway),
# so that a pedrl module's own missing import or flag is still its own failure.
SHARED_IMPORTS = ("jax", "flax", "optax", "orbax.checkpoint", "transformers", "scipy.stats",
                  "math_verify", "ml_collections", "pedrl.cli")


def _forked(body) -> tuple[int, list[str]]:
  """Runs body() in a forked child: (its exit code, its non-empty output lines)."""
  with tempfile.TemporaryFile("w+") as log:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
      os.dup2(log.fileno(), 1)
      os.dup2(log.fileno(), 2)
      code = 1
      try:
        body()
        code = 0
      except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
      except BaseException as e:  # noqa: BLE001 - reported to the parent, which fails.
        print(f"{type(e).__name__}: {e}", file=sys.stderr)
      finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    log.seek(0)
    return (os.waitstatus_to_exitcode(status),
            [line for line in log.read().splitlines() if line.strip()])


def _module(module: str, argvs: list) -> None:
  """In a worker's child: runs `module` as `python -m` would, with `pedrl.cli.run` and a
  job's first check of its command line (`pedrl.cli.check_job`, of no arguments here)
  held back, so its flags are defined as for the command; then parses each argv in a
  forked grandchild (`run`'s parse checks what check_job does). Prints
  [[ok, message], ...] as its last line."""
  from pedrl import cli
  run = cli.run
  if module in RUN:
    entry = importlib.import_module(module)
  else:
    cli.run = lambda main: None  # The module's `cli.run(main)`: its flags exist by then.
    cli.check_job = lambda *args: None
    sys.argv = [module]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
  results = []
  for argv in argvs:
    def parse(argv=argv):  # As the command would, then leave before its main.
      sys.argv = [module, *argv]
      if module in RUN:
        entry.main()
      else:
        run(lambda _: sys.exit(0))
    code, lines = _forked(parse)
    results.append([code == 0, lines[-1] if lines else f"exit status {code}"])
  print(json.dumps(results))


def _worker() -> None:
  """Reads {module: [argv, ...]} from stdin; prints {module: [[ok, message], ...] or the
  line saying why it does not import} as the last line of stdout."""
  job = json.load(sys.stdin)
  for name in SHARED_IMPORTS:
    try:
      importlib.import_module(name)
    except ImportError:
      pass  # Not installed: the modules that need it say so themselves.
  results = {}
  for module, argvs in job.items():
    code, lines = _forked(lambda: _module(module, argvs))
    try:
      results[module] = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
      results[module] = lines[-1] if lines else f"exit status {code}"
  print(json.dumps(results))


if __name__ == "__main__":
  _worker()
