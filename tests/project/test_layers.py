"""Imports point down the layers; pedrl/experiments/ holds the jobs, pedrl/jobs/ none,
experiments/ config files only.

The order is the one docs/concepts.md draws: shared utilities → models → engine →
clients → env → rewards → rl, eval → agents, serve → jobs → experiments, tools,
bench. A module may import its own layer and the ones below it, never above: the
rooms stay one job each (a tutor's endpoint client without the reward code, the
trained tutor without the training code, MathTutorBench's rules without its runner).
Every import is read from the source (ast), also those inside functions.
"""
import ast
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "pedrl"

# Package (or top-level module) -> layer; a module imports only layers <= its own.
LAYERS = {
    **dict.fromkeys(["cli", "commands", "logs", "paths", "environ", "distributed", "sharding",
                     "streams", "stopping", "files", "figures", "fields"], 0),
    "models": 1, "tokenizer": 1, "runs": 1.5,
    "engine": 2,
    "clients": 3, "mathtutorbench_rules": 3,
    "env": 4,
    "rewards": 5,
    "rl": 6, "eval": 6,
    "agents": 7, "serve": 7,
    "jobs": 8,
    "experiments": 9, "tools": 9, "bench": 9,
}
# Crossings the layers allow but that put a module in the wrong room (the client of an
# endpoint raising a judge's error, agents reading the evaluation's package, ...).
CROSSINGS = [
    ("pedrl.serve", "pedrl.rl.checkpoint"),
    ("pedrl.tools", "pedrl.rl.checkpoint"),
    ("pedrl.agents", "pedrl.eval"),
    ("pedrl.agents", "pedrl.rewards.judging"),
    ("pedrl.env", "pedrl.rewards"),
    ("pedrl.bench", "pedrl.experiments"),
    ("pedrl.clients", "pedrl.rewards"),
]


def _module(path: pathlib.Path) -> str:
  parts = path.relative_to(ROOT.parent).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: pathlib.Path):
  """(line, imported module) for every pedrl import of a file, relative ones resolved."""
  tree = ast.parse(path.read_text(encoding="utf-8"))
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for a in node.names:
        if a.name.startswith("pedrl"):
          yield node.lineno, a.name
    elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pedrl"):
      for a in node.names:  # `from pedrl.rl import checkpoint`: pedrl.rl.checkpoint.
        yield node.lineno, f"{node.module}.{a.name}"


def _layer(module: str):
  parts = module.split(".")
  return LAYERS.get(parts[1]) if len(parts) > 1 else 0


def _all_imports():
  for path in sorted(ROOT.rglob("*.py")):
    for line, target in _imports(path):
      yield f"{path.relative_to(ROOT.parent)}:{line}", _module(path), target


def test_every_package_has_a_layer():
  names = {p.stem if p.is_file() else p.name for p in ROOT.iterdir()
           if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.name != "__init__.py"}
  assert names - set(LAYERS) == set(), "place the new package in LAYERS and docs/concepts.md"


def test_no_import_points_up():
  up = [f"{where}: {source} imports {target}" for where, source, target in _all_imports()
        if _layer(target) is not None and _layer(target) > _layer(source)]
  assert not up, "\n".join(up)


@pytest.mark.parametrize("source,target", CROSSINGS, ids=[f"{s}->{t}" for s, t in CROSSINGS])
def test_the_rooms_crossings_are_gone(source, target):
  found = [where for where, s, t in _all_imports()
           if (s == source or s.startswith(source + ".")) and
           (t == target or t.startswith(target + "."))]
  assert not found, found


def test_the_checks_see_what_they_forbid(tmp_path):
  """The readers catch the imports they were written against (a check that cannot fail
  would pass whatever the code says)."""
  old = tmp_path / "contracts.py"
  old.write_text("def f():\n  from pedrl.eval.mathtutorbench_harness import constraints\n"
                 "from pedrl.rewards.judging import json_object\nimport pedrl.rl.checkpoint\n"
                 "from pedrl import runs\n")
  assert sorted(t for _, t in _imports(old)) == [
      "pedrl.eval.mathtutorbench_harness.constraints", "pedrl.rewards.judging.json_object",
      "pedrl.rl.checkpoint", "pedrl.runs"]
  assert _layer("pedrl.eval.mathtutorbench_harness") > _layer("pedrl.mathtutorbench_rules.constraints")
  assert _layer("pedrl.jobs.settings") > _layer("pedrl.rl.checkpoint") > _layer("pedrl.runs")


def test_experiments_holds_entry_points_only():
  """Each module of pedrl/experiments/ (but __init__) is a job: it has a `main` and runs
  it through absl (pedrl.cli.run) when started with `python -m`. What several jobs share
  is pedrl/jobs/'s; what a job's parts are (its tasks, settings) the layers' below."""
  not_jobs = []
  for path in sorted((ROOT / "experiments").glob("*.py")):
    if path.name == "__init__.py":
      continue
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
             if isinstance(t, ast.Name)}
    names |= {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    names |= {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom)
              for a in n.names}
    runs_main = any(isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) and
                    "cli.run(main)" in ast.unparse(n) for n in tree.body)
    if "main" not in names or not runs_main:
      not_jobs.append(path.name)
  assert not not_jobs, (f"not entry points (a job's shared machinery goes to pedrl/jobs/, its "
                        f"tasks and settings to the layers below): {not_jobs}")


# Loads every config file of experiments/ and pedrl.jobs.settings in a fresh interpreter and
# prints the heavy packages that came with them.
_LOAD_CONFIGS = """
import glob, importlib.util, json, os, sys
import pedrl.jobs.settings
for path in sorted(glob.glob(os.path.join(sys.argv[1], "experiments", "*.py"))):
  spec = importlib.util.spec_from_file_location("config", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  module.get_config()
print(json.dumps(sorted(m for m in ("jax", "flax", "optax", "orbax") if m in sys.modules)))
"""


@pytest.mark.job
def test_config_files_import_no_jax():
  """A config file (and the settings types it builds on) imports no JAX: a command line's
  wrong variant, key or value is reported before a job loads anything heavy, and the
  configs tool lists the files by importing them."""
  repo = ROOT.parent
  out = subprocess.run([sys.executable, "-c", _LOAD_CONFIGS, str(repo)], cwd=repo,
                       capture_output=True, text=True, check=True)
  assert json.loads(out.stdout.splitlines()[-1]) == []


def _job_commands(path: pathlib.Path) -> list[str]:
  """What makes a module a job's command: absl flags defined at import (the job flags,
  pedrl.jobs.exits.define_flags, or any flags.DEFINE_*), a module-level `main`, or a
  function wrapped as a job's main (pedrl.jobs.exits.job_main)."""
  tree = ast.parse(path.read_text(encoding="utf-8"))
  found = [f"{path.name}:{n.lineno} defines main" for n in tree.body
           if isinstance(n, (ast.FunctionDef, ast.Assign)) and
           "main" in ([n.name] if isinstance(n, ast.FunctionDef) else
                      [t.id for t in n.targets if isinstance(t, ast.Name)])]
  for n in ast.walk(tree):
    if isinstance(n, ast.Call):
      name = ast.unparse(n.func)
      if name.rpartition(".")[2] in ("define_flags", "define_job_flags") or \
          name.startswith("flags.DEFINE_"):
        found.append(f"{path.name}:{n.lineno} calls {name}")
    elif isinstance(n, ast.FunctionDef) and any(
        ast.unparse(d).rpartition(".")[2] == "job_main" for d in n.decorator_list):
      found.append(f"{path.name}:{n.lineno} wraps {n.name} as a job's main")
  return found


def test_jobs_holds_no_job():
  """pedrl/jobs/ holds what several jobs share (settings, workdirs, loading, the trainers
  built from a config); every job's command (its flags, its main, what it prints at the
  end) is a module of pedrl/experiments/, so a job's body is read in one place."""
  found = [line for path in sorted((ROOT / "jobs").glob("*.py")) for line in _job_commands(path)]
  assert not found, f"job commands in pedrl/jobs/ (move them to pedrl/experiments/): {found}"


# The top-level experiments/: config files (each names the job it configures) and the README.
EXPERIMENTS_EXTRA = {"README.md"}


def _not_config_files(folder: pathlib.Path) -> list[str]:
  """Files of `folder` that are neither its README nor a config file: a .py with a
  `get_config` and an ENTRY_POINT naming a module of pedrl/experiments/."""
  out = []
  for path in sorted(folder.iterdir()):
    if path.name == "__pycache__" or path.name in EXPERIMENTS_EXTRA:
      continue
    if path.suffix != ".py" or not path.is_file():
      out.append(path.name)
      continue
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    entry = [n.value.value for n in tree.body if isinstance(n, ast.Assign) and
             [ast.unparse(t) for t in n.targets] == ["ENTRY_POINT"] and
             isinstance(n.value, ast.Constant)]
    job = entry[0].split(".") if entry else []
    if "get_config" not in functions or len(job) != 3 or job[:2] != ["pedrl", "experiments"] \
        or not (ROOT / "experiments" / f"{job[2]}.py").is_file():
      out.append(path.name)
  return out


def test_experiments_folder_holds_config_files_only():
  """experiments/ is the config files a user edits (and its README): code there would be
  outside the package, its layers and its tests' imports."""
  assert not _not_config_files(ROOT.parent / "experiments")


def test_the_job_checks_see_what_they_forbid(tmp_path):
  """The two checks above catch what they were written against."""
  job = tmp_path / "train.py"
  job.write_text("from pedrl.jobs.exits import define_flags, job_main\n"
                 "define_flags('experiments/uco.py:tiny', 'Run directory.')\n"
                 "@job_main\ndef main(c, workdir):\n  pass\n")
  assert sorted(line.split(" ", 1)[1] for line in _job_commands(job)) == [
      "calls define_flags", "defines main", "wraps main as a job's main"]
  folder = tmp_path / "experiments"
  folder.mkdir()
  (folder / "README.md").write_text("config files\n")
  (folder / "uco.py").write_text("ENTRY_POINT = 'pedrl.experiments.uco'\n"
                                 "def get_config(arg=None):\n  pass\n")
  (folder / "helpers.py").write_text("def get_config():\n  pass\n")  # No job.
  (folder / "notes.txt").write_text("\n")
  assert _not_config_files(folder) == ["helpers.py", "notes.txt"]


def test_no_import_time_tricks():
  """A job's command line is checked by its own module (pedrl.cli.check_job) and config
  files are imported to be listed: nothing reads the interpreter's original command line,
  the experiments package runs nothing when imported, and the configs tool does not read
  config files as syntax trees to avoid importing them."""
  found = [f"{path.relative_to(ROOT.parent)}" for path in sorted(ROOT.rglob("*.py"))
           if "orig_argv" in path.read_text(encoding="utf-8")]
  assert not found, f"read sys.orig_argv: {found}"
  package = ast.parse((ROOT / "experiments" / "__init__.py").read_text(encoding="utf-8"))
  assert [type(n) for n in package.body] in ([], [ast.Expr]), (
      "pedrl/experiments/__init__.py runs code")
  configs = ast.parse((ROOT / "tools" / "configs.py").read_text(encoding="utf-8"))
  assert "ast" not in {a.name for n in ast.walk(configs) if isinstance(n, ast.Import)
                       for a in n.names}, "pedrl/tools/configs.py reads config files with ast"
