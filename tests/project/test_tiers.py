"""Every test that starts a process or a server carries the `job` marker, so the quick tier
(`pytest -m "not job"`) starts none.

The rule, checked on the syntax of every .py file under tests/ (nothing is run):
- A *starter* is a name that launches a process or a server: `subprocess` (run, Popen,
  check_output, ...), `Popen`, `sys.executable` (a command line for a new interpreter),
  `nbclient` (a notebook kernel), `uvicorn`, `HTTPServer` and `ThreadingHTTPServer`.
- A function or class of a helper module in tests/helpers/ whose body uses a starter is
  one too (`jobs.cmd`, `doc_commands.check`, `chat_server.ChatServer`), and so
  is a function or class of a test file whose body uses a starter, calls one or takes one
  as a fixture (an argument named as it), followed until nothing changes.
- A test function that is a starter must be marked: `@pytest.mark.job` on it or on its
  class, or `pytest.mark.job` in its module's `pytestmark`.
Names are matched as written (an alias such as `import subprocess as sp` is not followed),
and code at module level outside functions is not looked at. A test that runs a job's
`main()` in-process end to end starts no process, so the rule cannot see it: such tests
are found by timing (`pytest -m "not job" --durations=30`) and marked by hand.
"""
import ast
import glob
import os

import pytest

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELPERS = "tests.helpers"  # The package of the shared helpers, as the tests import it.
STARTERS = frozenset({"subprocess", "Popen", "sys.executable", "nbclient", "uvicorn",
                      "HTTPServer", "ThreadingHTTPServer"})


def _dotted(node) -> str | None:
  """`a.b.c` for a Name/Attribute chain, else None."""
  parts = []
  while isinstance(node, ast.Attribute):
    parts.append(node.attr)
    node = node.value
  if not isinstance(node, ast.Name):
    return None
  return ".".join([node.id, *reversed(parts)])


def _references(node) -> set[str]:
  """Every dotted name, its prefixes and its last part, that a definition's body and
  arguments mention (argument names stand for the fixtures they request)."""
  names = set()
  for n in ast.walk(node):
    if isinstance(n, (ast.Name, ast.Attribute)) and (d := _dotted(n)):
      parts = d.split(".")
      names.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
      names.add(parts[-1])
    elif isinstance(n, ast.arg):
      names.add(n.arg)
  return names


def _definitions(tree: ast.Module) -> dict[str, ast.AST]:
  return {d.name: d for d in tree.body
          if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def _imported(tree: ast.Module, helpers: dict[str, set[str]]) -> set[str]:
  """Names by which this module reaches the helper modules' starters: `jobs.cmd` after
  `from tests.helpers import jobs`, `ChatServer` after `from tests.helpers.chat_server
  import ChatServer`."""
  out = set()
  for n in tree.body:
    if not isinstance(n, ast.ImportFrom) or not n.module:
      continue
    if n.module == HELPERS:
      out.update(f"{a.asname or a.name}.{s}" for a in n.names for s in helpers.get(a.name, ()))
    elif n.module.startswith(HELPERS + "."):
      starters = helpers.get(n.module[len(HELPERS) + 1:], set())
      out.update(a.asname or a.name for a in n.names if a.name in starters)
  return out


def _starters(tree: ast.Module, known: set[str]) -> set[str]:
  """Names of the module's top-level definitions that start something, given the names
  `known` to start something (followed to a fixed point)."""
  defs = {name: _references(d) for name, d in _definitions(tree).items()}
  found = set()
  while True:
    more = {name for name, refs in defs.items()
            if name not in found and refs & (known | found)}
    if not more:
      return found
    found |= more


def _is_job_mark(node) -> bool:
  return _dotted(node) == "pytest.mark.job"


def _module_marked(tree: ast.Module) -> bool:
  for n in tree.body:
    if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "pytestmark" for t in n.targets):
      values = n.value.elts if isinstance(n.value, (ast.List, ast.Tuple)) else [n.value]
      return any(_is_job_mark(v) for v in values)
  return False


def unmarked(sources: dict[str, str]) -> list[str]:
  """`file::test` for each test that starts something without the `job` marker, given the
  text of each file under a tests/ directory by its path there (`engine/test_x.py`)."""
  trees = {name: ast.parse(text, name) for name, text in sources.items()}
  helpers = {}
  for name, tree in trees.items():
    folder, base = os.path.split(name)
    if folder == "helpers":
      helpers[base[:-3]] = _starters(tree, set(STARTERS))
  out = []
  for name, tree in sorted(trees.items()):
    if not os.path.basename(name).startswith("test_") or _module_marked(tree):
      continue
    known = set(STARTERS) | _imported(tree, helpers)
    found = _starters(tree, known)
    tests = [(d, []) for d in tree.body if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))]
    tests += [(d, c.decorator_list) for c in tree.body if isinstance(c, ast.ClassDef)
              for d in c.body if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))]
    for d, outer in tests:
      starts = d.name in found or _references(d) & (known | found)
      if d.name.startswith("test") and starts and not any(
          _is_job_mark(m) for m in [*d.decorator_list, *outer]):
        out.append(f"{name}::{d.name}")
  return out


def _read(path):
  with open(path) as f:
    return f.read()


def test_every_test_that_starts_a_process_or_server_is_a_job():
  sources = {os.path.relpath(p, TESTS): _read(p)
             for p in glob.glob(os.path.join(TESTS, "**", "*.py"), recursive=True)}
  missing = unmarked(sources)
  assert not missing, ("add @pytest.mark.job (or pytestmark = pytest.mark.job) to:\n  "
                       + "\n  ".join(missing))


HELPER = '''
import subprocess, sys
def cmd(module):
  return [sys.executable, "-m", module]
class Server:
  def __init__(self):
    import http.server
    self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), None)
def words():
  return ["a"]
'''


@pytest.mark.parametrize("test, flagged", [
    ("import subprocess\ndef test_a():\n  subprocess.run(['true'])\n", ["test_a"]),
    ("import subprocess\nimport pytest\n@pytest.mark.job\ndef test_a():\n"
     "  subprocess.run(['true'])\n", []),
    ("import pytest, subprocess\npytestmark = [pytest.mark.skipif(False, reason=''), "
     "pytest.mark.job]\ndef test_a():\n  subprocess.run(['true'])\n", []),
    ("import pytest, subprocess\npytestmark = pytest.mark.skipif(False, reason='')\n"
     "def test_a():\n  subprocess.run(['true'])\n", ["test_a"]),
    # Through a helper of the file, a fixture, and a helper module by each import form.
    ("import subprocess\ndef _run():\n  return subprocess.Popen(['true'])\n"
     "def _twice():\n  _run(); _run()\ndef test_a():\n  _twice()\ndef test_b():\n  pass\n",
     ["test_a"]),
    ("import pytest, sys\n@pytest.fixture\ndef exe():\n  return sys.executable\n"
     "def test_a(exe):\n  pass\ndef test_b(tmp_path):\n  pass\n", ["test_a"]),
    ("from tests.helpers import helper\ndef test_a():\n  helper.cmd('x')\ndef test_b():\n"
     "  helper.words()\n", ["test_a"]),
    ("from tests.helpers import helper as h\ndef test_a():\n  h.Server()\n", ["test_a"]),
    ("from tests.helpers.helper import Server as S, words\ndef test_a():\n  S()\n"
     "def test_b():\n  words()\n", ["test_a"]),
    ("import pytest, subprocess\n@pytest.mark.job\nclass TestA:\n  def test_a(self):\n"
     "    subprocess.run(['true'])\nclass TestB:\n  def test_b(self):\n"
     "    subprocess.run(['true'])\n", ["test_b"]),
])
def test_the_rule_on_small_files(test, flagged):
  """The check itself: flags what starts something unmarked, and nothing else."""
  assert unmarked({"helpers/helper.py": HELPER, "env/test_x.py": test}) == [
      f"env/test_x.py::{t}" for t in flagged]
