"""The command line every entry point shares (`cli.run(main)`).

- Logging: pedrl.logs' quiet setup (`--verbosity=1` shows everything).
- Mistakes: a wrong flag, config path, variant, override key or value ends the
  command with one `error: …` line and exit code 1 before main runs, so before any
  workdir is made. (ml_collections would print the config file's traceback, and
  report a missing file only when the config is first read.)
- Fast: a job (`python -m pedrl.experiments.NAME`) checks its command line with
  `check_job` as its first statement, before its imports load JAX and the models'
  code: a missing --config or --workdir, a config file that is not there or is
  another job's, an unknown flag, a wrong variant, an override of no key, a value
  of the wrong type or one the job's settings types refuse is reported in a
  fraction of a second. Config files and the settings types import no JAX, so
  loading and reading a config here costs little.
- From any directory: `--config=experiments/x.py:…` is found in pedrl's repository
  when it is not under the current directory, and the config's relative paths
  (testdata/…) are resolved as pedrl.paths says.
- `--helpshort` lists the flags pedrl's modules define for the command, not only
  those of its `__main__`.
- JAX's persistent compilation cache, on by default in `~/.cache/pedrl/jax` (or
  $PEDRL_COMPILATION_CACHE): a rerun, a resume or the next job with the same shapes
  loads its programs instead of compiling them. `--compilation_cache=off` turns it off.

This module imports neither JAX nor pedrl's models: its checks run before them.
"""
from collections.abc import Callable
import contextlib
import importlib.util
import os
import sys
import types
from typing import Any

from absl import app, flags
from ml_collections import config_flags

from pedrl import environ, fields, logs, paths

# pedrl.distributed.MODES (not imported: it imports JAX).
MULTIHOST_MODES = ("auto", "on", "off")
_HELP = ("help", "helpshort", "helpfull", "helpxml", "h", "?")
# Flags a job's libraries define when the job imports them (orbax's
# experimental_orbax_*): unknown to the early check, left to the full parse.
_LIBRARY_FLAG_PREFIXES = ("experimental_",)
_example_config = "experiments/uco.py:tiny"  # The job's, for the missing --config's line.


def define_job_flags(example_config: str, workdir_help: str) -> None:
  """The flags every job takes: --config (a config file and variant), --workdir,
  --multihost and a launch of several processes. Defined again (by the job's module
  after the early check, or by a job that builds on another's module: cpa on
  mathtutorbench), the flags stay and their help becomes the latest definer's."""
  global _example_config
  _example_config = example_config
  if "config" in flags.FLAGS:
    flags.FLAGS["config"].help = f"Config file, e.g. {example_config}."
    flags.FLAGS["workdir"].help = workdir_help
    return
  config_flags.DEFINE_config_file("config", None, f"Config file, e.g. {example_config}.")
  flags.DEFINE_string("workdir", None, workdir_help, required=True)
  flags.DEFINE_enum("multihost", "auto", MULTIHOST_MODES,
                    "jax.distributed.initialize(): auto = when the environment shows several "
                    "processes (TPU pod, SLURM, Open MPI, JAX_COORDINATOR_ADDRESS).")
  # A launch without a cluster manager (ssh, launch/local.sh): all three, or none.
  flags.DEFINE_string("coordinator_address", None,
                      "Process 0's HOST:PORT, for a job of several processes started by hand "
                      "(default: $JAX_COORDINATOR_ADDRESS).")
  flags.DEFINE_integer("num_processes", None, "How many processes the job has "
                       "(default: $JAX_NUM_PROCESSES).")
  flags.DEFINE_integer("process_id", None, "This process's index, 0 to num_processes - 1 "
                       "(default: $JAX_PROCESS_ID).")


def _define_command_flags() -> None:
  """The flags cli itself reads (every command has them), and absl's help flags."""
  if "compilation_cache" not in flags.FLAGS:
    flags.DEFINE_string("compilation_cache", default_cache_dir(),
                        "JAX's persistent compilation cache directory; off: no cache.")
  app.define_help_flags()


def check_job(module: str, args: list[str], read: Callable[[str], Any] | None=None) -> None:
  """The early check of a job's command line (`args`: its arguments), which a job's
  module (`module`, its name) runs first when started as a command:

    if __name__ == "__main__":
      cli.check_job(__spec__.name, sys.argv[1:], read)

  Its flags, the config file and whose it is, then the config loaded with its variant
  and overrides, then `read(config)` (the job's settings types, which refuse a value
  out of range with a ValueError); each mistake one `error:` line (exit 1)."""
  name = module.rpartition(".")[2]
  example = name if os.path.exists(paths.config_file(f"experiments/{name}.py")) else "uco"
  _define_command_flags()
  define_job_flags(f"experiments/{example}.py:tiny", "Output directory.")
  _check_job_flags(args, early=True, module=module)
  if any(n in _HELP or n in ("flagfile", "undefok") for n, _ in _given_flags(args)):
    return
  # The config alone, on flags of its own: the job's flags are not all defined yet.
  config_only = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=config_only)
  _parse_config(config_only, [module] + _config_args(_config_flags(args)))
  if read is not None:
    try:
      read(config_only["config"].value)
    except ValueError as e:  # The line the job's own reading of its settings would end with.
      fail(str(e))


def _given_flags(argv: list[str]) -> list[tuple[str, str | None]]:
  """(name, value) of each flag in `argv` (arguments only), as absl reads them: `--x=v`,
  `-x=v`, `--x v` for a known non-boolean flag, `--x`/`--nox` for a boolean; the value is
  None where none is given. Arguments after `--` are not flags."""
  out, i = [], 0
  while i < len(argv) and argv[i] != "--":
    arg = argv[i]
    if arg.startswith("-") and arg != "-":
      name, eq, value = arg.lstrip("-").partition("=")
      if not eq and name in flags.FLAGS and not flags.FLAGS[name].boolean and i + 1 < len(argv):
        value, i = argv[i + 1], i + 1
      out.append((name, value if eq or value else None))
    i += 1
  return out


def _job_module(name: str) -> bool:
  """A job's module (each defines the job flags); other commands may import one (the
  learning benchmark imports the training job) without being a job."""
  return name.startswith("pedrl.experiments.")


def _is_job() -> bool:
  """The command running is a job: its __main__ is a job's module."""
  spec = getattr(sys.modules.get("__main__"), "__spec__", None)
  return spec is not None and _job_module(spec.name) and "config" in flags.FLAGS


def _check_job_flags(argv: list[str], early: bool = False, module: str | None = None) -> None:
  """A job's command line (arguments only): its flags exist, --config names a file and
  --workdir is given; each mistake one `error:` line. Nothing is checked where absl
  acts first (help) or where the arguments are not all here (--flagfile). `early`:
  before the job's module is imported, flags its libraries define are not known yet."""
  given = _given_flags(_config_flags(argv))
  if any(n in _HELP or n in ("flagfile", "undefok") for n, _ in given):
    return
  for name, _ in given:
    known = name.startswith("config.") or name in flags.FLAGS or (
        name.startswith("no") and name[2:] in flags.FLAGS and flags.FLAGS[name[2:]].boolean)
    if not known and not (early and name.startswith(_LIBRARY_FLAG_PREFIXES)):
      _exit(f"Unknown command line flag '{name}'")
  values = dict(given)
  if not values.get("config"):
    _exit(f"--config is missing: a config file and its variant, e.g. --config={_example_config}")
  path = values["config"].partition(":")[0]
  if not os.path.isfile(path):
    _exit(f"--config={values['config']}: cannot load it (no such file: {path}, neither under "
          "the current directory nor in pedrl's repository)")
  if not values.get("workdir"):
    _exit("--workdir is missing: the job's output directory, e.g. --workdir=/tmp/run")
  if module is not None:
    check_config_job(values["config"], module, dict(_given_flags(argv)).get("config"))


def config_module(path: str) -> types.ModuleType:
  """A config file imported as a module of its own (not added to sys.modules). Cheap:
  config files import only settings types, no JAX (tests/project/test_layers.py)."""
  name = "pedrl_config_" + os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def config_entry_point(path: str) -> str | None:
  """The job a config file is for: its `ENTRY_POINT` (None: the file names none, as a
  config written before it did, or it does not load: its own error comes from loading
  it as the config)."""
  try:
    entry = getattr(config_module(path), "ENTRY_POINT", None)
  except Exception:  # pylint: disable=broad-except
    return None
  return entry if isinstance(entry, str) else None


# Jobs that run the configs of other entry points: the training entry points, named for
# their papers' methods, are one job (GRPO), which runs any of their configs itself.
RUNS_CONFIGS_OF = {"pedrl.experiments.grpo": tuple(
    f"pedrl.experiments.{name}" for name in ("uco", "pedagogical_rl", "thinking"))}


def check_config_job(config_arg: str, module: str, given: str | None = None) -> None:
  """Refuses a config file (`config_arg`, found; `given`, as typed) of another job
  (`thinking` given experiments/uco.py), which would otherwise run that job's settings
  under this one's name."""
  owner = config_entry_point(config_arg.partition(":")[0])
  if owner and owner != module and owner not in RUNS_CONFIGS_OF.get(module, ()):
    mine = f"experiments/{module.rpartition('.')[2]}.py"
    fail(f"--config={given or config_arg} is a config of {owner}, not of {module}: run it "
         f"with `python -m {owner}`, or give {module} its own config"
         + (f" ({mine})" if os.path.exists(paths.config_file(mine)) else ""))


def _config_args(argv: list[str]) -> list[str]:
  """The --config and --config.a.b arguments of `argv` (`--config.a.b V` with its value)."""
  out = []
  for i, arg in enumerate(argv):
    if arg == "--":
      break
    if arg.startswith(("--config=", "--config.")):
      out.append(arg)
      if "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
        out.append(argv[i + 1])
  return out


def _config_flags(argv: list[str]) -> list[str]:
  """`--config X` as `--config=X`, and its file looked up in pedrl's repository if not here."""
  out, i = [], 0
  while i < len(argv):
    arg = argv[i]
    if arg == "--config" and i + 1 < len(argv):
      arg, i = f"--config={argv[i + 1]}", i + 1
    if arg.startswith("--config="):
      path, colon, variant = arg[len("--config="):].partition(":")
      arg = f"--config={paths.config_file(path)}{colon}{variant}"
    out.append(arg)
    i += 1
  return out


def _flag_error(e: Exception) -> str:
  """One line for a flag error: a config file's traceback shortened to its last line."""
  lines = [line.strip() for line in str(e).splitlines() if line.strip()]
  if len(lines) > 1 and lines[0].startswith("flag --"):  # "flag --config=…: ValueError: why"
    return f"{lines[0].split(': ')[0][5:]}: {lines[-1].split(': ', 1)[-1]}"
  return " ".join(lines)


def _config_arg(argv: list[str]) -> str | None:
  return next((a[len("--config="):] for a in argv if a.startswith("--config=")), None)


def _config(argv: list[str], flag_values=flags.FLAGS):
  """The config that --config names, loaded again: after a failed parse absl keeps no value."""
  path = _config_arg(argv)
  try:
    return None if path is None else flag_values["config"].parser.parse(path)
  except Exception:  # Its own error is reported by the parse that failed.
    return None


def _load_error(config, name: str) -> str | None:
  """The load error ml_collections keeps in a config until it is read."""
  try:
    if config is not None:
      config.keys()
  except OSError as e:
    detail = [line.strip() for line in str(e).splitlines() if line.strip()]
    return f"--config={name}: cannot load it ({detail[-1]})"
  return None


def _overrides(argv: list[str]) -> list[str]:
  """The dotted keys of the `--config.a.b=…` overrides."""
  return [a[len("--config."):].split("=")[0] for a in argv if a.startswith("--config.")]


def _missing_key(argv: list[str], flag_values=flags.FLAGS) -> str | None:
  """The first `--config.a.b=…` override whose key the loaded config lacks."""
  config = _config(argv, flag_values)
  for key_path in _overrides(argv) if config is not None else ():
    node, keys = config, key_path.split(".")
    for i, key in enumerate(keys):
      if not hasattr(node, "keys") or key not in node:
        where = "--config." + ".".join(keys[:i]) if i else "the config"
        return (f"--config.{key_path}: {where} has no key {key!r}"
                + (f" (it has: {', '.join(sorted(node.keys()))})" if hasattr(node, "keys") else ""))
      node = node[key]
  return None


def parse_flags(argv: list[str]) -> list[str]:
  """absl's parse, with every mistake reported as one `error: …` line (exit 1); then the
  config's own relative paths resolved (pedrl.paths), not those given as overrides."""
  if _is_job():
    _check_job_flags(argv[1:], module=sys.modules["__main__"].__spec__.name)
  argv = _config_flags(argv)
  rest = _parse_config(flags.FLAGS, argv)
  if "config" in flags.FLAGS and flags.FLAGS["config"].value is not None:
    name = flags.FLAGS["config"].config_filename
    paths.resolve_config(flags.FLAGS.config, paths.config_root(name.split(":")[0]),
                         skip=_overrides(argv))
  return rest


def _parse_config(flag_values, argv: list[str]) -> list[str]:
  """absl's parse of `argv` (found configs, `_config_flags`) into `flag_values`, every
  mistake of the config (its file, variant, an override's key or value) one `error:` line;
  an override of a renamed key names its new one (pedrl.fields.RENAMED)."""
  for key in _overrides(argv):
    if why := fields.renamed(key):
      _exit(why)
  try:
    rest = flag_values(argv)
  except (flags.Error, OSError) as e:  # OSError: an override of a config that failed to load.
    _exit(_load_error(_config(argv, flag_values), _config_arg(argv)) or _flag_error(e))
  except (AttributeError, KeyError):  # ml_collections, for an override of no key.
    why = _missing_key(argv, flag_values)
    if why is None:
      raise  # Raised inside the config file: a bug, with its traceback.
    _exit(why)
  if "config" in flag_values and flag_values["config"].value is not None:
    why = _load_error(flag_values["config"].value, flag_values["config"].config_filename)
    if why:
      _exit(why)
  return rest


# Optional packages -> the pedrl extra that installs them (setup.py's extras_require).
EXTRAS = {"matplotlib": "plot", "torch": "test", "fastapi": "serve", "uvicorn": "serve",
          "prometheus_client": "serve", "tensorflow_datasets": "data",
          "all_minilm_l6_v2": "embed"}


def require(what: str, *modules: str) -> None:
  """Ends the command with one `error:` line naming the extra to install unless the
  optional `modules` are installed: found, not imported, so a command checks what it
  will need in milliseconds, before it loads or computes anything."""
  missing = [m for m in modules if importlib.util.find_spec(m) is None]
  if missing:
    extras = ",".join(sorted({EXTRAS[m] for m in missing}))
    fail(f"{what} needs {', '.join(missing)}, which pedrl installs only with an extra: "
         f'pip install "pedrl[{extras}]"')


def input_path(flag: str, value: str | None, checkpoint: bool = False) -> str | None:
  """A path flag's value found as config paths are (pedrl.paths.find: the current directory,
  then pedrl's repository), so a README command works from any directory. `checkpoint`:
  it must be a checkpoint directory (its config.json), else one `error:` line."""
  found = paths.find(value) if value else value
  if checkpoint and not (found and os.path.isfile(os.path.join(found, "config.json"))):
    fail(f"--{flag}={value}: not a checkpoint directory (no config.json), neither under the "
         "current directory nor in pedrl's repository")
  return found


def _exit(message: str) -> None:
  fail(f"{message} (--helpshort lists the flags)")


def fail(message: str) -> None:
  """Ends the command with one `error: …` line and exit code 1 (a mistake main finds)."""
  print(f"error: {message}", file=sys.stderr)
  sys.exit(1)


def _adopt_key_flags() -> None:
  """Makes the flags pedrl's modules define the command's own, for --helpshort."""
  main = sys.argv[0]
  for module, defined in list(flags.FLAGS.flags_by_module_dict().items()):
    if module.startswith("pedrl.") and module != main:
      for flag in defined:
        flags.FLAGS.register_key_flag_for_module(main, flag)


def default_cache_dir() -> str:
  return os.environ.get("PEDRL_COMPILATION_CACHE") or os.path.join(
      os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pedrl", "jax")


def use_compilation_cache(directory: str) -> None:
  """Caches every compiled program in `directory` ("off" or "": none). Programs that
  compile in under a second count too: a tiny run's dozens of them add up to most
  of its start. The engine's programs are also kept in its `pedrl-programs` folder,
  found without tracing (`pedrl.engine.programs`; $PEDRL_PROGRAM_STORE=off: not)."""
  if directory in ("", "off"):
    return
  settings = {"jax_compilation_cache_dir": directory,
              "jax_persistent_cache_min_compile_time_secs": 0.0}
  if "jax" in sys.modules:
    import jax
    for name, value in settings.items():
      jax.config.update(name, value)
  else:  # Read when JAX loads: a command's main checks its inputs before that.
    os.environ.update({name.upper(): str(value) for name, value in settings.items()})


def run(main: Callable[[list[str]], Any]) -> None:
  """`absl.app.run(main)` with the quiet logs, one-line flag errors, found configs and
  the compilation cache."""
  _define_command_flags()
  logs.quiet()
  _adopt_key_flags()

  def with_cache(argv):
    use_compilation_cache(flags.FLAGS.compilation_cache)
    try:  # Checked now, not at the first compiled program.
      environ.program_store_max_bytes()
    except ValueError as e:
      fail(str(e))
    return main(argv)
  with help_exits_0():
    app.run(with_cache, flags_parser=parse_flags)


@contextlib.contextmanager
def help_exits_0() -> None:
  """absl ends `--help`, `--helpshort` and `--helpfull` with exit code 1, as if they had
  failed; asked for, help is a success (exit 0), as other command lines' help is."""
  try:
    yield
  except SystemExit as e:
    asked = any(name in _HELP for name, _ in _given_flags(sys.argv[1:]))
    if e.code == 1 and asked:
      sys.exit(0)
    raise
