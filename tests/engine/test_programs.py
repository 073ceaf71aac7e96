"""How many XLA programs a rollout makes: each one is compiled (or read from the persistent
cache) at a job's start, seconds apiece on a GPU."""
import tempfile

import jax
import numpy as np

from pedrl import streams
from pedrl.bench import compiles, rollout as bench
from pedrl.engine import programs
from pedrl.env import rollout
from pedrl.env.dialogue import GUIDED
from pedrl.env.problems import load_bigmath


def test_random_keys_fold_the_seed_stream_uid_and_step_as_jax_does():
  """One compiled program for the batch; the keys are jax.random's folds done eagerly."""
  for seed, n in ((0, 1), (42, 8), (7, 100)):
    uids, steps = np.arange(n) * 7 + 3, np.arange(n) % 5
    base = jax.random.fold_in(jax.random.key(seed), streams.DIALOGUE)
    want = [jax.random.fold_in(jax.random.fold_in(base, int(u)), int(t))
            for u, t in zip(uids, steps)]
    got = streams.random_keys(seed, streams.DIALOGUE, uids, steps)
    assert got.shape == (n,) and jax.dtypes.issubdtype(got.dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(np.asarray(jax.random.key_data(got)),
                                  np.stack([np.asarray(jax.random.key_data(k)) for k in want]))


def test_a_six_message_rollout_makes_exactly_seven_programs():
  """The benchmark's rollout (8 guided dialogues, tiny models) makes 7 distinct programs,
  compiled or read from the caches: 4 decode loops (`_generate`: one per chunk width,
  window and cache size), 1 shared opening (`_extend_shared`), 1 cache allocation and 1
  for the dialogue keys (`streams.random_keys`); no program per eager op or per cache
  growth (24 before). Exact, so that a change that adds a program per rollout (seconds
  each on a GPU) fails here and is a decision: update the count and
  docs/performance.md's "Programs per rollout" with it."""
  problems = load_bigmath(bench.PROBLEMS)[0][:8]
  settings = rollout.RolloutSettings(scenario=GUIDED)
  with tempfile.TemporaryDirectory() as path:
    paths, _ = bench.save_models(path, bench.SIZES["tiny"])
    run, _ = bench.pedrl_runner(paths, problems, settings, new_tokens=16)
    jax.clear_caches()
    programs.forget()  # As in a new process: programs come from the caches on disk.
    with compiles.compilations() as made:
      work = run(6)
  assert work.messages == 8 * 6
  assert len(made) == 7, len(made)
