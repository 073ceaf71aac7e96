"""What the engine's compiled programs hold: the decode program's optimized HLO and
the buffer copies inside its loops (used by bench.cache_size and a test)."""
import re

import jax.numpy as jnp
import numpy as np

from pedrl.engine import Sampler, SamplingParams, sampling, sequence_keys


def loop_copies(hlo: str, min_elements: int) -> list[str]:
  """The `copy` ops of at least `min_elements` elements inside the while loops'
  bodies of an optimized HLO module's text."""
  bodies = set(re.findall(r"while\([^)]*\)[^\n]*body=%?([\w.\-]+)", hlo))
  if not bodies:
    raise ValueError("no while loop in this HLO module")
  found = []
  for comp in re.split(r"\n(?=\S)", hlo):  # One computation per top-level block.
    name = re.match(r"(?:ENTRY )?%?([\w.\-]+)", comp)
    if not name or name.group(1) not in bodies:
      continue
    for shape, op in re.findall(r"= \w+\[([\d,]*)\][^=]*? (copy(?:-start)?)\(", comp):
      if int(np.prod([int(d) for d in shape.split(",") if d] or [1])) >= min_elements:
        found.append(f"{op} [{shape}]")
  return found


def decode_hlo(sampler: Sampler, params, cache, rows, sp: SamplingParams) -> tuple[str, int]:
  """(optimized HLO, window) of the program `sampler.generate(params, rows, ..., sp,
  cache)` runs: the engine's own jitted decode function, lowered for these arguments."""
  tokens, mask, window = sampler._chunk(rows, cache, sp.max_new_tokens, need_token=True)
  real = jnp.ones((cache.batch,), bool)
  keys = sequence_keys(0, np.arange(cache.batch))
  low = sampling._generate.lower(sampler.model, params, cache, tokens, mask, real, keys, None,
                                 sp, window)
  return low.compile().as_text(), window
