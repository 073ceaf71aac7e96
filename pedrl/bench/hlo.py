"""What the engine's compiled programs hold: the decode program's optimized HLO, and
the buffer copies and collectives inside its loops (used by bench.cache_size and tests)."""
import re
from collections.abc import Iterable, Sequence

import numpy as np

from pedrl.engine import Sampler, SamplingParams, sampling, sequence_keys
from pedrl.models.decoder import KVCache, Params

# With their asynchronous forms' starts (a GPU's).
COLLECTIVES = tuple(op + start for op in ("all-reduce", "all-gather", "reduce-scatter",
                                          "all-to-all", "collective-permute")
                    for start in ("", "-start"))


def loop_ops(hlo: str, ops: Iterable[str]) -> list[tuple[str, str]]:
  """(op, result type) of each instruction named in `ops` (e.g. "copy", "all-reduce")
  inside the while loops' bodies of an optimized HLO module's text; a tuple result's
  type is its whole parenthesized list."""
  bodies = set(re.findall(r"while\([^)]*\)[^\n]*body=%?([\w.\-]+)", hlo))
  if not bodies:
    raise ValueError("no while loop in this HLO module")
  wanted = "|".join(re.escape(op) for op in sorted(ops, key=len, reverse=True))
  found = []
  for comp in re.split(r"\n(?=\S)", hlo):  # One computation per top-level block.
    name = re.match(r"(?:ENTRY )?%?([\w.\-]+)", comp)
    if not name or name.group(1) not in bodies:
      continue
    for result, op in re.findall(rf"= (\([^=]*?\)|\w+\[[\d,]*\]\S*) ({wanted})\(", comp):
      found.append((op, result))
  return found


def loop_copies(hlo: str, min_elements: int) -> list[str]:
  """The `copy` ops of at least `min_elements` elements (a tuple's first, for an async
  copy's start) inside the while loops' bodies of an optimized HLO module's text."""
  found = []
  for op, result in loop_ops(hlo, ("copy", "copy-start")):
    shape = re.search(r"\w+\[([\d,]*)\]", result).group(1)
    if int(np.prod([int(d) for d in shape.split(",") if d] or [1])) >= min_elements:
      found.append(f"{op} [{shape}]")
  return found


def decode_hlo(sampler: Sampler, params: Params, cache: KVCache, rows: Sequence[Sequence[int]],
               sp: SamplingParams) -> tuple[str, int]:
  """(optimized HLO, window) of the program `sampler.generate(params, rows, ..., sp,
  cache)` runs: the engine's own jitted decode function, lowered for these arguments
  as the sampler runs it (its rows placed on its mesh, `Sampler.on_mesh`)."""
  tokens, mask, window = sampler._chunk(rows, cache, sp.max_new_tokens, need_token=True)
  b = cache.batch
  real, keys = sampler._rows(np.ones((b,), bool)), sampler._rows(sequence_keys(0, np.arange(b)))
  low = sampler.on_mesh(sampling._generate.lower, sampler.model, params, cache, tokens, mask,
                        real, keys, None, sp, window, None, sampler._shrink_at(b))
  return low.compile().as_text(), window
