"""An encoder model's /v1/embeddings: `pedrl.rewards.embedding.Embedder` (UCO's
embedder: CLS or mean pooling as the checkpoint's sentence-transformers config
says, L2-normalised) on one worker thread.

Texts longer than the encoder's limit are truncated to it, as sentence-transformers
and the Embedder do (OpenAI's API would refuse them instead).
"""
import asyncio
import concurrent.futures
from collections.abc import Callable

import numpy as np

from pedrl.engine.shapes import LENGTH_BUCKETS
from pedrl.rewards.embedding import Embedder
from pedrl.serve.openai_types import APIError

MAX_INPUTS = 2048  # Texts per request, as OpenAI's API allows.
BATCH = 16  # Texts per encoder call: the row buckets warmed up are 8 and 16.


class Encoder:
  """Embeddings of one encoder checkpoint, computed off the event loop."""

  def __init__(self, path: str) -> None:
    self.embedder = Embedder(path, batch_size=BATCH)
    self.tokenizer = self.embedder.tokenizer
    self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pedrl-encoder")

  def _embed(self, texts: list[str]):
    used = sum(map(len, self.tokenizer(texts, truncation=True,
                                       max_length=self.embedder.max_length)["input_ids"]))
    return self.embedder(texts), used

  async def embed(self, texts: list[str]) -> tuple[np.ndarray, int]:
    """(vectors [N, E], prompt tokens used)."""
    if len(texts) > MAX_INPUTS:
      raise APIError(400, f"at most {MAX_INPUTS} inputs per request", param="input")
    return await asyncio.get_running_loop().run_in_executor(self._worker, self._embed, texts)

  def warmup(self, progress: Callable[[int, int, str], None] | None = None) -> int:
    """Every (rows, length) program the embedder can run; returns how many."""
    lengths = [b for b in LENGTH_BUCKETS if b < self.embedder.max_length]
    lengths.append(self.embedder.max_length)
    word = self.tokenizer.decode([self.tokenizer.convert_tokens_to_ids("a")]) or "a"
    total, done = 2 * len(lengths), 0
    for rows in (1, 9):  # Bucketed to 8 and 16 rows.
      for n in lengths:  # n - 2 one-token words and the two special tokens.
        self.embedder([" ".join([word] * (n - 2))] * rows)
        done += 1
        if progress:
          progress(done, total, f"embed {rows}x{n}")
    return total
