"""Where pedrl's config files and testdata are, from any directory.

Run from a clone (`pip install -e .`), they are the clone's `experiments/` and
`testdata/`; installed from a wheel (`pip install .`), the copies setup.py ships
inside the package (`pedrl/_bundled/`). A relative path in a config is looked up
in the current directory first (what a user typed), then in the repository of
the config file that holds it, so `--config=experiments/uco.py:tiny` and its
`testdata/…` paths work from anywhere.
"""
import os

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
# How config keys naming files or directories end (tutor.path, rewards.uco.embedder, …).
PATH_KEYS = ("path", "dir", "_file", "embedder", "workdir")


def repo_root() -> str:
  """The directory holding pedrl's experiments/ and testdata/."""
  for root in (os.path.dirname(_PACKAGE), os.path.join(_PACKAGE, "_bundled")):
    if os.path.isdir(os.path.join(root, "experiments")):
      return root
  raise FileNotFoundError(f"pedrl at {_PACKAGE} has no experiments/ beside it nor bundled: "
                          "reinstall it (`pip install .` ships them) or run from a clone")


def config_file(path: str) -> str:
  """A config file as given if it exists, else the same relative path in pedrl's repository."""
  if os.path.isabs(path) or os.path.exists(path):
    return path
  try:
    candidate = os.path.join(repo_root(), path)
  except FileNotFoundError:
    return path
  return candidate if os.path.exists(candidate) else path


def config_root(config_path: str) -> str:
  """The repository a config file belongs to: the parent of its directory."""
  return os.path.dirname(os.path.dirname(os.path.abspath(config_path)))


def resolve(value: str, root: str) -> str:
  """A relative path from a config: as is if it exists here, else under `root` if it
  exists there; otherwise unchanged (the job's own check names it)."""
  if not value or os.path.isabs(value) or os.path.exists(value) or "://" in value:
    return value
  candidate = os.path.join(root, value)
  return candidate if os.path.exists(candidate) else value


def resolve_config(config, root: str) -> None:
  """Resolves, in place, every path-named string value of a config (a locked
  ml_collections ConfigDict still takes new values)."""
  for key in list(config.keys()):
    value = config[key]
    if hasattr(value, "keys"):
      resolve_config(value, root)
    elif isinstance(value, str) and key.endswith(PATH_KEYS):
      config[key] = resolve(value, root)
