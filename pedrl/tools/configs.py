r"""The config files and their variants, and one config resolved.

  python -m pedrl.tools.configs                                   # every file, a line per variant
  python -m pedrl.tools.configs --show=experiments/uco.py:paper   # one config, as a job reads it
  python -m pedrl.tools.configs --show=experiments/uco.py:tiny,lam=0.3 --config.rl.lr=1e-4

The listing imports each file and reads its docstring and `VARIANT_HELP` (a dict,
one line per variant): config files import only the settings types, never JAX,
so the whole listing takes a fraction of a second. `--show` loads one config as
the job does (`pedrl.cli`), so the same overrides work and the same mistakes
give the same one-line errors, and relative paths come out resolved as the job
would read them. It prints one `key.path=value` line per
field, sorted: each is what `--config.key.path=value` sets. `tests/tools/test_configs_tool.py`
checks that each file's `VARIANT_HELP` names exactly the variants its `get_config` accepts.
"""
import dataclasses
import glob
import os
import sys
import typing

from absl import app, flags

from pedrl import cli, paths

if typing.TYPE_CHECKING:  # Annotations only: read_configs imports it.
  import ml_collections

flags.DEFINE_string("show", None, "Print one config resolved, e.g. experiments/uco.py:paper; "
                    "override fields as a job does (--config.rl.lr=1e-6).")


@dataclasses.dataclass(frozen=True)
class ConfigFile:
  """One file of experiments/: its path as a user types it, what it is, its variants."""
  name: str  # experiments/uco.py
  summary: str  # The docstring's first paragraph, on one line.
  variants: dict[str, str]  # As typed after the colon (`lam=<float>`) -> what it is.


def read(path: str) -> ConfigFile:
  """A config file's summary and variants, from the file imported; a file without
  `VARIANT_HELP` is an error naming it (a new config file must describe its variants)."""
  module = cli.config_module(path)
  variants = getattr(module, "VARIANT_HELP", None)
  if variants is None:
    raise ValueError(f"{path}: no VARIANT_HELP (a dict: variant -> one line)")
  if not (isinstance(variants, dict) and all(isinstance(v, str) for v in variants.values())):
    raise ValueError(f"{path}: VARIANT_HELP must be a dict of strings")
  name = os.path.join("experiments", os.path.basename(path))
  summary = " ".join((module.__doc__ or "").strip().split("\n\n")[0].split())
  return ConfigFile(name, summary, dict(variants))


def config_files() -> list[ConfigFile]:
  """Every config file of pedrl's repository (a clone's or the installed package's)."""
  pattern = os.path.join(paths.repo_root(), "experiments", "*.py")
  return [read(p) for p in sorted(glob.glob(pattern)) if not os.path.basename(p).startswith("_")]


def listing(files: list[ConfigFile]) -> str:
  lines = []
  for f in files:
    lines += ["", f"{f.name}  {f.summary}"]
    width = max(map(len, f.variants))
    lines += [f"  {v:<{width}}  {what}" for v, what in f.variants.items()]
  lines += ["", "Variants combine with commas (experiments/uco.py:tiny,lam=0.3); any field is "
            "overridden with --config.KEY=VALUE.",
            "Print one config: python -m pedrl.tools.configs --show=experiments/uco.py:paper"]
  return "\n".join(lines[1:])


def _list(argv) -> None:
  if len(argv) > 1:
    sys.exit(f"error: unexpected arguments {argv[1:]} (--show=FILE.py:VARIANT prints one config)")
  print(listing(config_files()))


def flat(config: "ml_collections.ConfigDict", prefix: str = "") -> list[str]:
  """A config as `key.path=value` lines, each what `--config.key.path=value` would set."""
  lines = []
  for key in sorted(config.keys()):
    value = config[key]
    if hasattr(value, "keys"):
      lines += flat(value, f"{prefix}{key}.")
    else:
      lines.append(f"{prefix}{key}={value if isinstance(value, str) else repr(value)}")
  return lines


def _show(argv) -> None:
  del argv
  print(f"# {flags.FLAGS['config'].config_filename}")
  print("\n".join(flat(flags.FLAGS.config)))


def _as_config(argv: list[str]) -> list[str]:
  """`--show X` / `--show=X` as the `--config X` / `--config=X` the jobs' loading reads."""
  return ["--config" + a[len("--show"):] if a == "--show" or a.startswith("--show=") else a
          for a in argv]


def main() -> None:
  if not any(a.startswith(("--show", "--config")) for a in sys.argv[1:]):
    app.run(_list)
    return
  from ml_collections import config_flags
  config_flags.DEFINE_config_file("config", None, "The config to print (given as --show).")
  sys.argv[:] = _as_config(sys.argv)
  cli.run(_show)


if __name__ == "__main__":
  main()
