"""The engine's per-program compiler options: the GPU autotuning level setting."""
import jax
import jax.numpy as jnp
import pytest

from pedrl.engine import compiler, programs


@pytest.fixture
def options(monkeypatch):
  """engine_options() recomputed under the test's environment and backend, and reset after."""
  compiler.engine_options.cache_clear()
  yield monkeypatch
  compiler.engine_options.cache_clear()


def _compile_options(monkeypatch) -> list:
  """The compiler_options each jax.jit of the engine is built with, from now on."""
  seen, real = [], jax.jit

  def spy(fn, **kw):
    seen.append(kw.get("compiler_options"))
    return real(fn, **kw)
  monkeypatch.setattr(jax, "jit", spy)
  return seen


def test_the_autotune_level_reaches_the_compile_call_only_on_a_gpu(options):
  options.setenv(compiler.GPU_AUTOTUNE_ENV, "0")
  options.setattr(compiler, "_backend", lambda: "gpu")
  options.setattr(compiler, "_known", lambda o: True)  # This CPU jaxlib stands in for a GPU's.
  programs.use(None)
  try:
    seen = _compile_options(options)
    f = compiler.jit(lambda x: x * 2)
    assert float(f(jnp.float32(3))) == 6.0
    assert seen == [{"xla_gpu_autotune_level": 0}]
    compiler.engine_options.cache_clear()
    options.setattr(compiler, "_backend", lambda: "cpu")
    seen.clear()
    compiler.jit(lambda x: x * 3)(jnp.float32(1))
    assert seen and all("xla_gpu_autotune_level" not in (o or {}) for o in seen), seen
  finally:
    programs.reset()


def test_unset_the_gpu_gets_xlas_defaults(options):
  options.delenv(compiler.GPU_AUTOTUNE_ENV, raising=False)
  options.setattr(compiler, "_backend", lambda: "gpu")
  assert compiler.engine_options() == {}


def test_a_jaxlib_without_the_option_drops_it_with_a_warning(options, caplog):
  options.setenv(compiler.GPU_AUTOTUNE_ENV, "2")
  options.setattr(compiler, "_backend", lambda: "gpu")
  options.setattr(compiler, "_known", lambda o: False)
  assert compiler.engine_options() == {}
  assert "does not know XLA's xla_gpu_autotune_level" in caplog.text


@pytest.mark.parametrize("value", ["5", "-1", "fast", "1.5"])
def test_a_bad_level_is_an_error_naming_the_variable(options, value):
  options.setenv(compiler.GPU_AUTOTUNE_ENV, value)
  with pytest.raises(ValueError, match=compiler.GPU_AUTOTUNE_ENV):
    compiler.engine_options()


def test_the_options_are_part_of_the_store_key(options, tmp_path):
  """A program compiled with other options is another program: the store keeps both."""
  options.setattr(compiler, "_backend", lambda: "gpu")
  options.setattr(compiler, "_known", lambda o: True)
  programs.use(str(tmp_path))
  try:
    for level in ("", "0"):
      options.setenv(compiler.GPU_AUTOTUNE_ENV, level)
      compiler.engine_options.cache_clear()
      compiler.jit(lambda x: x + 1)(jnp.zeros(3))
    assert len(list(tmp_path.glob("*/*.pkl"))) == 2
  finally:
    programs.reset()
