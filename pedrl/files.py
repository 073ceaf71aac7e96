"""How pedrl writes and reads its files: JSONL appended and synced, JSON replaced
atomically, and a JSON object read out of a model's reply.

Below every stage: the record types stay with their stage (dialogues in
pedrl.env.dialogue, evaluation records in pedrl.eval.records, ...) and call these.
Appending, a crash can cut at most the last line (`repair_jsonl` removes it); a
rewrite goes through a temporary file renamed over the old one, so a crash
leaves the old file or the new one, never a part. A reader's bad line raises
the caller's error type (a record error, a shard error) naming file and line.
"""
import ast
from collections.abc import Callable, Iterable
import json
import os
import re
import socket
from typing import Any, TypeVar

from absl import logging


def _temporary(path: str) -> str:
  """A name beside `path` no other writer uses: shards on several hosts write together."""
  return f"{path}.tmp.{socket.gethostname()}.{os.getpid()}"


T = TypeVar("T")


def write_lines(lines: Iterable[str], path: str, mode: str = "a") -> None:
  """One synced write of text lines: appended, or (mode "w") replacing `path` atomically."""
  target, path = path, (_temporary(path) if mode == "w" else path)
  with open(path, mode, encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in lines))
    f.flush()
    os.fsync(f.fileno())
  if path != target:
    os.replace(path, target)


def append_rows(rows: Iterable[dict], path: str, mode: str = "a") -> None:
  """Appends (or, mode "w", writes) JSON values, one a line."""
  write_lines([json.dumps(r) for r in rows], path, mode)


def repair_jsonl(path: str) -> int:
  """Cuts a partly written last line (no newline) off `path`; returns the bytes cut."""
  with open(path, "rb+") as f:
    data = f.read()
    keep = data.rfind(b"\n") + 1
    if keep < len(data):
      f.truncate(keep)
  return len(data) - keep


def read_rows(path: str, error: type[Exception] = ValueError) -> list:
  """The JSON values of a JSONL file (none if it does not exist); a line cut by a crash
  is removed first and logged, any other bad line raises `error` with its number."""
  if not os.path.exists(path):
    return []
  if cut := repair_jsonl(path):
    logging.warning("%s: removed a partly written last line (%d bytes)", path, cut)
  rows = []
  with open(path, encoding="utf-8") as f:
    for n, line in enumerate(f, 1):
      if line.strip():
        try:
          rows.append(json.loads(line))
        except json.JSONDecodeError as e:
          raise error(f"{path}, line {n}: not JSON ({e})") from None
  return rows


def read_records(path: str, make: Callable[[dict], T], what: str,
                 error: type[Exception] = ValueError) -> list[T]:
  """make(row) of each JSON row of a JSONL file (as `read_rows`); a row `make` refuses
  (ValueError, TypeError, KeyError, AttributeError) raises `error` naming the file, the
  record's number and `what` it is not."""
  out = []
  for n, row in enumerate(read_rows(path, error), 1):
    try:
      out.append(make(row))
    except (ValueError, TypeError, KeyError, AttributeError) as e:
      raise error(f"{path}, record {n}: not {what} ({e})") from None
  return out


def checked_schema(row: dict, version: int, what: str) -> dict:
  """A copy of a typed record's JSON row whose `schema` is `version`, the one this pedrl
  reads; a ValueError naming `what` record and both versions otherwise."""
  if row.get("schema") != version:
    raise ValueError(f"{what} record schema {row.get('schema')!r}; this pedrl reads {version}")
  return dict(row)


def write_json(path: str, value: Any) -> None:
  """`value` as indented JSON, synced and renamed over `path` (its folder made)."""
  os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
  tmp = _temporary(path)
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=2)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def read_json(path: str, error: type[Exception] = ValueError) -> Any:
  """The JSON value of `path`; a file that is not JSON raises `error` naming it."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except ValueError as e:
    raise error(f"{path}: not JSON ({e})") from None


# A model that writes LaTeX in a JSON string often leaves its backslashes single. Read as
# JSON, \frac is a form feed and "rac", \times a tab and "imes", \sqrt or \( an error.
# So a backslash JSON would misread is doubled (read as written), the reply's own escapes
# kept (a doubled backslash is matched first, as a pair):
# - one before a character JSON does not escape (\sqrt, \(, \{), \b or \f before a
#   letter (a backspace or form feed before a word is never meant), \u without four hex
#   digits (\underline), and \n, \t, \r opening a command whose rest is no word a line
#   or a tab would start (\neq, \times, \theta, \right);
# - in a reply that shows single-backslash LaTeX by one of those, also the commands whose
#   rest could be text (\ne, \tan, \to, \rangle): in another reply "Options:\ne.g. 5"
#   and "Col1\tan apple" hold the newline and the tab the model means.
_ALWAYS = (r"[^\"'\\/bfnrtu]|[bf][A-Za-z]|u(?![0-9A-Fa-f]{4})"
           r"|(?:n(?:eq|abla|eg|ot|otin|leq|geq|ewline|subseteq)"
           r"|t(?:imes|ext[a-z]*|heta|anh|au|frac|ilde|riangle[a-z]*|herefore)"
           r"|r(?:ight[a-z]*|ho|ceil|vert|Vert))(?![A-Za-z])")
_AMBIGUOUS = (r"(?:n(?:e|u|i|mid|exists|parallel)|t(?:an|o|op)|r(?:angle|floor|brace|brack))"
              r"(?![A-Za-z])")
_SINGLE_LATEX = re.compile(r"(?<!\\)(?:\\\\)*\\(?=" + _ALWAYS + ")")
_ESCAPE = re.compile(r"\\\\|\\(?=" + _ALWAYS + ")")
_ESCAPE_AMBIGUOUS = re.compile(r"\\\\|\\(?=" + _ALWAYS + "|" + _AMBIGUOUS + ")")


def latex_escaped(body: str) -> str:
  """`body` with every backslash JSON would misread as an escape doubled (see above)."""
  pattern = _ESCAPE_AMBIGUOUS if _SINGLE_LATEX.search(body) else _ESCAPE
  return pattern.sub(lambda m: m.group(0) if len(m.group(0)) == 2 else "\\\\", body)


def json_object(text: str) -> dict | None:
  """The object between the first '{' and the last '}' of a model's reply, as JSON or a
  Python literal, its keys lower-cased; None when there is none. LaTeX in its strings is
  read as written (\\frac, not a form feed and "rac"; `latex_escaped`). Judges, the
  oracle, the analysis labellers and the agents' JSON stages all read replies this way."""
  text = re.sub(r"```(?:json)?", "", text)
  start, end = text.find("{"), text.rfind("}")
  if start == -1 or end <= start:
    return None
  body = text[start:end + 1]
  escaped = latex_escaped(body)
  for load, source in ((json.loads, escaped), (ast.literal_eval, escaped),
                       (json.loads, body), (ast.literal_eval, body)):
    try:
      value = load(source)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
      continue
    if isinstance(value, dict):
      return {str(k).strip().lower(): v for k, v in value.items()}
  return None
