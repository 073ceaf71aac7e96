"""Every random stream of a run, each derived from the run's one seed.

JAX keys are split by `fold_in` (never seed + k), so the streams are
independent, and a row's draws are a function of (seed, stream, its uid, its
step) alone: the same whatever batch it is in, on one device or a pod, in a
run that was resumed or not.

  DIALOGUE    tutor and student turns of a rollout (dialogue uid, turn)
  PRE_SOLVE   the student's attempts before a dialogue (problem, attempt)
  POST_SOLVE  its attempts after one (dialogue uid, attempt)
  JUDGE       a local judge model's samples (request uid, round)
  REASONING   the tutor's answers to benchmark questions (question's index, 0)
  AGENT       an agent's backbone calls, e.g. CPA's stages (instance uid, its call number)

numpy streams: the train/test split's shuffle (seed), the baselines' subset of
the training split (seed, its size), a problem's scenario and persona (seed,
problem), the training data order (seed, epoch) and the order of mini-batches
(seed, step).
"""
import functools
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

DIALOGUE, PRE_SOLVE, POST_SOLVE, JUDGE, REASONING, AGENT = 0, 1, 2, 3, 4, 5


@jax.jit
def _folded_key_data(seed, stream, uids, steps):
  base = jax.random.fold_in(jax.random.key(seed), stream)
  fold = lambda u, t: jax.random.fold_in(jax.random.fold_in(base, u), t)
  return jax.random.key_data(jax.vmap(fold)(uids, steps))


def random_keys(seed: int, stream: int, uids: ArrayLike, steps: ArrayLike) -> jax.Array:
  """One PRNG key per (uid, step) pair of `stream`: key(seed) folded with the stream,
  the uid and the step. One compiled program for up to 64 pairs (and one per power of
  two above): eagerly, each fold and each batch size compiled one."""
  uids, steps = np.asarray(uids, np.uint32), np.asarray(steps, np.uint32)
  n = uids.size
  width = max(64, 1 << max(n - 1, 0).bit_length())
  pad = lambda a: np.pad(a, (0, width - n))
  data = np.asarray(_folded_key_data(np.int32(seed), np.uint32(stream), pad(uids), pad(steps)))
  return jax.random.wrap_key_data(jax.device_put(data[:n]))


def request_seed(seed: int, stream: int, uid: int, step: int) -> int:
  """The `seed` of an endpoint request (the OpenAI API's and vLLM's sampling seed) for the
  row of `stream` with this uid and step: a function of the four alone, as a local row's
  key is, in [0, 2**31) (what every such API takes)."""
  digest = hashlib.sha256(f"{seed}/{stream}/{uid}/{step}".encode()).digest()
  return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def sequence_keys(seed: int, ids: ArrayLike) -> jax.Array:
  """One PRNG key per sequence id, for sampling outside a dialogue (benchmarks, tools);
  the sampler folds the decode step in."""
  base = jax.random.key(seed)
  return jax.vmap(lambda i: jax.random.fold_in(base, i))(jnp.asarray(ids, jnp.uint32))


def split_order(seed: int, n: int) -> np.ndarray:
  """The shuffle of n distinct problems that splits them into test and train sets."""
  return np.random.default_rng(seed).permutation(n)


def subset(seed: int, n: int, fraction: float) -> np.ndarray:
  """The sorted indices of a seeded fraction of n problems (round(fraction · n), at least
  one): the offline baselines' share of the training split (paper 003 A.3)."""
  k = min(n, max(1, round(fraction * n)))
  return np.sort(np.random.default_rng([seed, n]).permutation(n)[:k])


def problem_number(problem_id: str) -> int:
  """A stable 31-bit number for a problem id (any string)."""
  return int(hashlib.sha1(problem_id.encode()).hexdigest()[:8], 16) >> 1


def problem_rng(seed: int, problem_id: str) -> np.random.Generator:
  """The draws made once per problem (scenario, persona)."""
  return np.random.default_rng([seed, problem_number(problem_id)])


@functools.lru_cache(maxsize=4)
def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
  """The permutation of n training problems in epoch `epoch`."""
  return np.random.default_rng([seed, epoch]).permutation(n)


def update_order(seed: int, step: int, rows: int) -> np.ndarray:
  """The order in which step `step` splits its batch rows into mini-batches."""
  return np.random.default_rng([seed, step]).permutation(rows)
