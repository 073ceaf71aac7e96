"""Variant arguments: the text after the colon in `--config=experiments/uco.py:tiny,lam=0.3`.

A config file declares its variants once, each name with its kind:

  VARIANTS = dict(lam=float, hard=bool, tiny=bool)

  def get_config(arg="paper"):
    v = variants.parse(arg, VARIANTS)  # v.lam: a float, or None if not given; v.hard: a bool.

Kinds: `bool`, a flag (`hard` or `hard=true`); `int`, `float` or `str`, a value (`lam=0.3`; numbers
also compactly, `lam0.3`, the configs' older spelling); a tuple of names, one of them
(`condition=no_think` or the bare `no_think`; the first is the default). Items are separated
by commas; `paper` sets nothing (every config's defaults are its paper's).
"""
import re
import types

_COMPACT = re.compile(r"([a-z_]+?)([-+]?\.?\d.*)")  # lam0.3, alpha2, c.5


def parse(arg: str, spec: dict) -> types.SimpleNamespace:
  """`arg`'s values by `spec`'s names; raises ValueError naming the item and the valid ones."""
  def fail(why):
    raise ValueError(f"variant {arg!r}: {why}; valid: {_describe(spec)}") from None

  values = {k: False if kind is bool else kind[0] if isinstance(kind, tuple) else None
            for k, kind in spec.items()}
  given = set()
  for item in (s.strip() for s in arg.split(",")):
    if item in ("", "paper"):
      continue
    key, value = _split(item, spec)
    if key not in spec:
      fail(f"unknown {'key' if '=' in item else 'variant'} {key!r}")
    if key in given:
      fail(f"{key} given twice")
    given.add(key)
    try:
      values[key] = _convert(spec[key], value)
    except ValueError:
      fail(f"{key} needs a value" if value is None else f"bad value {key}={value}")
  return types.SimpleNamespace(**values)


def _split(item: str, spec: dict) -> tuple[str, str | None]:
  """(key, value text) of `key=value`, a flag, a bare choice or a compact `lam0.3`."""
  if "=" in item:
    key, value = item.split("=", 1)
    return key.strip(), value.strip()
  if item in spec:
    return item, None
  for key, kind in spec.items():
    if isinstance(kind, tuple) and item in kind:
      return key, item
  m = _COMPACT.fullmatch(item)
  if m and spec.get(m[1]) in (int, float):
    return m[1], m[2]
  return item, None


def _convert(kind, value: str | None):
  if kind is bool:
    if value is None or value.lower() in ("true", "1"):
      return True
    if value.lower() in ("false", "0"):
      return False
  elif isinstance(kind, tuple):
    if value in kind:
      return value
  elif value is not None:
    return kind(value)  # A ValueError for `lam=da`.
  raise ValueError(value)


def _describe(spec: dict) -> str:
  def one(key, kind):
    if kind is bool:
      return key
    if isinstance(kind, tuple):
      return f"{key}={'|'.join(kind)}"
    return f"{key}=<{kind.__name__}>"
  return ", ".join(["paper"] + [one(k, kind) for k, kind in spec.items()])
