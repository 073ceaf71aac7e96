"""Shape helpers: the padded lengths the engine compiles its programs for, and rows
padded to them."""
from collections.abc import Sequence

import numpy as np

# Lengths are padded up to one of these (powers of two and 1.5x between), so a
# run compiles a handful of shapes; beyond the table, multiples of 1024. A decode
# step reads its whole window, so long dialogues need the steps past 1024 too.
LENGTH_BUCKETS = (8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
                  4096, 6144, 8192)

# The sampler pads a chunk of new tokens (a prompt, a dialogue's next turn) to one
# of these: finer between 128 and 1024, where prefill is matmul-bound and padding
# costs what real tokens do. Chunk widths only: caches, windows and training
# batches keep LENGTH_BUCKETS.
CHUNK_BUCKETS = tuple(sorted(LENGTH_BUCKETS + (160, 224, 320, 448, 640, 896)))


def bucket(n: int, buckets: Sequence[int] = LENGTH_BUCKETS) -> int:
  """The smallest bucket >= n."""
  for b in buckets:
    if b >= n:
      return b
  return -(-n // 1024) * 1024


def bucket_below(n: int, buckets: Sequence[int] = LENGTH_BUCKETS) -> int:
  """The largest bucket <= n (0 below the smallest): a length cut to a bucket
  fills a chunk with no padding."""
  if n > buckets[-1]:
    return n // 1024 * 1024
  return max((b for b in buckets if b <= n), default=0)


def left_padded(rows: Sequence[Sequence[int]], batch: int, width: int,
                pad_id: int) -> tuple[np.ndarray, np.ndarray]:
  """Token rows right-aligned in an int32 [batch, width] array of `pad_id` (a decoder's
  next token follows each row's last), and the bool mask of their tokens; rows past
  len(rows) stay empty for the caller to fill."""
  tokens = np.full((batch, width), pad_id, np.int32)
  mask = np.zeros((batch, width), bool)
  for i, r in enumerate(rows):
    tokens[i, width - len(r):], mask[i, width - len(r):] = r, True
  return tokens, mask
