"""Loading a checkpoint's tokenizer, with errors that name the directory."""
import functools
import os
import typing

if typing.TYPE_CHECKING:  # Annotations only: transformers loads on first use.
  import transformers


class TokenizerError(ValueError):
  """A checkpoint's tokenizer is missing or lacks what a job needs."""


def load_tokenizer(path: str,
                   require_chat_template: bool = False) -> "transformers.PreTrainedTokenizerBase":
  """The Hugging Face tokenizer stored in `path` (never fetched from a hub).

  Args:
    path: a checkpoint or tokenizer directory.
    require_chat_template: dialogue jobs render every prompt through the
      model's own chat template; fail early when the tokenizer has none.
  """
  import transformers
  if not os.path.isdir(path):
    raise TokenizerError(f"{path}: tokenizer directory does not exist.")
  try:
    tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
  except (OSError, ValueError) as e:
    raise TokenizerError(f"{path}: no loadable tokenizer ({e}).") from e
  if require_chat_template and not getattr(tok, "chat_template", None):
    raise TokenizerError(
        f"{path}: the tokenizer has no chat template (neither chat_template.jinja nor a "
        "'chat_template' entry in tokenizer_config.json); dialogue prompts need one. "
        "Use an -Instruct checkpoint or copy its template into this directory.")
  return tok


@functools.lru_cache(maxsize=8)
def skipped_ids(tokenizer: "transformers.PreTrainedTokenizerBase") -> frozenset:
  """The token ids a reply's text leaves out with vLLM's skip_special_tokens (its default):
  the tokenizer's special tokens, those of its special-tokens map and every added token
  flagged special (what transformers' decode(..., skip_special_tokens=True) leaves out),
  never a thinking tag, which a reasoning split and clients read in the text even where
  a tokenizer marks it special."""
  tags = set()
  for tag in ("<think>", "</think>"):
    i = tokenizer.convert_tokens_to_ids(tag)
    if i is not None and tokenizer.convert_ids_to_tokens(i) == tag:  # Not the unknown token.
      tags.add(i)
  added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
  flagged = {i for i, t in added.items() if getattr(t, "special", False)}
  return frozenset(set(tokenizer.all_special_ids) | flagged) - tags


def decode(tokenizer: "transformers.PreTrainedTokenizerBase", ids: typing.Sequence[int],
           skip_special_tokens: bool = False) -> str:
  """`ids` as text; with `skip_special_tokens`, those of `skipped_ids` left out."""
  if skip_special_tokens:
    skipped = skipped_ids(tokenizer)
    ids = [t for t in ids if t not in skipped]
  return tokenizer.decode(list(ids))
