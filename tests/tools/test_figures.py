"""What the figures share (pedrl.figures): colours by name, interval whiskers, PNG files;
and the report's whiskers of a metrics.json metric."""
import pytest

from pedrl import figures
from pedrl.tools import report

plt = pytest.importorskip("matplotlib.pyplot")


def test_whiskers_are_the_distances_to_the_bounds_never_negative():
  assert figures.whiskers(0.3, 0.2, 0.5, 100) == [[pytest.approx(10)], [pytest.approx(20)]]
  assert figures.whiskers(2.0, 2.5, 3.0) == [[0], [1.0]]  # A bound rounded past the value.


def test_metric_whiskers_need_a_finite_interval_and_keep_a_zero_bound():
  assert report.percent_whiskers({"leak_rate": 0.1, "leak_rate_ci": [0.0, 0.3]}, "leak_rate") == [
      [pytest.approx(10)], [pytest.approx(20)]]
  for ci in (None, [None, None], [float("nan"), float("nan")]):
    assert report.percent_whiskers({"leak_rate": 0.1, "leak_rate_ci": ci}, "leak_rate") is None
  assert report.percent_whiskers({"leak_rate": 0.1}, "leak_rate") is None


def test_colors_follow_the_cycle_in_order_and_wrap():
  cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  names = [f"run{i}" for i in range(len(cycle) + 1)]
  got = figures.colors(plt, names)
  assert [got[n] for n in names] == cycle + cycle[:1]


def test_save_png_writes_each_figure_and_closes_it(tmp_path):
  figs = {name: plt.figure() for name in ("a", "b")}
  paths = figures.save_png(figs, str(tmp_path / "new"), dpi=50)
  assert paths == [str(tmp_path / "new" / f"{n}.png") for n in ("a", "b")]
  assert all(open(p, "rb").read(8) == b"\x89PNG\r\n\x1a\n" for p in paths)
  assert not set(plt.get_fignums()) & {f.number for f in figs.values()}
