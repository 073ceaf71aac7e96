"""pedrl installed from a wheel (`pip install .`, not editable) runs the README's
commands from any directory: its configs and testdata travel inside the package."""
import os
import shutil
import subprocess
import sys

import pytest

from tests import jobs

@pytest.fixture(scope="module")
def installed(tmp_path_factory):
  """A directory holding pedrl installed from a wheel built from an sdist of a copy of the
  source (a build leaves build/ and egg-info behind)."""
  tmp = tmp_path_factory.mktemp("install")
  source = tmp / "source"
  ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
  os.makedirs(source)
  for name in ("pedrl", "experiments", "testdata"):
    shutil.copytree(os.path.join(jobs.ROOT, name), source / name, ignore=ignore)
  for name in ("setup.py", "README.md", "MANIFEST.in"):
    shutil.copy(os.path.join(jobs.ROOT, name), source / name)
  # The wheel is built from the sdist, as `python -m build` and an index would: the sdist
  # must carry experiments/ and testdata/ for the wheel to bundle them.
  sdist = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp / "sdist")],
                         cwd=source, capture_output=True, text=True)
  assert sdist.returncode == 0, sdist.stderr
  (archive,) = (tmp / "sdist").iterdir()
  wheels, target = tmp / "wheels", tmp / "site"
  pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
  build = subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(archive)],
                         capture_output=True, text=True)
  if build.returncode and "No matching distribution" in build.stderr:
    pytest.skip("building a wheel needs setuptools from the package index")
  assert build.returncode == 0, build.stderr
  (wheel,) = wheels.iterdir()
  subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)], check=True)
  return target


def _run(installed, cwd, *args):
  env = dict(jobs.env(), PYTHONPATH=str(installed))
  return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True,
                        text=True, timeout=900)


def test_the_installed_package_runs_the_tiny_jobs_from_another_directory(installed, tmp_path):
  elsewhere = tmp_path / "elsewhere"
  os.makedirs(elsewhere)
  where = _run(installed, elsewhere, "-c", "import pedrl, pedrl.paths as p; "
               "print(pedrl.__file__); print(p.repo_root())")
  assert where.returncode == 0, where.stderr
  package, root = where.stdout.split()
  assert package.startswith(str(installed)), "the test must run the wheel, not the clone"
  assert root == os.path.join(str(installed), "pedrl", "_bundled")

  uco = _run(installed, elsewhere, "-m", "pedrl.experiments.uco",
             "--config=experiments/uco.py:tiny", "--config.rl.steps=1", "--workdir=uco")
  assert uco.returncode == 0, uco.stderr[-3000:]
  assert "step=1" in uco.stdout
  learning = _run(installed, elsewhere, "-m", "pedrl.bench.learning", "--steps=1", "--window=1",
                  "--workdir=learning")
  assert learning.returncode == 0, learning.stderr[-3000:]
  assert "improvement=" in learning.stdout
  # The config's testdata paths were resolved into the installed package.
  with open(elsewhere / "uco" / "config.json") as f:
    assert os.path.join(str(installed), "pedrl", "_bundled", "testdata") in f.read()
