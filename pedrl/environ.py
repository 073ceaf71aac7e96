"""pedrl's settings read from environment variables, parsed without importing JAX, so a
command can refuse a bad value before it loads anything."""
import math
import os

PROGRAM_STORE_MAX_GIB = "PEDRL_PROGRAM_STORE_MAX_GIB"
PROGRAM_STORE_DEFAULT_GIB = 4.0


def program_store_max_bytes() -> int | None:
  """The program store's size limit in bytes: $PEDRL_PROGRAM_STORE_MAX_GIB in GiB
  (unset or empty: 4; 0: no limit, None)."""
  raw = os.environ.get(PROGRAM_STORE_MAX_GIB, "").strip()
  try:
    gib = float(raw) if raw else PROGRAM_STORE_DEFAULT_GIB
  except ValueError:
    gib = -1.0
  if not (math.isfinite(gib) and gib >= 0):
    raise ValueError(f"{PROGRAM_STORE_MAX_GIB}={raw!r}: expected the program store's size "
                     "limit in GiB (0: none)")
  return max(1, int(gib * 2**30)) if gib else None
