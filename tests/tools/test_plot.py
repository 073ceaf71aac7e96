"""pedrl.tools.plot on small synthetic workdirs: a panel per quantity, a line per run,
log axes, integer steps, std bands, rollout histograms, evaluation bars, errors."""
import contextlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from pedrl import files
from pedrl.env import dialogue as dialogue_lib  # noqa: E402
from pedrl.tools import plot  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _rows(steps: int, scale: float = 1.0) -> list:
  """Training rows as the job writes them (a few keys of each theme, one new one)."""
  return [{"step": s, "problem_uids": [2 * s, 2 * s + 1],
           "reward/total": -scale * s, "reward_std/total": 0.1 * s,
           "reward/r_sol": 0.5, "reward_std/r_sol": 0.0,
           "kl": 1e-4 * 10**s, "grad_norm": 5.0 + s, "loss": -0.01 * s,
           "advantage/mean": 0.0, "advantage/std": 0.7, "entropy": 4.3, "lr": 1e-3 * scale,
           "judges/accept_rate": 0.5, "signal/zero_spread_groups": 0.25,
           "mean_turns": 3.0, "mean_tutor_tokens": 48.0, "pipeline/dropped": 0,
           "seconds/rollout": 7.5, "tokens_per_second": 40.0 * s,
           "time": 1.7e9 + 60 * s} for s in range(1, steps + 1)]


def _workdir(path, rows):
  path.mkdir(parents=True)
  files.append_rows(rows, str(path / "metrics.jsonl"))
  return path


@pytest.fixture
def two(tmp_path):
  return [_workdir(tmp_path / "a", _rows(4)), _workdir(tmp_path / "b", _rows(4, scale=2))]


@contextlib.contextmanager
def _figures(workdirs):
  figs = plot.figures(plot.load_all(workdirs))
  try:
    yield figs
  finally:
    for fig in figs.values():
      plot.pyplot().close(fig)


@pytest.fixture
def figs(two):
  with _figures(two) as figs:
    yield figs


def _panels(figs) -> dict:
  """{panel title: axes} over all figures."""
  return {ax.get_title(): ax for fig in figs.values() for ax in fig.axes}


def test_two_workdirs_draw_a_line_per_run_in_every_panel(figs):
  assert list(figs) == ["rewards", "training", "dialogues", "pipeline", "time"]
  colours = []
  for fig in figs.values():
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["a", "b"]
    for ax in fig.axes:
      lines = ax.get_lines()
      assert len(lines) == 2, ax.get_title()
      colours.append(tuple(line.get_color() for line in lines))
  assert len(set(colours)) == 1 and len(set(colours[0])) == 2  # A colour per run, everywhere.
  panels = _panels(figs)
  for key in ("judges/accept_rate", "entropy", "lr", "signal/zero_spread_groups", "kl",
              "mean_turns", "pipeline/dropped", "tokens_per_second"):
    assert key in panels  # Each quantity on its own axis, new keys included.
  assert not [t for t in panels if "_std/" in t or t == "advantage/std"]  # Drawn as bands.
  assert "time (s since the first step)" in panels
  np.testing.assert_allclose(panels["time (s since the first step)"].get_lines()[0].get_ydata(),
                             [0, 60, 120, 180])


def test_a_quantity_spanning_decades_gets_a_log_axis(figs):
  panels = _panels(figs)
  assert panels["kl"].get_yscale() == "log"  # 1e-3 … 1.
  assert panels["tokens_per_second"].get_yscale() == "linear"  # 40 … 160.
  assert panels["reward/total ± std"].get_yscale() == "linear"  # Negative.
  assert plot.log_scale([1e-6, 1e-4]) and not plot.log_scale([0.0, 1e-4, 1.0])


def test_an_old_workdirs_metric_names_read_as_todays(tmp_path):
  """metrics.jsonl of a pedrl before one spelling per measure (`turns/mean`,
  `tutor_tokens/mean`) reads under today's names (pedrl.jobs.metric_log.RENAMED), in the
  plot and when a job resumes on it."""
  from pedrl.jobs import metric_log
  old = _rows(2)
  for r in old:
    r["turns/mean"], r["tutor_tokens/mean"] = r.pop("mean_turns"), r.pop("mean_tutor_tokens")
  workdir = _workdir(tmp_path / "old", old)
  for rows in (plot.load(str(workdir)).rows, metric_log.MetricsWriter(str(workdir)).rows()):
    assert [(r["mean_turns"], r["mean_tutor_tokens"]) for r in rows] == [(3.0, 48.0)] * 2
    assert not [k for r in rows for k in r if k in ("turns/mean", "tutor_tokens/mean")]
  with _figures([workdir]) as figs:
    assert {"mean_turns", "mean_tutor_tokens"} <= set(_panels(figs))


def test_steps_are_integers_and_a_short_run_has_markers(tmp_path):
  workdir = _workdir(tmp_path / "one", _rows(1))
  with _figures([workdir]) as figs:
    for ax in (ax for fig in figs.values() for ax in fig.axes):
      ticks = ax.get_xticks()
      assert len(ticks) and np.all(ticks == np.round(ticks)), (ax.get_title(), ticks)
      assert ax.get_lines()[0].get_marker() not in (None, "None", "")


def test_bands_are_mean_plus_minus_std(figs):
  panels = _panels(figs)
  band = panels["reward/total ± std"].collections
  assert len(band) == 2  # One per run.
  y = band[0].get_paths()[0].vertices[:, 1]
  steps = np.arange(1, 5)
  np.testing.assert_allclose([y.min(), y.max()], [(-steps - 0.1 * steps).min(),
                                                  (-steps + 0.1 * steps).max()])
  assert panels["advantage/mean ± std"].collections
  assert not panels["kl"].collections and not panels["entropy"].collections


def test_plot_writes_pngs_to_out_or_the_one_workdir(two, tmp_path):
  paths = plot.plot(two, str(tmp_path / "cmp"))
  assert [os.path.basename(p) for p in paths] == [
      f"{name}.png" for name in ("rewards", "training", "dialogues", "pipeline", "time")]
  assert all(os.path.dirname(p) == str(tmp_path / "cmp") and os.path.getsize(p) > 1000
             for p in paths)
  with pytest.raises(plot.PlotError, match="several workdirs: give --out"):
    plot.plot(two)  # Would replace a's own plots.
  assert not (two[0] / "plots").exists()
  paths = plot.plot(str(two[0]))
  assert [os.path.dirname(p) for p in paths] == [str(two[0] / "plots")] * 5


def _dialogue(uid: int, total: float) -> dialogue_lib.Dialogue:
  messages = [dialogue_lib.Message(dialogue_lib.TUTOR, "Hi", num_tokens=10 + uid),
              dialogue_lib.Message(dialogue_lib.STUDENT, "4", num_tokens=3)]
  return dialogue_lib.Dialogue(
      problem_id=f"p{uid // 2}", problem="2+2?", answer="4", scenario=dialogue_lib.GUIDED,
      rollout=uid % 2, uid=uid, messages=messages, r_sol=1.0, pre_solve_rate=0.5,
      judgement=dialogue_lib.Verdict({}, {}, r_ped=float(uid % 2)),
      rewards=dialogue_lib.Rewards({"r_sol": 1.0, "pedagogy": total - 1.0}, total))


def test_a_rollout_workdir_gets_histograms_of_its_dialogues(tmp_path):
  workdir = _workdir(tmp_path / "roll", [{"step": 1, "problem_uids": [0, 1],
                                          "reward/total": 0.5, "reward_std/total": 0.1}])
  path = str(workdir / "dialogues.jsonl")
  dialogue_lib.save_jsonl([_dialogue(u, total=0.25 * u) for u in range(6)], path)
  with open(path, "a") as f:
    f.write('{"problem_id": "p9", "prob')  # A line the running job is still writing.
  size = os.path.getsize(path)
  with _figures([workdir]) as figs:
    assert list(figs) == ["rollout_rewards", "rollout_dialogues"]
    panels = _panels(figs)
    assert {"reward/total (dashed: mean)", "reward/pedagogy (dashed: mean)",
            "judges/r_ped (dashed: mean)", "turns (dashed: mean)"} <= set(panels)
    counts = [p.get_height() for p in panels["reward/total (dashed: mean)"].patches]
    assert sum(counts) == 6 and max(counts) < 6  # Every dialogue, spread over the bins.
    mean = panels["reward/total (dashed: mean)"].get_lines()[0].get_xdata()[0]
    assert mean == pytest.approx(0.25 * 15 / 6)
  assert os.path.getsize(path) == size  # Read only: the unfinished line is left alone.


def test_an_evaluation_workdir_gets_bars_with_intervals(tmp_path):
  workdir = tmp_path / "eval"
  workdir.mkdir()
  (workdir / "metrics.json").write_text(json.dumps({
      "n_problems": 4, "leak_rate": 0.25, "leak_rate_ci": [0.1, 0.4], "thinking_score": None,
      "thinking_score_ci": [None, None], "pedrm_macro": -0.2, "pedrm_macro_ci": [-0.9, 0.5],
      "bootstrap_seed": 0, "confidence": 0.95, "counts": {"judge/requests": 32}}))
  with _figures([workdir]) as figs:
    panels = _panels(figs)
    assert set(panels) == {"leak_rate", "pedrm_macro"}  # Measured metrics, not settings.
    (bar,) = panels["leak_rate"].patches
    assert bar.get_height() == 0.25
    (whisker,) = [c for c in panels["leak_rate"].collections if len(c.get_segments())]
    np.testing.assert_allclose(whisker.get_segments()[0][:, 1], [0.1, 0.4])
  (workdir / "metrics.json").unlink()
  (workdir / "shards").mkdir()
  with pytest.raises(plot.PlotError, match="evaluation without metrics.json"):
    plot.load_all([workdir])


def test_a_workdir_with_nothing_to_plot_is_an_error_and_writes_nothing(tmp_path):
  empty = tmp_path / "empty"
  empty.mkdir()
  with pytest.raises(plot.PlotError, match="empty: no metrics.jsonl"):
    plot.plot([str(empty)])
  with pytest.raises(plot.PlotError, match="no such directory"):
    plot.plot([str(tmp_path / "nowhere")])
  (empty / "metrics.jsonl").write_text("")
  with pytest.raises(plot.PlotError, match="no steps yet"):
    plot.plot([str(empty)])
  (empty / "run.json").write_text(json.dumps({"identity": {"job": "rollout"}}))
  with pytest.raises(plot.PlotError, match="rollout workdir without dialogues"):
    plot.plot([str(empty)])
  good = _workdir(tmp_path / "good", _rows(2))
  with pytest.raises(plot.PlotError, match="empty: a rollout"):  # None plotted.
    plot.plot([str(good), str(empty)], str(tmp_path / "out"))
  assert not (empty / "plots").exists() and not (tmp_path / "out").exists()


@pytest.mark.job
def test_the_command_says_what_is_wrong_in_one_line(tmp_path):
  r = subprocess.run([sys.executable, "-m", "pedrl.tools.plot", str(tmp_path)], cwd=ROOT,
                     capture_output=True, text=True, timeout=120)
  assert r.returncode == 1 and "Traceback" not in r.stderr
  assert r.stderr.strip().splitlines()[-1].startswith(f"error: {tmp_path}: no metrics.jsonl")
  assert not os.listdir(tmp_path)
