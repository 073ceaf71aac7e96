"""The program store (`pedrl.engine.programs`): a program is found by what a call is,
never for a call it was not compiled for, and runs without jax tracing anything."""
import os
import socket
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pedrl.bench import compiles
from pedrl import environ
from pedrl.engine import compiler, programs


def scaled_sums(n, x, y):
  return (x * n + y).sum(0), jnp.cumsum(x, 0)


@pytest.fixture
def store(tmp_path):
  programs.use(str(tmp_path))
  programs.forget()
  yield tmp_path
  programs.reset()
  programs.forget()


def _stored_files(path):
  return sorted(f for _, _, fs in os.walk(path) for f in fs if f.endswith(".pkl"))


def test_a_stored_program_runs_without_tracing(store):
  x, y = jnp.arange(12.0).reshape(4, 3), jnp.ones(3)
  first = compiler.jit(scaled_sums, static_argnums=(0,))(3, x, y)
  assert len(_stored_files(store)) == 1
  jax.clear_caches()
  programs.forget()  # As a new process: the program comes from the store.
  with compiles.compilations() as made:
    again = compiler.jit(scaled_sums, static_argnums=(0,))(3, x, y)
  assert (len(made), made.stored, made.traced, made.lowered) == (1, 1, 0.0, 0.0)
  for a, b in zip(first, again):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  np.testing.assert_array_equal(np.asarray(again[0]), [58.0, 70.0, 82.0])  # 3 (0+3+6+9) + 4 ...


def test_the_key_holds_what_shapes_the_program_not_the_values():
  key = lambda *args, **jit: programs.call_key(scaled_sums, jit or {"static_argnums": (0,)},
                                               args, {})
  x, y = jnp.ones((4, 3)), jnp.ones(3)
  base = key(3, x, y)
  assert base == key(3, x + 1, y * 5)  # Values.
  different = [
      key(4, x, y),  # A static argument.
      key(3, jnp.ones((5, 3)), y),  # A shape.
      key(3, x.astype(jnp.bfloat16), y),  # A dtype.
      key(3, x, 1.0),  # A Python scalar (weakly typed) for an array.
      key(3, x, (y,)),  # The arguments' structure.
      key(3, x, y, static_argnums=(0,), donate_argnums=(1,)),  # jit's options.
  ]
  assert base not in different and len(set(different)) == len(different)
  assert key(object(), x, y) is None  # A static argument printed with an address: no key.
  with jax.default_matmul_precision("highest"):  # A setting jax's jit keys on.
    assert key(3, x, y) not in (base, None)
  seen = []
  jax.jit(lambda x: seen.append(key(3, x, y)) or x)(x)
  assert seen == [None]  # Traced arguments: jax.jit's own path.


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (simulated) devices")
def test_placement_is_part_of_the_key_and_a_sharded_program_loads(store):
  from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
  x, y = np.arange(32.0).reshape(8, 4), jnp.ones(4)
  keys, results = [], []
  for devices in (jax.devices()[:4], jax.devices()[4:]):
    rows = NamedSharding(Mesh(np.array(devices), ("data",)), P("data"))
    xs = jax.device_put(x, rows)
    keys.append(programs.call_key(scaled_sums, {"static_argnums": (0,)}, (2, xs, y), {}))
    compiler.jit(scaled_sums, static_argnums=(0,))(2, xs, y)
    programs.forget()
    results.append(compiler.jit(scaled_sums, static_argnums=(0,))(2, xs, y))  # Loaded.
  assert keys[0] != keys[1] and len(_stored_files(store)) == 2
  for out, devices in zip(results, (jax.devices()[:4], jax.devices()[4:])):
    assert out[1].sharding.device_set == set(devices)
    np.testing.assert_array_equal(np.asarray(out[0]), (x * 2 + 1).sum(0))


def test_an_unreadable_file_is_compiled_again(store, caplog):
  x, y = jnp.ones((4, 3)), jnp.ones(3)
  compiler.jit(scaled_sums, static_argnums=(0,))(2, x, y)
  path, = [os.path.join(r, f) for r, _, fs in os.walk(store) for f in fs]
  with open(path, "wb") as f:
    f.write(b"cut short")
  programs.forget()
  out = compiler.jit(scaled_sums, static_argnums=(0,))(2, x, y)
  np.testing.assert_array_equal(np.asarray(out[0]), [12.0, 12.0, 12.0])
  assert "unreadable" in caplog.text
  assert os.path.getsize(path) > 100  # Replaced by the program compiled again.


def test_the_sources_digest_covers_the_traced_code_and_the_functions_file(tmp_path):
  (tmp_path / "engine").mkdir()
  (tmp_path / "engine" / "a.py").write_text("x = 1\n")
  (tmp_path / "sharding.py").write_text("y = 2\n")
  (tmp_path / "cli.py").write_text("w = 1\n")
  (tmp_path / "eval").mkdir()
  (tmp_path / "eval" / "report.py").write_text("z = 3\n")
  digest = lambda extra="": programs.sources_digest.__wrapped__(
      str(tmp_path), programs.TRACED_CODE, extra)
  seen = [digest()]
  (tmp_path / "engine" / "a.py").write_text("x = 2\n")
  seen.append(digest())
  (tmp_path / "sharding.py").write_text("y = 3\n")
  seen.append(digest())
  seen.append(digest(str(tmp_path / "eval" / "report.py")))  # A jitted function's module.
  assert len(set(seen)) == 4
  (tmp_path / "eval" / "report.py").write_text("z = 4\n")  # Not code an engine program runs.
  (tmp_path / "cli.py").write_text("w = 2\n")
  assert digest() == seen[2]


RUN = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from pedrl.engine import compiler, programs
    from pedrl.bench import compiles
    jax.config.update("jax_compilation_cache_dir", sys.argv[1])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    programs.use(sys.argv[2])
    def f(x):  # Fusions with kernels of their own (an iota, a reduction, a scan).
      return (x * jnp.arange(x.shape[0])[:, None]).sum(1), jnp.cumsum(x, 0)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((64, 32)), jnp.float32)
    compiler.engine_options()  # Its probe compiles a program of its own.
    g = compiler.jit(f)
    if sys.argv[3] == "lower first":  # jax reads it from its cache, outside the store.
      g.lower(x).compile()
    with compiles.compilations() as made:
      out = g(x)
    print(made.stored, made.cache_hits, float(out[0].sum()), float(out[1].sum()))
    """)


@pytest.mark.job
def test_a_program_jax_read_from_its_cache_is_stored_compiled_afresh(tmp_path):
  """XLA:CPU serializes an executable that jax read from its persistent cache without
  its kernels: stored as it is, it loads, then fails when it runs. The store compiles
  each program afresh (`programs._fresh`), also one that jax read earlier in the
  process, and leaves jax's cache as it was."""
  cache, store = str(tmp_path / "jax"), str(tmp_path / "store")
  script = tmp_path / "run.py"
  script.write_text(RUN)
  run = lambda store_dir, how="": subprocess.run(
      [sys.executable, str(script), cache, store_dir, how], capture_output=True, text=True,
      timeout=300, check=True).stdout.split()
  plain = run("off")  # Compiled, and written to jax's cache.
  assert plain[:2] == ["0", "0"]
  entries = sorted(os.listdir(cache))
  assert run(store, "lower first")[:2] == ["0", "0"]  # Compiled afresh, not read, and stored.
  assert sorted(os.listdir(cache)) == entries  # Nor written to jax's cache.
  stored = run(store)  # A new process: from the store, and it runs.
  assert stored[0] == "1" and stored[2:] == plain[2:]


TWO_PROCESSES = textwrap.dedent("""
    import sys
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(sys.argv[1], num_processes=2, process_id=int(sys.argv[2]))
    import jax.numpy as jnp, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from pedrl.engine import compiler, programs
    from pedrl.bench import compiles
    programs.use(sys.argv[3])
    mesh = Mesh(np.array(jax.devices()), ("data",))  # One device a process.
    rows = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    x = jax.make_array_from_callback((8, 4), NamedSharding(mesh, P("data")), lambda i: rows[i])
    def f(x):  # A sum over both processes' rows: a collective in the program.
      return (x * x).sum(0)
    g = compiler.jit(f, out_shardings=NamedSharding(mesh, P()))
    with compiles.compilations() as made:
      out = g(x)
    print(made.stored, np.asarray(out.addressable_data(0)).tolist())
    jax.distributed.shutdown()
    """)


@pytest.mark.job
def test_each_process_of_a_job_keeps_and_reads_its_own_programs(tmp_path):
  """jax writes its persistent cache from process 0 only: without the store, every other
  process of a pod compiles each program at each start. Each process keeps its own
  executable (keyed by its index) and the next start of both reads it, collective and
  all, with the same result."""
  script, store = tmp_path / "two.py", str(tmp_path / "store")
  script.write_text(TWO_PROCESSES)
  env = dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS="")

  def start():
    with socket.socket() as s:
      s.bind(("127.0.0.1", 0))
      address = f"127.0.0.1:{s.getsockname()[1]}"
    procs = [subprocess.Popen([sys.executable, str(script), address, str(i), store], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    return [out.splitlines()[-1].split(maxsplit=1) for out, _ in outs]  # After gloo's.

  want = str((np.arange(32.0).reshape(8, 4) ** 2).sum(0).tolist())
  assert start() == [["0", want]] * 2  # Compiled by each process, and kept.
  assert len(_stored_files(store)) == 2  # One executable per process.
  assert start() == [["1", want]] * 2  # Both read their own, and they run.


def test_a_folder_others_can_write_is_not_used(tmp_path, monkeypatch, caplog):
  shared = tmp_path / "shared"
  shared.mkdir()
  shared.chmod(0o777)
  monkeypatch.setenv(programs.ENV, str(shared))
  programs.reset()
  try:
    assert programs.store() is None and "not the user's own folder" in caplog.text
    shared.chmod(0o700)
    programs.reset()
    assert programs.store() is not None
  finally:
    monkeypatch.delenv(programs.ENV)
    programs.reset()


def test_without_a_setting_the_store_is_a_folder_of_jaxs_cache(tmp_path, monkeypatch):
  monkeypatch.delenv(programs.ENV, raising=False)
  before = jax.config.jax_compilation_cache_dir
  jax.config.update("jax_compilation_cache_dir", str(tmp_path))
  programs.reset()
  try:
    assert programs.store().directory == str(tmp_path / "pedrl-programs")
  finally:
    jax.config.update("jax_compilation_cache_dir", before)
    programs.reset()


def test_a_failed_write_leaves_the_call_alone(store, monkeypatch, caplog):
  def full(*_, **__):
    raise OSError(28, "No space left on device")
  monkeypatch.setattr(programs.tempfile, "mkstemp", full)
  out = compiler.jit(scaled_sums, static_argnums=(0,))(1, jnp.ones((2, 3)), jnp.ones(3))
  np.testing.assert_array_equal(np.asarray(out[0]), [4.0, 4.0, 4.0])  # Two rows of 1 + 1.
  assert "could not write" in caplog.text and _stored_files(store) == []
  with jax.disable_jit():  # And no store without jit (jax.jit's own path).
    assert programs.call_key(scaled_sums, {}, (1, jnp.ones(3), jnp.ones(3)), {}) is None



def test_past_its_limit_the_store_drops_the_least_recently_used(store, monkeypatch):
  def call(n):  # A program per row count; their files are about the same size.
    compiler.jit(scaled_sums, static_argnums=(0,))(1, jnp.ones((n, 3)), jnp.ones(3))

  made = {}
  for n in (1, 2, 3):
    before = set(_stored_files(store))
    call(n)
    new, = set(_stored_files(store)) - before
    made[n] = os.path.join(store, new[:2], new)
  for age, n in enumerate((1, 2, 3)):  # Distinct last uses, 1 the oldest.
    os.utime(made[n], (1e9 + age, 1e9 + age))
  sizes = [os.path.getsize(p) for p in made.values()]
  programs.store().max_bytes = sum(sizes) + min(sizes) // 2  # Room for three.
  jax.clear_caches()
  programs.forget()
  with compiles.compilations() as loaded:
    call(1)  # Read from the store: now the most recently used.
  assert loaded.stored == 1
  other, stale = store / "notes.pkl", store / "ab" / "x.tmp"  # Not the store's programs.
  stale.parent.mkdir(exist_ok=True)
  other.write_bytes(b"0" * 10 * max(sizes))
  stale.write_bytes(b"0")
  os.utime(stale, (1e9, 1e9))  # Left by a write killed long ago.
  call(4)  # A fourth file: the least recently used program, 2's, goes.
  assert [os.path.exists(made[n]) for n in (1, 2, 3)] == [True, False, True]
  assert len(_stored_files(store)) == 4 and other.exists() and not stale.exists()


def test_the_size_limit_comes_from_the_environment(tmp_path, monkeypatch):
  limit = environ.program_store_max_bytes
  for value, want in ((None, 4 * 2**30), ("", 4 * 2**30), ("0.5", 2**29), ("0", None),
                      ("1e-12", 1)):
    if value is None:
      monkeypatch.delenv(environ.PROGRAM_STORE_MAX_GIB, raising=False)
    else:
      monkeypatch.setenv(environ.PROGRAM_STORE_MAX_GIB, value)
    assert limit() == want, value
  monkeypatch.setenv(environ.PROGRAM_STORE_MAX_GIB, "0.5")
  programs.use(str(tmp_path))  # The store takes it.
  assert programs.store().max_bytes == 2**29
  programs.reset()
  for bad in ("-1", "nan", "inf", "4G"):
    monkeypatch.setenv(environ.PROGRAM_STORE_MAX_GIB, bad)
    with pytest.raises(ValueError, match=f"PEDRL_PROGRAM_STORE_MAX_GIB='{bad}': expected"):
      limit()


@pytest.mark.job
def test_a_command_refuses_a_bad_size_limit_in_one_line_at_its_start():
  # Before any model or program: a 7B-shaped random model would take minutes on CPU.
  env = dict(os.environ, PEDRL_PROGRAM_STORE_MAX_GIB="4G")
  out = subprocess.run([sys.executable, "-m", "pedrl.bench.sampling", "--device_profile=gpu"],
                       capture_output=True, text=True, env=env, timeout=60)
  assert out.returncode == 1 and out.stderr.strip().splitlines() == [
      "error: PEDRL_PROGRAM_STORE_MAX_GIB='4G': expected the program store's size limit in "
      "GiB (0: none)"], out.stderr[-1000:]
