"""Checkpoints that are damaged, non-finite or cannot be written: verified, set aside, reported."""
import errno
import glob
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pedrl import runs
from pedrl.models import decoder
from pedrl.rl import checkpoint

MODEL = {"model_type": "qwen2", "hidden_size": 64}


def _state(seed: int):
  """Random float32 weights (incompressible, as real ones) and an Adam-like state."""
  rng = np.random.default_rng(seed)
  return {"params": {"w": jnp.asarray(rng.normal(size=(256, 64)), jnp.float32),
                     "b": jnp.asarray(rng.normal(size=(64,)), jnp.bfloat16)},
          "opt_state": {"mu": jnp.asarray(rng.normal(size=(256, 64)), jnp.float32),
                        "count": jnp.asarray(seed, jnp.int32)}}


def _saved(tmp_path, steps=(1, 2, 3)):
  ckpt = checkpoint.Checkpoints(str(tmp_path))
  for s in steps:
    ckpt.save(s, _state(s), {"step": s, "model": MODEL})
  return ckpt


def _largest_data_file(step_dir: str) -> str:
  files = [f for f in glob.glob(os.path.join(step_dir, "state", "**", "d", "*"), recursive=True)
           if os.path.isfile(f)]
  return max(files, key=os.path.getsize)


def _flip_bytes(step_dir):
  path = _largest_data_file(step_dir)
  data = bytearray(open(path, "rb").read())
  mid = len(data) // 2
  for i in range(mid, mid + 64):
    data[i] ^= 0xFF
  open(path, "wb").write(bytes(data))


def _truncate(step_dir):
  path = _largest_data_file(step_dir)
  os.truncate(path, os.path.getsize(path) // 2)


def _delete_data(step_dir):
  os.remove(_largest_data_file(step_dir))


def _cut_metadata(step_dir):
  path = os.path.join(step_dir, "state", "_METADATA")
  os.truncate(path, os.path.getsize(path) // 2)


def _garbage_meta(step_dir):
  for path in glob.glob(os.path.join(step_dir, "meta", "*")):
    if not path.endswith("commit_success.txt"):
      open(path, "w").write("{not json")


def _emptied(step_dir):
  shutil.rmtree(step_dir)
  os.makedirs(step_dir)


@pytest.mark.parametrize("damage", [_flip_bytes, _truncate, _delete_data, _cut_metadata,
                                    _garbage_meta, _emptied])
def test_a_damaged_latest_step_is_set_aside_and_the_one_before_restored(tmp_path, damage):
  ckpt = _saved(tmp_path)
  damage(ckpt.step_path(3))
  ckpt = checkpoint.Checkpoints(str(tmp_path))  # A new process finds the damage.
  step, state, meta = ckpt.restore(_state(0), MODEL)
  assert step == 2 and meta["step"] == 2
  want = _state(2)
  for path in (("params", "w"), ("params", "b"), ("opt_state", "mu"), ("opt_state", "count")):
    np.testing.assert_array_equal(np.asarray(state[path[0]][path[1]]),
                                  np.asarray(want[path[0]][path[1]]))
  # The broken step is kept for inspection, out of the manager's way: step 3 can be saved again.
  assert sorted(ckpt.manager.all_steps()) == [1, 2]
  assert [os.path.basename(p).split(".")[0]
          for p in glob.glob(os.path.join(ckpt.broken_directory, "*"))] == ["3"]
  ckpt.save(3, _state(3), {"step": 3, "model": MODEL})
  assert ckpt.restore(_state(0), MODEL)[0] == 3
  ckpt.close()


def test_flipped_bytes_are_caught_by_the_checksums(tmp_path, monkeypatch):
  # The flip may also break orbax's decoding; with verification off it must be the data
  # that changed, so that the test shows what the checksums catch.
  ckpt = _saved(tmp_path, (3,))
  _flip_bytes(ckpt.step_path(3))
  want = checkpoint.checksums(_state(3))
  monkeypatch.setattr(runs, "checksums", lambda state: want)  # No verification.
  step, state, _ = checkpoint.Checkpoints(str(tmp_path)).restore(_state(0), MODEL)
  monkeypatch.undo()
  assert step == 3 and checkpoint.checksums(state) != want  # The values read differ ...
  with pytest.raises(checkpoint.CheckpointError, match="differ from their saved checksums"):
    checkpoint.Checkpoints(str(tmp_path)).restore(_state(0), MODEL)  # ... and that is seen.


def test_a_step_left_uncommitted_by_a_kill_is_ignored(tmp_path):
  ckpt = _saved(tmp_path, (1, 2))
  # What a kill during orbax's save leaves: a temporary directory, never renamed into place.
  shutil.copytree(ckpt.step_path(2), os.path.join(ckpt.directory, "3.orbax-checkpoint-tmp-99"))
  os.remove(os.path.join(ckpt.directory, "3.orbax-checkpoint-tmp-99", "commit_success.txt"))
  assert checkpoint.Checkpoints(str(tmp_path)).restore(_state(0), MODEL)[0] == 2


def test_no_usable_step_is_one_clear_error(tmp_path):
  ckpt = _saved(tmp_path, (1, 2))
  _truncate(ckpt.step_path(1))
  _cut_metadata(ckpt.step_path(2))
  with pytest.raises(checkpoint.CheckpointError) as e:
    checkpoint.Checkpoints(str(tmp_path)).restore(_state(0), MODEL)
  message = str(e.value)
  assert "\n" not in message and ckpt.directory in message
  assert "step 2:" in message and "step 1:" in message and "Move the directory away" in message
  assert checkpoint.Checkpoints(str(tmp_path / "fresh")).restore(_state(0), MODEL) is None


def test_checksums_see_any_single_change_and_moved_values():
  state = _state(5)
  base = checkpoint.checksums(state)
  assert set(base) == {"['opt_state']['count']", "['opt_state']['mu']", "['params']['b']",
                       "['params']['w']"}
  w = np.asarray(state["params"]["w"])
  bits = w.view(np.uint32).copy()
  bits[17, 3] ^= 1 << 31  # One flipped bit.
  changed = dict(state, params=dict(state["params"], w=jnp.asarray(bits.view(np.float32))))
  assert checkpoint.checksums(changed)["['params']['w']"] != base["['params']['w']"]
  swapped = w.copy()
  swapped[[0, 1]] = swapped[[1, 0]]  # Same values, other places.
  moved = dict(state, params=dict(state["params"], w=jnp.asarray(swapped)))
  assert checkpoint.checksums(moved)["['params']['w']"] != base["['params']['w']"]
  b = dict(state, params=dict(state["params"], b=state["params"]["b"].at[3].add(1)))
  assert checkpoint.checksums(b)["['params']['b']"] != base["['params']['b']"]


def test_non_finite_state_is_never_saved(tmp_path):
  ckpt = _saved(tmp_path, (1,))
  bad = _state(2)
  bad["opt_state"]["mu"] = bad["opt_state"]["mu"].at[0, 0].set(jnp.nan)
  with pytest.raises(checkpoint.CheckpointError, match="non-finite values"):
    ckpt.save(2, bad, {"step": 2, "model": MODEL})
  assert ckpt.manager.all_steps() == [1]


def test_a_failed_save_is_one_line_with_the_path_and_free_space(tmp_path, monkeypatch):
  ckpt = _saved(tmp_path, (1,))

  def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device\n" + "orbax traceback line\n" * 50)
  monkeypatch.setattr(ckpt.manager, "save", full)
  with pytest.raises(checkpoint.CheckpointError) as e:
    ckpt.save(2, _state(2), {"step": 2, "model": MODEL})
  message = str(e.value)
  assert "\n" not in message and ckpt.step_path(2) in message
  assert "No space left on device" in message and "free on that disk" in message


def test_a_checkpoint_of_another_model_is_refused_not_skipped(tmp_path):
  ckpt = _saved(tmp_path, (1,))
  with pytest.raises(checkpoint.CheckpointError, match="another model"):
    ckpt.restore(_state(0), {"model_type": "llama", "hidden_size": 64})
  assert ckpt.manager.all_steps() == [1]  # Not set aside: the workdir is simply not this run's.


def test_checksum_equals_a_numpy_computation():
  x = np.random.default_rng(0).normal(size=(5, 7, 3)).astype(np.float32)
  h = np.random.default_rng(1).normal(size=(9,)).astype(np.float16)
  got = checkpoint.checksums({"x": jnp.asarray(x), "h": jnp.asarray(h)})
  for name, a, word in (("x", x, np.uint32), ("h", h, np.uint16)):
    bits = a.view(word).reshape(-1).astype(np.uint64)
    weights = np.arange(bits.size, dtype=np.uint64) * 2 + 1
    assert got[f"['{name}']"] == int((bits * weights).sum() % 2**32)


def test_a_state_larger_than_the_free_space_is_refused_before_writing(tmp_path, monkeypatch):
  ckpt = _saved(tmp_path, (1,))
  monkeypatch.setattr(ckpt, "_free_bytes", lambda: 1000.0)
  with pytest.raises(checkpoint.CheckpointError, match="not enough space to save step 2 to .*MiB free"):
    ckpt.save(2, _state(2), {"step": 2, "model": MODEL})
  assert ckpt.manager.all_steps() == [1] and not os.path.exists(ckpt.step_path(2))


def test_a_tensorstore_write_error_is_summarised_with_the_os_reason():
  # The shape of what orbax raises on a full disk (seen on a 3 MB tmpfs): the reason comes last.
  e = ValueError('RESOURCE_EXHAUSTED: Error writing "params.w/0.0" in OCDBT database at local '
                 'file "/ckpt/1.orbax-checkpoint-tmp/state/": Failed writing: "' + "x" * 300 +
                 "\": No space left on device [os_error_code='28']\n" + "more\n" * 40)
  line = runs.one_line(e)
  assert "\n" not in line and line.startswith("ValueError: RESOURCE_EXHAUSTED")
  assert line.endswith("[No space left on device]")


def _bfloat16_base(testdata, tmp_path):
  """The testdata Qwen2 as a real instruct checkpoint declares itself: bfloat16."""
  base = tmp_path / "base"
  shutil.copytree(testdata("qwen2"), base)
  config = json.loads((base / "config.json").read_text())
  config.update(torch_dtype="bfloat16", dtype="bfloat16")
  (base / "config.json").write_text(json.dumps(config))
  return base


def test_a_tutor_trained_in_float32_on_a_bfloat16_base_is_read_back_sharded(testdata, tmp_path):
  """GRPO trains float32 weights whatever the base's dtype, and checksums their bits: they
  are verified as saved, then cast to the base's bfloat16 and laid out as asked (unrolled
  here, saved scanned), sharded."""
  scan_layers = False
  from pedrl import models, sharding
  base = _bfloat16_base(testdata, tmp_path)
  run = tmp_path / "run"
  run.mkdir()
  (run / "config.json").write_text(json.dumps({"tutor": {"path": str(base)}, "scan_layers": True}))
  _, _, params = models.load(str(base), dtype="float32")  # As training holds them.
  ckpt = checkpoint.Checkpoints(str(run))
  ckpt.save(2, {"params": params, "opt_state": {"count": jnp.asarray(2, jnp.int32)}},
            {"step": 2, "model": MODEL})
  ckpt.close()
  mesh = sharding.make_mesh(fsdp=2, tensor=2, devices=jax.devices()[:4])
  tutor = runs.trained_tutor(str(run), scan_layers=scan_layers, mesh=mesh)
  assert tutor.step == 2 and tutor.cfg.dtype == "bfloat16"
  want = params if scan_layers else decoder.unstack_layers(params)
  got_leaves = jax.tree_util.tree_leaves_with_path(tutor.params)
  assert [p for p, _ in got_leaves] == [p for p, _ in jax.tree_util.tree_leaves_with_path(want)]
  shardings = jax.tree.leaves(sharding.param_shardings(tutor.params, mesh))
  for (path, got), w, where in zip(got_leaves, jax.tree.leaves(want), shardings):
    assert got.dtype == jnp.bfloat16, path
    assert got.sharding.is_equivalent_to(where, got.ndim), (path, got.sharding, where)
    np.testing.assert_array_equal(np.asarray(got.astype(jnp.float32)),
                                  np.asarray(w.astype(jnp.bfloat16).astype(jnp.float32)))
  embed = tutor.params["embed"]["embedding"]
  assert embed.sharding.mesh == mesh and len(embed.sharding.device_set) == 4
