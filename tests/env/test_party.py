"""Parties from a model directory (stop ids default to the model's end tokens) and
first turns prefilled once for the opening their prompts share."""
import json
import logging
import os

import numpy as np
import pytest

from pedrl import models
from pedrl.engine import Sampler, SamplingParams, sampling, sequence_keys
from pedrl.env import party


def test_party_from_a_directory_stops_at_the_models_end_tokens(testdata):
  path = testdata("qwen2")
  with open(os.path.join(path, "config.json")) as f:
    eos = json.load(f)["eos_token_id"]
  p = party.load(path, SamplingParams(16, temperature=0.7, top_k=20))
  assert eos in p.sampling.stop_token_ids
  assert (p.sampling.max_new_tokens, p.sampling.temperature, p.sampling.top_k) == (16, 0.7, 20)
  assert p.chat.prompt_ids([{"role": "user", "content": "2 + 2?"}])  # The template renders.


def test_no_stop_at_all_is_a_warning_not_a_silent_default(testdata, caplog):
  with caplog.at_level(logging.WARNING):
    p = party.load(testdata("qwen2"), SamplingParams(8, stop_token_ids=()))
  assert p.sampling.stop_token_ids == ()
  assert "no stop token" in caplog.text
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    party.load(testdata("qwen2"), SamplingParams(8))
  assert "no stop token" not in caplog.text


def test_a_shared_opening_computed_once_samples_what_whole_prompts_do(testdata):
  cfg, model, params = models.load(testdata("qwen3"), scan_layers=False)
  rng = np.random.default_rng(0)
  prefix = rng.integers(1, cfg.vocab_size, 40).tolist()
  rows = [prefix + rng.integers(1, cfg.vocab_size, n).tolist() for n in (3, 30, 1)]
  sp = SamplingParams(12, temperature=1.0, top_k=20, stop_token_ids=())
  keys = sequence_keys(0, range(3))
  out = {}
  for share in (0, 32):
    sampler = Sampler(model, share_prefix=share)
    out[share], cache = sampler.generate(params, rows, keys, sp, sampler.new_cache(3, 256))
    # The opening is in the cache once per row: 40 + own tokens + 12 sampled positions.
    np.testing.assert_array_equal(np.asarray(cache.pos), [40 + 3 + 12, 40 + 30 + 12, 40 + 1 + 12])
    # Whole rows fill one 96-slot chunk; shared, the opening's first 32 tokens (a bucket:
    # no padding) fill their own chunk and the rest, 9 to 38 tokens, one of 48.
    assert int(cache.end) == {0: 96, 32: 32 + 48}[share] + 12
  np.testing.assert_array_equal(out[32].tokens, out[0].tokens)
  np.testing.assert_allclose(out[32].logprobs, out[0].logprobs, atol=1e-5)


def test_a_cache_sized_for_the_rows_still_shares_their_opening(testdata, monkeypatch):
  """A dialogue's first cache holds just its turn (bucketed rows + new tokens), no
  room for a padded opening: the opening, cut to a bucket, is still computed once."""
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  rng = np.random.default_rng(1)
  prefix = rng.integers(1, cfg.vocab_size, 130).tolist()
  rows = [prefix + rng.integers(1, cfg.vocab_size, n).tolist() for n in (10, 50)]
  sp = SamplingParams(8, temperature=1.0, stop_token_ids=())
  keys = sequence_keys(0, range(2))
  widths = []
  extend_shared = sampling._extend_shared
  monkeypatch.setattr(sampling, "_extend_shared",
                      lambda *a: widths.append(a[3].shape[1]) or extend_shared(*a))
  out = {}
  for share in (0, 32):
    sampler = Sampler(model, share_prefix=share)
    # 180 tokens: a 192 chunk; the opening padded to 192 would leave no room for the rest.
    out[share], cache = sampler.generate(params, rows, keys, sp, sampler.new_cache(2, 192 + 8))
    np.testing.assert_array_equal(np.asarray(cache.pos), [130 + 10 + 8, 130 + 50 + 8])
  assert widths == [128]  # Shared once, its first 128 tokens; then 12 and 52 in a 64 chunk.
  np.testing.assert_array_equal(out[32].tokens, out[0].tokens)
  np.testing.assert_allclose(out[32].logprobs, out[0].logprobs, atol=1e-5)


def test_a_bad_id_in_a_shared_opening_is_still_an_error(testdata):
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  sampler = Sampler(model)
  prefix = [1] * 39 + [cfg.vocab_size]  # Out of range, inside what the rows share.
  rows = [prefix + [5], prefix + [6, 7]]
  with pytest.raises(ValueError, match="outside"):
    sampler.generate(params, rows, sequence_keys(0, range(2)), SamplingParams(4),
                     sampler.new_cache(2, 128))
