"""Inference engine: sampling with a KV cache that carries across turns, and scoring.

The names below are loaded on first use, so that `pedrl.engine.params` (what config
files and settings need) imports without JAX."""
import importlib

_EXPORTS = {
    "RowSampling": "pedrl.engine.distribution", "token_logprobs": "pedrl.engine.distribution",
    "SamplingParams": "pedrl.engine.params",
    "Generation": "pedrl.engine.sampling", "Sampler": "pedrl.engine.sampling",
    "generate_greedy": "pedrl.engine.sampling",
    "Scorer": "pedrl.engine.scoring", "Scores": "pedrl.engine.scoring",
    "sequence_logprobs": "pedrl.engine.scoring",
    "bucket": "pedrl.engine.shapes",
    "sequence_keys": "pedrl.streams",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
  if name not in _EXPORTS:
    raise AttributeError(f"module 'pedrl.engine' has no attribute {name!r}")
  value = getattr(importlib.import_module(_EXPORTS[name]), name)
  globals()[name] = value
  return value
