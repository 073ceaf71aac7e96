"""The sampler and scorer: transformers' greedy tokens, multi-turn cache reuse, one log-prob path."""
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.helpers import reference
from pedrl import models, sharding
from pedrl.engine import Sampler, SamplingParams, Scorer, sampling, sequence_keys, sequence_logprobs
from pedrl.tokenizer import load_tokenizer

CAUSAL = ["qwen2", "qwen2_tied", "qwen3", "llama3"]
GREEDY = SamplingParams(64, temperature=0.0)


def rows_of(rng, vocab, lengths):
  return [rng.integers(1, vocab, n).tolist() for n in lengths]


def left_pad(rows):
  t = max(map(len, rows))
  tokens = np.zeros((len(rows), t), np.int32)
  mask = np.zeros((len(rows), t), bool)
  for i, r in enumerate(rows):
    tokens[i, t - len(r):], mask[i, t - len(r):] = r, True
  return tokens, mask


@pytest.fixture(scope="module", params=CAUSAL)
def family(request, testdata):
  path = testdata(request.param)
  cfg, model, params = models.load(path, scan_layers=False)
  return cfg, model, params, reference.load(path)


def test_greedy_64_tokens_equal_transformers_with_and_without_padding(family):
  cfg, model, params, hf = family
  rows = rows_of(np.random.default_rng(0), cfg.vocab_size, [13, 7, 2])  # Row 0 is unpadded.
  gen, _ = Sampler(model).generate(params, rows, sequence_keys(0, range(3)), GREEDY)
  tokens, mask = left_pad(rows)
  np.testing.assert_array_equal(gen.tokens, reference.greedy(hf, tokens, mask, 64))
  assert gen.finish_reasons == ["length"] * 3 and (gen.lengths == 64).all()


def test_three_turn_dialogue_by_extend_equals_encoding_it_whole(family):
  """Turns appended to the cache (rows stopping at different steps) give the same
  tokens as transformers on the whole history, and the same log-probs as scoring it."""
  cfg, model, params, hf = family
  rng = np.random.default_rng(1)
  sampler, scorer = Sampler(model), Scorer(model)
  history = rows_of(rng, cfg.vocab_size, [6, 11])
  probe, _ = sampler.generate(params, history, sequence_keys(0, range(2)), SamplingParams(12, 0.0))
  stop_id = int(probe.tokens[0, 4])  # Row 0 stops after 5 tokens; row 1 when it meets it.
  sp = SamplingParams(12, temperature=0.0, stop_token_ids=(stop_id,))
  cache = sampler.new_cache(2, 128)
  new = history
  for turn in range(3):
    gen, cache = sampler.generate(params, new, sequence_keys(turn, range(2)), sp, cache=cache)
    if turn == 0:
      assert gen.stopped[0] and gen.lengths[0] <= 5
    tokens, mask = left_pad(history)
    want = reference.greedy(hf, tokens, mask, 12)
    for r in range(2):
      n = gen.lengths[r]
      np.testing.assert_array_equal(gen.row_tokens(r), want[r, :n])
      assert gen.stopped[r] == (stop_id in want[r, :n].tolist())
    scores = scorer.score(params, history, [[gen.row_tokens(r).tolist()] for r in range(2)])
    for r in range(2):
      np.testing.assert_allclose(scores.tokens[r, 0, :gen.lengths[r]],
                                 gen.logprobs[r, :gen.lengths[r]], atol=1e-4, rtol=0)
    new = rows_of(rng, cfg.vocab_size, [3 + turn, 1])  # The other speaker's reply.
    history = [h + gen.row_tokens(r).tolist() + new[r] for r, h in enumerate(history)]
  np.testing.assert_array_equal(np.asarray(cache.pos),
                                [len(h) - len(n) for h, n in zip(history, new)])


def test_sampled_logprobs_equal_scorer_and_sequence_logprobs(testdata):
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  rows = rows_of(np.random.default_rng(2), cfg.vocab_size, [5, 17, 9])
  sp = SamplingParams(24, temperature=0.7, top_k=40, top_p=0.9)
  gen, _ = Sampler(model).generate(params, rows, sequence_keys(7, range(3)), sp)
  conts = [[gen.row_tokens(r).tolist(), gen.row_tokens(r)[:3].tolist()] for r in range(3)]
  scores = Scorer(model).score(params, rows, conts, temperature=0.7)
  full, mask = left_pad([r + c[0] for r, c in zip(rows, conts)])
  whole = np.asarray(sequence_logprobs(model, params, jnp.asarray(full), jnp.asarray(mask), 0.7))
  for r in range(3):
    n = gen.lengths[r]
    np.testing.assert_allclose(scores.tokens[r, 0, :n], gen.logprobs[r, :n], atol=1e-4, rtol=0)
    np.testing.assert_allclose(whole[r, -n:], gen.logprobs[r, :n], atol=1e-4, rtol=0)
    np.testing.assert_allclose(scores.sum[r, 1], gen.logprobs[r, :3].sum(), atol=1e-4)
  np.testing.assert_array_equal(scores.count[:, 1], 3)
  np.testing.assert_allclose(scores.mean, scores.sum / scores.count, rtol=1e-6)


def test_scorer_shares_contexts_and_pads_ragged_candidates(testdata):
  cfg, model, params = models.load(testdata("llama3"), scan_layers=False)
  rng = np.random.default_rng(3)
  contexts = rows_of(rng, cfg.vocab_size, [8, 3])
  conts = [rows_of(rng, cfg.vocab_size, [4, 1, 6]), rows_of(rng, cfg.vocab_size, [2])]
  scores = Scorer(model, max_logits_bytes=1).score(params, contexts, conts)  # One row per chunk.
  assert scores.sum.shape == (2, 3)
  assert scores.count[1, 1] == 0 and np.isnan(scores.mean[1, 1])
  for i, c in enumerate(contexts):  # Each pair scored alone, through the full forward.
    for j, x in enumerate(conts[i]):
      t, m = left_pad([c + x])
      alone = np.asarray(sequence_logprobs(model, params, jnp.asarray(t), jnp.asarray(m)))
      np.testing.assert_allclose(scores.sum[i, j], alone[0, -len(x):].sum(), atol=1e-4)


def test_rows_do_not_depend_on_batch_composition(testdata):
  cfg, model, params = models.load(testdata("qwen3"), scan_layers=False)
  rows = rows_of(np.random.default_rng(4), cfg.vocab_size, [4, 9, 15, 6])
  sp = SamplingParams(16, temperature=1.0, top_p=0.95)
  sampler = Sampler(model)
  together, _ = sampler.generate(params, rows, sequence_keys(5, [10, 11, 12, 13]), sp)
  alone, _ = sampler.generate(params, rows[2:3], sequence_keys(5, [12]), sp)
  np.testing.assert_array_equal(together.tokens[2], alone.tokens[0])
  other_seed, _ = sampler.generate(params, rows[2:3], sequence_keys(6, [12]), sp)
  assert not np.array_equal(other_seed.tokens[0], alone.tokens[0])


def test_finished_rows_leave_the_batch_and_nothing_sampled_changes(testdata):
  """Rows that stop at different steps: decoding on with the live rows alone (compact)
  samples the same tokens and log-probs, leaves caches that give the same next turn, and
  computes fewer row-steps than decoding the whole batch to its longest row."""
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  rows = rows_of(np.random.default_rng(11), cfg.vocab_size, [3, 8, 5, 12, 4, 9, 6, 7])
  stop_ids = tuple(range(1, cfg.vocab_size, 23))  # About 1 in 23 ids ends a row.
  sp = SamplingParams(40, temperature=1.0, top_k=50, stop_token_ids=stop_ids)
  out = {}
  for compact in (False, True):
    sampler = Sampler(model, compact=compact)
    cache = sampler.new_cache(len(rows), 256)
    first, cache = sampler.generate(params, rows, sequence_keys(3, range(8)), sp, cache=cache)
    nxt = [[int(t)] for t in first.tokens[:, 0]]
    second, _ = sampler.generate(params, nxt, sequence_keys(4, range(8)), sp, cache=cache)
    out[compact] = first, second
  (whole, whole2), (compacted, compacted2) = out[False], out[True]
  assert len(set(whole.lengths.tolist())) > 3  # Rows do end at different steps.
  for a, b in ((whole, compacted), (whole2, compacted2)):
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    np.testing.assert_array_equal(a.stopped, b.stopped)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
  assert whole.row_steps == 8 * whole.lengths.max()
  assert whole.lengths.sum() <= compacted.row_steps < whole.row_steps


def test_shared_prefill_equals_separate_prompts(testdata):
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  prompts = rows_of(np.random.default_rng(5), cfg.vocab_size, [7, 12])
  sampler = Sampler(model)
  sp = SamplingParams(10, temperature=1.0)
  keys = sequence_keys(0, range(6))
  cache, last = sampler.prefill_shared(params, prompts, copies=3, cache_size=64)
  shared, _ = sampler.generate(params, last, keys, sp, cache=cache)
  separate, _ = sampler.generate(params, [p for p in prompts for _ in range(3)], keys, sp)
  np.testing.assert_array_equal(shared.tokens, separate.tokens)
  np.testing.assert_allclose(shared.logprobs, separate.logprobs, atol=1e-5)


def test_stop_string_straddling_tokens_ends_the_row_and_is_cut_from_text(testdata):
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  tok = load_tokenizer(testdata("chatml", kind="tokenizers"))
  prompts = [tok.encode("Tell me about fractions, please."), tok.encode("Hi")]
  keys = sequence_keys(0, range(2))
  free, _ = Sampler(model, tok).generate(params, prompts, keys, SamplingParams(40, 0.0))
  pieces = [tok.decode([t]) for t in free.row_tokens(0)]
  # A stop string from the middle of token 10 into token 12 (multi-character pieces).
  j = next(i for i in range(8, 30) if len(pieces[i]) > 1 and len(pieces[i + 2]) > 1)
  stop = pieces[j][1:] + pieces[j + 1] + pieces[j + 2][:1]
  text = free.texts[0]
  sampler = Sampler(model, tok, stop_strings=(stop,))
  gen, _ = sampler.generate(params, prompts, keys, SamplingParams(40, 0.0))
  first = next(i for i in range(40) if stop in tok.decode(free.row_tokens(0)[:i + 1]))
  assert gen.lengths[0] == first + 1 and gen.finish_reasons[0] == "stop"
  np.testing.assert_array_equal(gen.row_tokens(0), free.row_tokens(0)[:first + 1])
  assert gen.texts[0] == text[:text.index(stop)] and gen.stop_reasons[0] == stop
  if stop not in free.texts[1]:
    assert gen.finish_reasons[1] == "length" and gen.texts[1] == free.texts[1]


def test_stop_token_is_dropped_from_text_but_kept_in_tokens(testdata):
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  tok = load_tokenizer(testdata("chatml", kind="tokenizers"))
  prompt = [tok.encode("Solve 3 + 4.")]
  free, _ = Sampler(model, tok).generate(params, prompt, sequence_keys(0, [0]), SamplingParams(20, 0.0))
  stop_id = int(free.tokens[0, 6])
  gen, _ = Sampler(model, tok).generate(
      params, prompt, sequence_keys(0, [0]), SamplingParams(20, 0.0, stop_token_ids=(stop_id,)))
  n = free.tokens[0].tolist().index(stop_id) + 1
  assert gen.lengths[0] == n and gen.tokens[0, n - 1] == stop_id
  assert gen.texts[0] == tok.decode(free.tokens[0, :n - 1])
  assert gen.stop_reasons[0] == tok.decode([stop_id])
  assert (gen.tokens[0, n:] == (cfg.pad_token_id or 0)).all() and (gen.logprobs[0, n:] == 0).all()


def test_buckets_bound_the_number_of_compiled_programs(testdata):
  cfg, model, params = models.load(testdata("llama3"), scan_layers=False)
  sampler = Sampler(model)
  rng = np.random.default_rng(6)
  sampler.generate(params, [[1, 2], [3]], sequence_keys(0, [0, 1]), SamplingParams(8, 0.0))
  before = sampling._generate.programs()
  for n in range(3, 40, 3):
    sampler.generate(params, rows_of(rng, cfg.vocab_size, [n, 2]), sequence_keys(0, range(2)),
                     SamplingParams(8, 0.0))
  assert sampling._generate.programs() - before <= 3  # Prompt buckets 16, 32, 48.


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_same_seed_same_tokens_on_one_and_eight_devices(testdata):
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  rows = rows_of(np.random.default_rng(7), cfg.vocab_size, [5, 9, 3, 12, 7, 4, 8, 6])
  sp = SamplingParams(20, temperature=1.0, top_p=0.9)
  keys = sequence_keys(3, range(8))
  single, _ = Sampler(model).generate(params, rows, keys, sp)
  mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
  _, _, sharded = models.load(testdata("qwen2"), shardings=mesh, scan_layers=False)
  sampler = Sampler(model, mesh=mesh)
  multi, cache = sampler.generate(sharded, rows, keys, sp)
  np.testing.assert_array_equal(multi.tokens, single.tokens)
  np.testing.assert_allclose(multi.logprobs, single.logprobs, atol=1e-4)
  assert len(cache.k[0].sharding.device_set) == 8
  # A next turn with rows 1 and 5 emptied and fed afresh, on the rows' shards as on one device.
  turn = rows_of(np.random.default_rng(8), cfg.vocab_size, [2, 11, 1, 3, 2, 9, 1, 2])
  cache, _ = sampler.make_room(sampler.clear_rows(cache, [1, 5]), 64, limit=128)
  again, cache = sampler.generate(sharded, turn, sequence_keys(4, range(8)), sp, cache)
  one = Sampler(model)
  _, alone = one.generate(params, rows, keys, sp)
  alone, _ = one.make_room(one.clear_rows(alone, [1, 5]), 64, limit=128)
  want, _ = one.generate(params, turn, sequence_keys(4, range(8)), sp, alone)
  np.testing.assert_array_equal(again.tokens, want.tokens)
  assert len(cache.mask.sharding.device_set) == 8
  scores = Scorer(model, mesh=mesh).score(sharded, rows[:3], [[[1, 2, 3]]] * 3)
  alone = Scorer(model).score(params, rows[:3], [[[1, 2, 3]]] * 3)
  np.testing.assert_allclose(scores.sum, alone.sum, atol=1e-4)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_finished_rows_leave_a_sharded_batch_in_divisible_batches(testdata):
  """On a mesh with 4 batch shards, 16 rows shrink to 8 and then 4 (never below: rows
  stay divisible over the shards); the tokens, log-probs and next turn are those of one
  device decoding the whole batch."""
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  rows = rows_of(np.random.default_rng(12), cfg.vocab_size, [3, 8, 5, 12, 4, 9, 6, 7] * 2)
  stop_ids = tuple(range(1, cfg.vocab_size, 17))
  sp = SamplingParams(24, temperature=1.0, top_k=50, stop_token_ids=stop_ids)
  mesh = sharding.make_mesh(data=2, fsdp=2, tensor=2)
  _, _, sharded = models.load(testdata("qwen2"), shardings=mesh, scan_layers=False)
  out = {}
  for name, sampler, p in (("one", Sampler(model, compact=False), params),
                           ("mesh", Sampler(model, mesh=mesh), sharded)):
    first, cache = sampler.generate(p, rows, sequence_keys(3, range(16)), sp,
                                    cache=sampler.new_cache(16, 128))
    nxt = [[int(t)] for t in first.tokens[:, 0]]
    second, cache = sampler.generate(p, nxt, sequence_keys(4, range(16)), sp, cache=cache)
    out[name] = first, second, cache
  (one, one2, _), (mesh_, mesh2, cache) = out["one"], out["mesh"]
  assert len(set(one.lengths.tolist())) > 3 and one.lengths.min() < one.lengths.max() // 4
  for a, b in ((one, mesh_), (one2, mesh2)):
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    np.testing.assert_array_equal(a.stopped, b.stopped)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)
  assert one.lengths.sum() <= mesh_.row_steps < one.row_steps == 16 * one.lengths.max()
  assert len(cache.k[0].sharding.device_set) == 8 and cache.batch == 16
  # Where decoding leaves a batch: at most half as many rows, counted as the mesh pads them.
  assert [Sampler(model, mesh=mesh)._shrink_at(b) for b in (4, 8, 16)] == [0, 4, 8]
  assert [Sampler(model)._shrink_at(b) for b in (1, 2, 6, 8)] == [0, 1, 2, 4]
  assert Sampler(model, compact=False)._shrink_at(16) == 0


def test_bad_input_is_named(testdata):
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  sampler, keys = Sampler(model), sequence_keys(0, range(2))
  sp = SamplingParams(4, 0.0)
  with pytest.raises(ValueError, match="empty prompt"):
    sampler.generate(params, [[1, 2], []], keys, sp)
  with pytest.raises(ValueError, match="context"):
    sampler.generate(params, [[1] * (cfg.max_position_embeddings - 2)] * 2, keys, sp)
  cache = sampler.new_cache(2, 16)
  with pytest.raises(ValueError, match="do not fit the KV cache"):
    sampler.generate(params, [[1] * 14, [2]], keys, sp, cache=cache)
  with pytest.raises(ValueError, match="outside"):
    sampler.generate(params, [[1, cfg.vocab_size]], keys[:1], sp)
  with pytest.raises(ValueError, match="keys"):
    sampler.generate(params, [[1, 2]], keys, sp)
  with pytest.raises(ValueError, match="stop strings need the tokenizer"):
    Sampler(model, stop_strings=("x",))
  with pytest.raises(ValueError, match="empty context"):
    Scorer(model).score(params, [[]], [[[1]]])
  with pytest.raises(ValueError, match="exceeds the model's context"):
    sampler.new_cache(1, cfg.max_position_embeddings + 1)


def test_filler_rows_do_not_keep_decoding_and_empty_extends_are_free(testdata):
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  sampler = Sampler(model)
  row = rows_of(np.random.default_rng(8), cfg.vocab_size, [5])
  free, _ = sampler.generate(params, row, sequence_keys(0, [0]), SamplingParams(4, 0.0))
  sp = SamplingParams(100, 0.0, stop_token_ids=(int(free.tokens[0, 0]),))
  cache = sampler.new_cache(4, 256)  # Three filler rows beside the real one.
  gen, cache = sampler.generate(params, row, sequence_keys(0, [0]), sp, cache=cache)
  assert gen.lengths[0] == 1 and int(cache.end) == 8 + 1  # One chunk, one step.
  same = sampler.extend(params, cache, [[]])
  assert int(same.end) == 9


def test_prompt_near_the_context_limit_is_accepted(testdata):
  cfg, model, params = models.load(testdata("llama3"), scan_layers=False)
  n = cfg.max_position_embeddings - 4  # Its bucket + 4 new tokens exceeds the context.
  rows = rows_of(np.random.default_rng(9), cfg.vocab_size, [n])
  gen, _ = Sampler(model).generate(params, rows, sequence_keys(0, [0]), SamplingParams(4, 0.0))
  assert gen.lengths[0] == 4
  scores = Scorer(model).score(params, [rows[0][:-3]], [[[1, 2, 3]]])
  assert scores.count[0, 0] == 3 and np.isfinite(scores.sum).all()


def test_scorer_with_no_candidates_at_all(testdata):
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  scores = Scorer(model).score(params, [[1, 2], [3]], [[], []])
  assert scores.count.shape == (2, 1) and (scores.count == 0).all() and np.isnan(scores.mean).all()


def test_a_cache_grown_between_turns_equals_one_allocated_whole(testdata):
  """make_room grows a small cache (doubling, up to its limit) keeping every slot, then
  compacts only at the limit: a two-turn dialogue gives the same tokens either way."""
  cfg, model, params = models.load(testdata("qwen2"), scan_layers=False)
  sampler = Sampler(model)
  rng = np.random.default_rng(10)
  first, second = rows_of(rng, cfg.vocab_size, [6, 11]), rows_of(rng, cfg.vocab_size, [20, 3])
  sp = SamplingParams(12, temperature=0.0)
  runs = []
  for size in (32, 256):
    gen, cache = sampler.generate(params, first, sequence_keys(0, range(2)), sp,
                                  sampler.new_cache(2, size))
    cache, room = sampler.make_room(cache, 32 + 12, limit=256)
    # 28 slots used + 44 needed > 2 x 32: the bucket of 72.
    assert room >= 44 and cache.size == (96 if size == 32 else 256)
    runs.append((gen, *sampler.generate(params, second, sequence_keys(1, range(2)), sp, cache)))
  (a1, a2, grown), (b1, b2, whole) = runs
  for x, y in ((a1, b1), (a2, b2)):
    np.testing.assert_array_equal(x.tokens, y.tokens)
    np.testing.assert_allclose(x.logprobs, y.logprobs, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(grown.pos), np.asarray(whole.pos))
  # At the limit the masked gaps (left padding) are packed away instead.
  end = int(grown.end)
  packed, room = sampler.make_room(grown, grown.size - end + 1, limit=grown.size)
  assert packed.size == 96 and int(packed.end) < end and room == 96 - int(packed.end)


def test_a_cleared_row_starts_again_and_the_other_rows_keep_their_caches(testdata):
  """clear_rows empties one row (a dialogue fed its whole, re-rendered view again): its
  next turn and the other row's, sampled beside it from the same cache, are
  transformers' greedy tokens and log-probs on each row's history."""
  from scipy.special import log_softmax
  path = testdata("qwen2")
  cfg, model, params = models.load(path, scan_layers=False)
  hf, sampler = reference.load(path), Sampler(model)
  rng = np.random.default_rng(11)
  sp = SamplingParams(12, temperature=0.0)
  first = rows_of(rng, cfg.vocab_size, [6, 11])
  gen, cache = sampler.generate(params, first, sequence_keys(0, range(2)), sp,
                                sampler.new_cache(2, 128))
  fresh, reply = rows_of(rng, cfg.vocab_size, [9, 3])
  history = [fresh, first[1] + gen.row_tokens(1).tolist() + reply]
  cache = sampler.clear_rows(cache, [0])
  gen, cache = sampler.generate(params, [fresh, reply], sequence_keys(1, range(2)), sp, cache)
  tokens, mask = left_pad(history)
  want = reference.greedy(hf, tokens, mask, 12)
  assert gen.lengths.tolist() == [12, 8]  # Row 1 stops at the end-of-sequence id.
  for r, h in enumerate(history):
    n = gen.lengths[r]
    np.testing.assert_array_equal(gen.row_tokens(r), want[r, :n])
    whole = np.asarray(h + gen.row_tokens(r).tolist())[None]
    lp = log_softmax(reference.forward(hf, whole, np.ones_like(whole)), axis=-1)[0]
    np.testing.assert_allclose(gen.logprobs[r, :n], lp[np.arange(len(h) - 1, whole.size - 1),
                                                      whole[0, len(h):]], atol=1e-4, rtol=0)
  np.testing.assert_array_equal(np.asarray(cache.pos), [len(h) + n for h, n in
                                                         zip(history, gen.lengths)])


def test_compilations_count_getting_a_program_not_running_it():
  """What a throughput leaves out: a new program's tracing and compiling, none of its
  later calls."""
  import jax
  from pedrl.engine import compiler
  f = jax.jit(lambda x: jnp.tanh(x) * 3.0 + x.sum())
  x = jnp.ones((7, 5))
  start = time.perf_counter()
  with compiler.compilations() as first:
    f(x).block_until_ready()
  wall = time.perf_counter() - start
  with compiler.compilations() as again:
    f(x).block_until_ready()
  assert len(first) == 3 and 0 < sum(first) <= wall  # Traced, lowered, compiled: disjoint.
  assert again == []
