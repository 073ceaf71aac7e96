"""Continuous batching (engine.slots): sequences that join and leave a running batch, reuse a
row's cached opening and survive compactions decode what transformers decodes alone."""
import collections

import numpy as np
import pytest

from tests.helpers import reference
from pedrl import models
from pedrl.engine import slots

BUDGET = 12
EOS = 2  # The testdata Qwen2's end of sequence.


def _shared(a, b) -> int:
  n = min(len(a), len(b))
  differ = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
  return int(differ[0]) if differ.size else n


def _run(decoder, prompts) -> tuple[list, list]:
  """Greedy BUDGET tokens per prompt (or up to EOS), one admission per decode call (so
  sequences join at different steps), each into the free row that shares most of its
  opening; the tokens and how many were reused, per prompt."""
  waiting, rows = collections.deque(range(len(prompts))), {}
  out, kept = [[] for _ in prompts], [0] * len(prompts)
  while waiting or rows:
    free = [r for r in range(decoder.programs.rows) if r not in rows]
    if waiting and free:
      i = waiting.popleft()
      row = max(free, key=lambda r: (_shared(decoder.history[r], prompts[i][:-1]),
                                     -len(decoder.history[r])))
      kept[i], rows[row] = _shared(decoder.history[row], prompts[i][:-1]), i
      decoder.admit([slots.Admission(row=row, keep=kept[i], tokens=prompts[i][kept[i]:], seed=0,
                                     index=0, temperature=0.0, top_k=0, top_p=1.0,
                                     budget=BUDGET)])
    tokens = decoder.decode()
    for row, i in list(rows.items()):
      out[i] += [int(t) for t in tokens[row] if t >= 0]
      if len(out[i]) == BUDGET or out[i][-1:] == [EOS]:
        decoder.release([row])
        del rows[row]
  return out, kept


@pytest.mark.parametrize("scan", [False, True])
def test_joining_leaving_and_reused_rows_equal_transformers(testdata, scan):
  path = testdata("qwen2")
  cfg, model, params = models.load(path, scan_layers=scan)
  rng = np.random.default_rng(0)
  p = [rng.integers(1, cfg.vocab_size, n).tolist() for n in (13, 7, 2, 20, 5, 9)]
  # 3 rows, 64 tokens per sequence: a 128-slot cache that the admissions soon fill.
  assert cfg.eos_token_ids == (EOS,)
  decoder = slots.SlotDecoder(model, params, slots.ProgramSet(rows=3, max_len=64, steps=4),
                              cfg.eos_token_ids)
  # Rounds: later prompts open with earlier ones, whose rows' tokens are reused.
  rounds = [[p[0], p[1], p[2]], [p[0][:10] + [7, 8], p[3], p[4]], [p[3] + [9], p[5]]]
  outs = [_run(decoder, prompts) for prompts in rounds]
  assert [kept for _, kept in outs] == [[0, 0, 0], [10, 0, 0], [20, 0]]
  assert decoder.compactions > 0
  hf = reference.load(path)
  for prompts, (out, _) in zip(rounds, outs):
    for prompt, tokens in zip(prompts, out):
      want = reference.greedy(hf, [prompt], [[1] * len(prompt)], BUDGET)[0]
      np.testing.assert_array_equal(tokens, want)


def test_the_program_set_is_small_and_fixed():
  p = slots.ProgramSet(rows=32, max_len=1024, steps=8)
  assert p.admit_rows == (1, 4, 32) and p.chunks == (16, 32, 64, 128, 256, 512, 1024)
  assert p.windows == (64, 128, 256, 512, 1024, 2048) and p.slots == 2048
  assert p.count == 3 * 7 + 2 * 6
  assert slots.ProgramSet(rows=3, max_len=100).chunks == (16, 32, 64, 100)
  assert slots.seed_words(7) == (0, 7) and slots.seed_words(-1) == (2 ** 32 - 1, 2 ** 32 - 1)
  with pytest.raises(ValueError, match="must be positive"):
    slots.ProgramSet(rows=0, max_len=64)
