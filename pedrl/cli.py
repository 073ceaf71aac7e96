"""The command line every entry point shares (`cli.run(main)`).

- Logging: pedrl.logs' quiet setup (`--verbosity=1` shows everything).
- Mistakes: a wrong flag, config path, variant, override key or value ends the
  command with one `error: …` line and exit code 1 before main runs, so before any
  workdir is made. (ml_collections would print the config file's traceback, and
  report a missing file only when the config is first read.)
- From any directory: `--config=experiments/x.py:…` is found in pedrl's repository
  when it is not under the current directory, and the config's relative paths
  (testdata/…) are resolved as pedrl.paths says.
- `--helpshort` lists the flags pedrl's modules define for the command, not only
  those of its `__main__`.
- JAX's persistent compilation cache, on by default in `~/.cache/pedrl/jax` (or
  $PEDRL_COMPILATION_CACHE): a rerun, a resume or the next job with the same shapes
  loads its programs instead of compiling them. `--compilation_cache=off` turns it off.
"""
import os
import sys

from absl import app, flags

from pedrl import logs, paths


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


def _config(argv: list[str]):
  """The config that --config names, loaded again: after a failed parse absl keeps no value."""
  path = _config_arg(argv)
  try:
    return None if path is None else flags.FLAGS["config"].parser.parse(path)
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


def _missing_key(argv: list[str]) -> str | None:
  """The first `--config.a.b=…` override whose key the loaded config lacks."""
  config = _config(argv)
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
  argv = _config_flags(argv)
  try:
    rest = flags.FLAGS(argv)
  except (flags.Error, OSError) as e:  # OSError: an override of a config that failed to load.
    _exit(_load_error(_config(argv), _config_arg(argv)) or _flag_error(e))
  except (AttributeError, KeyError):  # ml_collections, for an override of no key.
    why = _missing_key(argv)
    if why is None:
      raise  # Raised inside the config file: a bug, with its traceback.
    _exit(why)
  if "config" in flags.FLAGS and flags.FLAGS["config"].value is not None:
    name = flags.FLAGS["config"].config_filename
    why = _load_error(flags.FLAGS["config"].value, name)
    if why:
      _exit(why)
    paths.resolve_config(flags.FLAGS.config, paths.config_root(name.split(":")[0]),
                         skip=_overrides(argv))
  return rest


def _exit(message: str):
  fail(f"{message} (--helpshort lists the flags)")


def fail(message: str):
  """Ends the command with one `error: …` line and exit code 1 (a mistake main finds)."""
  print(f"error: {message}", file=sys.stderr)
  sys.exit(1)


def _adopt_key_flags():
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
  of its start."""
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


def run(main) -> None:
  """`absl.app.run(main)` with the quiet logs, one-line flag errors, found configs and
  the compilation cache."""
  if "compilation_cache" not in flags.FLAGS:
    flags.DEFINE_string("compilation_cache", default_cache_dir(),
                        "JAX's persistent compilation cache directory; off: no cache.")
  logs.quiet()
  _adopt_key_flags()

  def with_cache(argv):
    use_compilation_cache(flags.FLAGS.compilation_cache)
    return main(argv)
  app.run(with_cache, flags_parser=parse_flags)
