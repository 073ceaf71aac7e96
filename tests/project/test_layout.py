"""The tests are laid out like the package: each test file in a folder named for the pedrl
package it tests (tests/engine/, tests/rl/, ...), the checks on the whole repository and on
pedrl's top-level modules in tests/project/, the shared helpers in tests/helpers/ and
imported from there by one form (`from tests.helpers import jobs`). Every folder is a
package, so test files in two folders may share a name."""
import ast
import os

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEDRL = os.path.join(os.path.dirname(TESTS), "pedrl")
OWN = ("project", "helpers")  # The folders not named for a pedrl package.


def packages(pedrl_dir: str) -> set[str]:
  """pedrl's first-level packages (the folders holding an __init__.py)."""
  return {d for d in os.listdir(pedrl_dir)
          if os.path.isfile(os.path.join(pedrl_dir, d, "__init__.py"))}


def problems(tests_dir: str, names: set[str]) -> list[str]:
  """What breaks the layout in `tests_dir`, given pedrl's package names."""
  out = []
  shared = os.path.join(tests_dir, "helpers")
  helpers = {f[:-3] for f in (os.listdir(shared) if os.path.isdir(shared) else ())
             if f.endswith(".py") and f != "__init__.py"}
  for entry in sorted(os.listdir(tests_dir)):
    path = os.path.join(tests_dir, entry)
    if os.path.isfile(path):
      if entry.endswith(".py") and entry not in ("__init__.py", "conftest.py"):
        out.append(f"{entry}: directly in tests/; move it into the folder of the pedrl "
                   f"package it tests, or tests/project/ or tests/helpers/")
      continue
    if entry.startswith((".", "__")):
      continue
    if entry not in names and entry not in OWN:
      out.append(f"{entry}/: names no pedrl package (nor is it one of {', '.join(OWN)})")
    if not os.path.isfile(os.path.join(path, "__init__.py")):
      out.append(f"{entry}/: no __init__.py (test files in two folders may share a name)")
    for name in sorted(os.listdir(path)):
      sub = os.path.join(path, name)
      if os.path.isdir(sub) and not name.startswith((".", "__")):
        out.append(f"{entry}/{name}/: one folder level only")
      if not name.endswith(".py") or name == "__init__.py":
        continue
      if (entry == "helpers") == name.startswith("test_"):
        out.append(f"{entry}/{name}: " + ("a test file among the helpers" if entry == "helpers"
                                          else "a helper outside tests/helpers/"))
      with open(sub, encoding="utf-8") as f:
        tree = ast.parse(f.read(), sub)
      for n in ast.walk(tree):  # One form of import: a bare `import jobs` needs sys.path set.
        mods = ([a.name for a in n.names] if isinstance(n, ast.Import)
                else [n.module] if isinstance(n, ast.ImportFrom) and n.module else [])
        for m in mods:
          if m.split(".")[0] in helpers or m == "tests" or m.startswith("test_"):
            out.append(f"{entry}/{name}:{n.lineno}: imports {m!r}; write "
                       f"`from tests.helpers import ...` or `from tests.FOLDER import ...`")
  return out


def test_every_test_file_sits_in_the_folder_of_a_pedrl_package():
  found = problems(TESTS, packages(PEDRL))
  assert not found, "\n".join(found)


def _write(root, files):
  for name, text in files.items():
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_check_on_small_layouts(tmp_path):
  """The flat layout fails (a test file directly in tests/, a helper beside it and
  imported by its bare name); a misnamed folder, a missing __init__.py, a helper outside
  helpers/ and a bare import fail too; the layout the suite has passes."""
  flat = tmp_path / "flat"
  _write(flat, {"conftest.py": "", "jobs.py": "", "test_grpo.py": "import jobs\n"})
  assert problems(str(flat), {"rl"}) == [
      "jobs.py: directly in tests/; move it into the folder of the pedrl package it tests, "
      "or tests/project/ or tests/helpers/",
      "test_grpo.py: directly in tests/; move it into the folder of the pedrl package it "
      "tests, or tests/project/ or tests/helpers/"]
  bad = tmp_path / "bad"
  _write(bad, {"conftest.py": "", "__init__.py": "", "helpers/__init__.py": "",
               "helpers/jobs.py": "", "rl/__init__.py": "", "rl/util.py": "",
               "rl/test_grpo.py": "import jobs\nfrom tests import jobs\n",
               "training/test_x.py": "from tests.helpers import jobs\n"})
  assert problems(str(bad), {"rl"}) == [
      "rl/test_grpo.py:1: imports 'jobs'; write `from tests.helpers import ...` or "
      "`from tests.FOLDER import ...`",
      "rl/test_grpo.py:2: imports 'tests'; write `from tests.helpers import ...` or "
      "`from tests.FOLDER import ...`",
      "rl/util.py: a helper outside tests/helpers/",
      "training/: names no pedrl package (nor is it one of project, helpers)",
      "training/: no __init__.py (test files in two folders may share a name)"]
  good = tmp_path / "good"
  _write(good, {"conftest.py": "", "__init__.py": "", "helpers/__init__.py": "",
                "helpers/jobs.py": "import json\n", "rl/__init__.py": "",
                "rl/test_grpo.py": "from tests.helpers import jobs\nfrom tests.env import "
                                   "test_chat\n"})
  assert problems(str(good), {"rl", "env"}) == []


def test_the_slowest_files_named_for_scheduling_exist():
  """tests/conftest.py starts its slowest files first; a renamed one would silently lose it."""
  from tests.conftest import SLOWEST_FILES
  missing = [f for f in SLOWEST_FILES if not os.path.exists(os.path.join(TESTS, f))]
  assert not missing, f"tests/conftest.py's SLOWEST_FILES names missing files: {missing}"
