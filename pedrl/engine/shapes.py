"""Shape helpers: the padded lengths the engine compiles its programs for."""

# Lengths are padded up to one of these (powers of two and 1.5x between), so a
# run compiles a handful of shapes; beyond the table, multiples of 1024. A decode
# step reads its whole window, so long dialogues need the steps past 1024 too.
LENGTH_BUCKETS = (8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072,
                  4096, 6144, 8192)


def bucket(n: int, buckets=LENGTH_BUCKETS) -> int:
  """The smallest bucket >= n."""
  for b in buckets:
    if b >= n:
      return b
  return -(-n // 1024) * 1024
