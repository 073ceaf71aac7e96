"""Where data rows come from: a local file, or a split of a tensorflow-datasets dataset.

A source is a path (JSONL, or Parquet with pyarrow) or `tfds:NAME[/CONFIG]:SPLIT`:
`tfds:gsm8k:test`, `tfds:my_problems/v2:test`, or a Hugging Face dataset through
TFDS's own Hugging Face builder, `tfds:huggingface:rd211__big_math_rl_verified_filtered:test`
(the repository id's `/` written `__`, as TFDS names it). Every loader (problems, the
published test split, the reasoning benchmarks) reads its rows here and validates them
itself, so a file and a TFDS split of the same data give the same records, and a bad row
the same error.

TFDS splits are read through `builder.as_data_source` (random access over array_record
files), which needs no TensorFlow: the builder is asked for array_record files and is
prepared on first use (downloaded, for a catalog or Hugging Face dataset) into TFDS's data
directory ($TFDS_DATA_DIR, else ~/tensorflow_datasets). Text comes back as str, numbers
and lists as plain Python. A dataset TFDS wrote shuffles its examples (unless its builder
disables shuffling), so its rows come in TFDS's order, not the original file's.
"""
from collections.abc import Iterator
import dataclasses
import json
import os

TFDS_PREFIX = "tfds:"


class DataError(ValueError):
  """A data source or one of its rows cannot be used."""


@dataclasses.dataclass(frozen=True)
class TfdsSplit:
  name: str  # NAME[/CONFIG] (a namespace such as huggingface: included), as tfds.builder takes it.
  split: str


def tfds_split(source: str) -> TfdsSplit | None:
  """The TFDS dataset and split a `tfds:NAME[/CONFIG]:SPLIT` source names; None for a path."""
  if not source.startswith(TFDS_PREFIX):
    return None
  name, _, split = source[len(TFDS_PREFIX):].rpartition(":")
  if not name or not split:
    raise DataError(f"{source}: a TFDS source is tfds:NAME[/CONFIG]:SPLIT, e.g. tfds:gsm8k:test")
  return TfdsSplit(name, split)


def check(source: str | None, what: str) -> None:
  """Raises DataError naming `what` when `source` is neither an existing path nor a readable
  TFDS source (tensorflow-datasets installed); reads no rows."""
  if not source:
    raise DataError(f"no {what} given")
  if tfds_split(source) is not None:
    _tfds()
  elif not os.path.exists(source):
    raise DataError(f"{source}: no such {what}")


def _tfds():
  try:
    import tensorflow_datasets as tfds
  except ImportError as e:
    raise DataError("a tfds: source needs tensorflow-datasets (pip install "
                    "'pedrl[data]')") from e
  return tfds


def _plain(value):
  """A TFDS value as the JSON reader would give it: bytes as str, numpy as Python."""
  if isinstance(value, bytes):
    return value.decode("utf-8")
  if isinstance(value, dict):
    return {k: _plain(v) for k, v in value.items()}
  if hasattr(value, "tolist"):  # numpy scalars and arrays.
    return _plain(value.tolist())
  if isinstance(value, (list, tuple)):
    return [_plain(v) for v in value]
  return value


def tfds_rows(source: str) -> Iterator[tuple[int, dict]]:
  """Yields (row number from 1, dict) for each example of a TFDS split."""
  spec, tfds = tfds_split(source), _tfds()
  try:  # TFDS reads $TFDS_DATA_DIR once, at import: pedrl reads it at each call.
    builder = tfds.builder(spec.name, file_format="array_record",
                           data_dir=os.environ.get("TFDS_DATA_DIR"))
    builder.download_and_prepare()  # A no-op once prepared.
    data = builder.as_data_source(split=spec.split)
  except Exception as e:  # TFDS raises many kinds; the source is what the user must fix.
    raise DataError(f"{source}: TFDS cannot read it ({type(e).__name__}: {e})") from None
  for n in range(len(data)):
    yield n + 1, _plain(data[n])


def read_rows(source: str) -> Iterator[tuple[int, dict | str]]:
  """Yields (row number from 1, dict) or (row number, error message) per row of a local
  JSONL or Parquet file or a TFDS split."""
  if tfds_split(source) is not None:
    yield from tfds_rows(source)
    return
  if source.endswith(".parquet"):
    try:
      import pyarrow.parquet as pq
    except ImportError as e:
      raise DataError(f"{source}: reading Parquet needs pyarrow (pip install pyarrow)") from e
    for n, row in enumerate(pq.read_table(source).to_pylist(), 1):
      yield n, row
    return
  with open(source, "rb") as f:
    for n, raw in enumerate(f, 1):
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        yield n, f"not UTF-8 ({e.reason} at byte {e.start})"
        continue
      if not line.strip():
        yield n, "empty line"
        continue
      try:
        row = json.loads(line)
      except json.JSONDecodeError as e:
        yield n, f"not JSON ({e.msg})"
        continue
      yield n, row if isinstance(row, dict) else f"not a JSON object ({type(row).__name__})"


def json_rows(source: str) -> list[dict]:
  """Every row of a source (blank lines skipped); DataError naming the source and the
  first bad row. For benchmark files, where a bad row is never skipped."""
  check(source, "file")
  rows = []
  for n, row in read_rows(source):
    if row == "empty line":
      continue
    if isinstance(row, str):
      raise DataError(f"{source}, row {n}: {row}")
    rows.append(row)
  return rows
