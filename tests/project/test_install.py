"""pedrl installed from its wheel runs the README's commands from any directory, and the
wheel leaves no file of the package behind.

The wheel is built from an sdist (as `python -m build` and an index would: the sdist
must carry experiments/ and testdata/ for the wheel to bundle them) and installed into
a fresh virtual environment that cannot see the clone: no editable install, and the
commands run with `python -I` (no PYTHONPATH, no current directory on the path) from
another directory. The environment borrows the dependencies of the one running the
tests through a .pth file that lists their site-packages directories as plain paths:
Python adds such a path without running the .pth files inside it, so the editable
install's finder (`pip install -e .`, as .ci/run does) never loads.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import jobs

pytestmark = pytest.mark.job


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
  """A wheel built from an sdist of a copy of the source (a build leaves build/ and
  egg-info behind)."""
  tmp = tmp_path_factory.mktemp("wheel")
  source = tmp / "source"
  ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
  os.makedirs(source)
  for name in ("pedrl", "experiments", "testdata"):
    shutil.copytree(os.path.join(jobs.ROOT, name), source / name, ignore=ignore)
  for name in ("setup.py", "README.md", "MANIFEST.in", "LICENSE", "CITATION.cff"):
    shutil.copy(os.path.join(jobs.ROOT, name), source / name)
  sdist = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp / "sdist")],
                         cwd=source, capture_output=True, text=True)
  assert sdist.returncode == 0, sdist.stderr
  (archive,) = (tmp / "sdist").iterdir()
  # No build isolation: the build uses this environment's setuptools, offline.
  build = subprocess.run([sys.executable, "-m", "pip", "-q", "--disable-pip-version-check",
                          "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"),
                          str(archive)], capture_output=True, text=True)
  assert build.returncode == 0, build.stderr
  (built,) = (tmp / "dist").iterdir()
  return built


def _dependency_paths() -> list[str]:
  """The site-packages directories this interpreter imports from (none inside the clone)."""
  root = os.path.realpath(jobs.ROOT)
  return [p for p in dict.fromkeys(sys.path)
          if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p)
          and not os.path.realpath(p).startswith(root + os.sep)]


@pytest.fixture(scope="module")
def python(wheel, tmp_path_factory) -> str:
  """The interpreter of a fresh virtual environment holding the wheel, and only it, of pedrl."""
  env = tmp_path_factory.mktemp("venv")
  subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
  python = str(env / "bin" / "python")
  site = subprocess.run([python, "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                        capture_output=True, text=True, check=True).stdout.strip()
  with open(os.path.join(site, "_borrowed_dependencies.pth"), "w") as f:
    f.write("\n".join(_dependency_paths()) + "\n")
  subprocess.run([sys.executable, "-m", "pip", "-q", "--disable-pip-version-check", "install",
                  "--no-deps", "--no-index", "--target", site, str(wheel)], check=True)
  return python


def _run(python, cwd, *args, timeout=600):
  return subprocess.run([python, "-I", *args], cwd=cwd, env=jobs.env(), capture_output=True,
                        text=True, timeout=timeout)


def test_the_wheel_runs_training_evaluation_and_serving_from_another_directory(python, tmp_path):
  where = _run(python, tmp_path, "-c", "import pedrl, pedrl.paths as p; "
               "print(pedrl.__file__); print(p.repo_root())")
  assert where.returncode == 0, where.stderr
  package, root = where.stdout.split()
  venv = os.path.dirname(os.path.dirname(python))
  assert package.startswith(venv + os.sep), "the test must run the wheel, not the clone"
  assert root == os.path.join(os.path.dirname(package), "_bundled")

  uco = _run(python, tmp_path, "-m", "pedrl.experiments.uco", "--config=experiments/uco.py:tiny",
             "--config.rl.steps=1", "--workdir=uco")
  assert uco.returncode == 0, uco.stderr[-3000:]
  assert "step=1" in uco.stdout
  with open(tmp_path / "uco" / "config.json") as f:  # Its testdata paths: the bundled ones.
    assert os.path.join(root, "testdata") in f.read()

  evaluation = _run(python, tmp_path, "-m", "pedrl.experiments.evaluate",
                    "--config=experiments/evaluate.py:tiny", "--config.problems.limit=2",
                    "--workdir=eval")
  assert evaluation.returncode == 0, evaluation.stderr[-3000:]
  assert (tmp_path / "eval" / "metrics.json").is_file()

  serve = _run(python, tmp_path, "-m", "pedrl.serve", "--help", timeout=300)
  assert "Traceback" not in serve.stderr, serve.stderr[-3000:]
  assert "--model" in serve.stdout and "--port" in serve.stdout


def test_the_wheel_holds_every_file_of_the_package(wheel):
  """Every module and data file under pedrl/ in the repository (a directory without
  __init__.py would be left out by find_packages, silently)."""
  with zipfile.ZipFile(wheel) as z:
    inside = set(z.namelist())
  package = pathlib.Path(jobs.ROOT) / "pedrl"
  files = {str(p.relative_to(jobs.ROOT)) for p in package.rglob("*")
           if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
  assert any(f.endswith(".py") for f in files) and any(f.endswith(".jinja") for f in files)
  assert sorted(files - inside) == []
  for name in ("experiments/uco.py", "testdata/models/qwen2/config.json"):
    assert f"pedrl/_bundled/{name}" in inside


def test_the_wheel_declares_the_pedrl_command(wheel, python, tmp_path):
  """`pip install` puts `pedrl` on the PATH (console_scripts); it runs from the wheel."""
  with zipfile.ZipFile(wheel) as z:
    (name,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
    entry_points = z.read(name).decode()
  assert "pedrl = pedrl.commands:main" in entry_points
  listed = _run(python, tmp_path, "-c", "from pedrl.commands import main; main()", "--help")
  assert listed.returncode == 0 and "train METHOD" in listed.stdout, listed.stderr
