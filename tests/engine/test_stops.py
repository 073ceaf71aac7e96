"""Stop strings across token boundaries: the device automaton vs a host string search."""
import numpy as np
import pytest

from pedrl.engine import stops
from pedrl.tokenizer import load_tokenizer


def run_table(stop, token_ids):
  """Index of the token at which the compiled table reports a hit, or None."""
  state = 0
  for n, t in enumerate(token_ids):
    packed = int(stop.table[state, t])
    if packed % 2:
      return n
    state = packed // 2
  return None


def host_first_hit(pieces, token_ids, strings):
  """Reference: the first token after which the decoded bytes contain a stop string."""
  text = b""
  for n, t in enumerate(token_ids):
    text += pieces[t]
    if any(s.encode() in text for s in strings):
      return n
  return None


def test_split_end_of_conversation_is_found_in_every_tokenization():
  # A vocabulary where the marker exists only in pieces, some straddling its edges.
  pieces = [b"<", b"end", b"_of_", b"conversation", b">", b"x<e", b"nd_of", b"_conv",
            b"ersation>\n", b"<end_of_conversation", b"> ok", b"<<", b"\xc3", b"\xa9", b" "]
  stop = stops.compile_stop_strings(["<end_of_conversation>", "é!"], pieces)
  seqs = [[0, 1, 2, 3, 4], [5, 6, 7, 8], [9, 10], [11, 1, 2, 3, 4], [0, 0, 1, 2, 3, 14, 4],
          [12, 13, 14], [12, 13], [14, 12]]
  for seq in seqs:
    assert run_table(stop, seq) == host_first_hit(pieces, seq, stop.strings), seq
  assert run_table(stop, [5, 6, 7, 8]) == 3


def test_random_token_streams_agree_with_decoded_text(testdata):
  tok = load_tokenizer(testdata("chatml", kind="tokenizers"))
  vocab = 1024
  pieces = stops.token_bytes(tok, vocab)
  assert pieces[tok.convert_tokens_to_ids("<|im_end|>")] == b"<|im_end|>"
  assert b"".join(pieces[i] for i in tok.encode("héllo wörld")) == "héllo wörld".encode()
  strings = ["lo w", "ö", "the", "\n\n"]
  stop = stops.compile_stop_strings(strings, pieces)
  rng = np.random.default_rng(0)
  text = "hello world, the cat said hi\n\nthen ö and more text to split " * 3
  common = tok.encode(text)
  hits = 0
  for _ in range(300):
    seq = list(rng.choice(common, size=12)) + list(rng.integers(0, len(tok), size=4))
    want = host_first_hit(pieces, seq, strings)
    assert run_table(stop, seq) == want, [pieces[t] for t in seq]
    hits += want is not None
  assert hits > 50  # The streams do exercise matches.


def test_find_stop_picks_the_one_completed_first():
  assert stops.find_stop("abc STOP x END", ["END", "STOP"]) == (4, "STOP")
  assert stops.find_stop("nothing", ["END"]) == (7, None)
  # "85" is complete at "…y85", before the longer stop that begins earlier: a
  # token-by-token generation (vLLM, OpenAI) stops there and returns "…by".
  assert stops.find_stop("99 by85 88", ["y85 88", "85"]) == (5, "85")
  assert stops.find_stop("99 by85 88", ["85", "y85 88"]) == (5, "85")
  # Completed at the same character: the first in the list, as vLLM checks them.
  assert stops.find_stop("a\n\nHuman: hi", ["Human:", "\n\nHuman:"]) == (3, "Human:")
  assert stops.find_stop("a\n\nHuman: hi", ["\n\nHuman:", "Human:"]) == (1, "\n\nHuman:")
  # What the device-side automaton stops at is the same stop: its first hit's token.
  pieces = [b"99", b" b", b"y", b"85", b" 88"]
  table = stops.compile_stop_strings(["y85 88", "85"], pieces)
  hit = run_table(table, [0, 1, 2, 3, 4])
  assert hit == 3 == host_first_hit(pieces, [0, 1, 2, 3, 4], table.strings)


def test_empty_stop_string_is_rejected():
  with pytest.raises(ValueError, match="non-empty"):
    stops.compile_stop_strings([""], [b"a"])
