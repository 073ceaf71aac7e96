"""What decides a sharded job's numbers (`EvalProtocol`), and the settings it records.

Every shard of a workdir records its job's protocol in its status file
(pedrl.eval.shards): a shard whose protocol differs is refused, and the merge
reads from it how the metrics are computed. A protocol has the fields every
evaluation has (its kind, seed and shard count) and its job's settings
sections as JSON (`sections`, e.g. "eval", "tutor", "bench"): those are
recorded and compared whole, and read back only as the settings types they
were written from (`section`), never by key path.

JSON is the file's form only (`to_dict`, `from_dict`). `from_dict` reads the
protocols of every pedrl that wrote one: a field a file lacks takes the value
runs had before it was recorded (`BEFORE`, and each reader's `before`), so
shards written before a field existed still merge, and a resumed workdir's old
shards compare equal to the protocol a job builds today.
"""
import dataclasses
import json
from typing import Any, Mapping, TypeVar

# Re-exported: defined there, importable without JAX.
from pedrl.eval.settings import ShardSettings, EvalSettings, TutorRun

# 1: the first versioned protocol; the same layout as the unversioned ones before it.
SCHEMA_VERSION = 1
TUTORING = "tutoring"
# What a protocol that lacks a field was written as: before kinds, every evaluation was
# a tutoring one; before the schema field, version 1.
BEFORE = {"kind": TUTORING, "schema": 1}
_FIELDS = ("schema", "kind", "seed", "num_shards")

T = TypeVar("T")


def kind_of(row: Mapping[str, Any]) -> str:
  """The kind of a protocol as a file recorded it (metrics.json's), without reading the
  rest: a report groups rows by it."""
  return {**BEFORE, **row}["kind"]


def jsonable(settings: Any) -> dict:
  """A settings dataclass as a protocol records it: as JSON reads it back (tuples as lists),
  so a resumed shard compares equal."""
  return json.loads(json.dumps(dataclasses.asdict(settings)))


@dataclasses.dataclass(frozen=True)
class EvalProtocol:
  """Everything that decides a sharded job's numbers: shards of one workdir agree on it."""
  kind: str  # The job: an evaluation's (pedrl.eval.evaluations.TASKS) or another's ("baselines").
  seed: int  # Its sampling and bootstrap seed.
  num_shards: int
  # Each settings section of the job as JSON ({"eval": {...}, "tutor": {...}, ...}), and
  # the single values it records beside them ("batch_problems": 2).
  sections: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  schema: int = SCHEMA_VERSION

  def __post_init__(self):
    if clash := set(_FIELDS) & set(self.sections):
      raise ValueError(f"protocol sections {sorted(clash)} clash with its fields")

  def section(self, name: str, settings_type: type[T],
              before: Mapping[str, Any] | None = None) -> T:
    """Section `name` read as `settings_type`, from the fields that type declares: the
    section's value, else `before`'s (what runs did before the field was recorded),
    else the type's default; ValueError naming the section when that fails."""
    names = {f.name for f in dataclasses.fields(settings_type)}
    given = {**(before or {}), **self.sections.get(name, {})}
    try:
      return settings_type(**{k: v for k, v in given.items() if k in names})
    except (TypeError, ValueError) as e:
      raise ValueError(f"protocol section {name!r} is no {settings_type.__name__}: {e}") from None

  def to_dict(self) -> dict:
    return {"schema": self.schema, "kind": self.kind, "seed": self.seed,
            "num_shards": self.num_shards, **self.sections}

  @classmethod
  def from_dict(cls, row: Mapping[str, Any]) -> "EvalProtocol":
    """The protocol a status file recorded (any version this pedrl reads)."""
    row = {**BEFORE, **row}
    if row["schema"] != SCHEMA_VERSION:
      raise ValueError(f"protocol schema {row['schema']!r}; this pedrl reads "
                       f"{SCHEMA_VERSION} (use the pedrl that wrote it)")
    try:
      return cls(kind=row["kind"], seed=row["seed"], num_shards=row["num_shards"],
                 sections={k: v for k, v in row.items() if k not in _FIELDS})
    except KeyError as e:
      raise ValueError(f"a protocol without {e}") from None

  def differences(self, other: "EvalProtocol") -> str:
    """Where `other` differs, for an error message: "key: a there, b here; …"."""
    a, b = other.to_dict(), self.to_dict()
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return "; ".join(f"{k}: {json.dumps(a.get(k))} there, {json.dumps(b.get(k))} here"
                     for k in keys)
