"""Where pedrl's config files and testdata are, from any directory.

Run from a clone (`pip install -e .`), they are the clone's `experiments/` and
`testdata/`; installed from a wheel (`pip install .`), the copies setup.py ships
inside the package (`pedrl/_bundled/`). A relative path written in a config
file is resolved against that file's repository (the parent of its
directory), so `--config=experiments/uco.py:tiny` and its `testdata/…` paths
work from anywhere; a path given as an override on the command line stays
relative to the current directory.
"""
from collections.abc import Collection
import importlib.util
import os

import ml_collections

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
# How config keys naming files or directories end (tutor.path, rewards.uco.embedder, …).
# "_prompt": a prompt setting is a prompt's name or a file; only an existing file resolves.
PATH_KEYS = ("path", "dir", "_file", "embedder", "workdir", "_prompt")


def repo_root() -> str:
  """The directory holding pedrl's experiments/ and testdata/."""
  # The bundle first: it exists only in wheel installs, where site-packages/experiments
  # could be another distribution's.
  for root in (os.path.join(_PACKAGE, "_bundled"), os.path.dirname(_PACKAGE)):
    if os.path.isdir(os.path.join(root, "experiments")):
      return root
  raise FileNotFoundError(f"pedrl at {_PACKAGE} has no experiments/ beside it nor bundled: "
                          "reinstall it (`pip install .` ships them) or run from a clone")


def config_file(path: str) -> str:
  """A config file as given if it exists, else the same relative path in pedrl's repository."""
  return find(path)


def find(path: str) -> str:
  """A path a user typed (a config file, a path flag's checkpoint directory, a tool's
  argument): as given if it exists, else the same relative path in pedrl's repository
  (`testdata/models/qwen2` from any directory) if it exists there, else as given (the
  command names it missing)."""
  if not path or os.path.isabs(path) or os.path.exists(path):
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
  """A relative path from a config file: under `root` (the config's repository) when it
  exists there; otherwise unchanged (relative to the current directory; the job's own
  check names it if it is missing)."""
  if not value or os.path.isabs(value) or "://" in value:
    return value
  candidate = os.path.join(root, value)
  return candidate if os.path.exists(candidate) else value


def resolve_config(config: ml_collections.ConfigDict, root: str, skip: Collection[str] = (),
                   prefix: str = "") -> None:
  """Resolves, in place, every path-named string value of a config (a locked
  ml_collections ConfigDict still takes new values), except the dotted keys in `skip`:
  values the user gave on the command line, which are relative to where they typed."""
  for key in list(config.keys()):
    value, dotted = config[key], prefix + key
    if hasattr(value, "keys"):
      resolve_config(value, root, skip, dotted + ".")
    elif isinstance(value, str) and key.endswith(PATH_KEYS) and dotted not in skip:
      config[key] = resolve(value, root)


def load_config(file: str, variant: str = "") -> ml_collections.ConfigDict:
  """experiments/FILE (e.g. "uco.py") of pedrl's repository: get_config(variant), its
  relative paths resolved; for code that builds a job without the command line."""
  path = os.path.join(repo_root(), "experiments", file)
  spec = importlib.util.spec_from_file_location(f"pedrl_config_{file[:-3]}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  config = module.get_config(variant) if variant else module.get_config()
  resolve_config(config, config_root(path))
  return config
