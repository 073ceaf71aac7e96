"""matplotlib for the PNGs pedrl writes (pedrl.tools.plot, the analysis), without a display,
and what their figures share: colours by name, interval whiskers, writing the files."""
from collections.abc import Iterable
import os
import types
import typing

if typing.TYPE_CHECKING:  # Annotations only: matplotlib loads in pyplot().
  import matplotlib.axes


def pyplot() -> types.ModuleType:
  """matplotlib.pyplot on the Agg backend; one clear ImportError without matplotlib."""
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    raise ImportError('the figures need matplotlib: pip install "pedrl[plot]"') from None
  return plt


def colors(plt: types.ModuleType, names: Iterable[str]) -> dict:
  """{name: colour}: matplotlib's colour cycle in the order of `names`, so a run or a
  condition keeps its colour in every figure of a set."""
  palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  return {n: palette[i % len(palette)] for i, n in enumerate(names)}


def style_panel(ax: "matplotlib.axes.Axes", title: str, xlabel: str = "", ylabel: str = "",
                grid: str = "both") -> None:
  """What every panel of pedrl's figures shares: a small title, labels and ticks, and a
  light grid (along `grid`: "x", "y" or "both")."""
  ax.set_title(title, fontsize=9)
  if xlabel:
    ax.set_xlabel(xlabel, fontsize=8)
  if ylabel:
    ax.set_ylabel(ylabel, fontsize=8)
  ax.tick_params(labelsize=7)
  ax.grid(alpha=0.3, axis=grid)


def whiskers(value: float, low: float, high: float, scale: float = 1.0) -> list:
  """matplotlib's error bar ([[below], [above]]) of `value` in its interval (low, high),
  times `scale`; never negative (a bound rounded past the value)."""
  return [[scale * max(value - low, 0)], [scale * max(high - value, 0)]]


def save_png(figs: dict, folder: str, dpi: int) -> list:
  """Writes {stem: Figure} as folder/stem.png (the folder made) and closes them; the paths."""
  plt = pyplot()
  os.makedirs(folder, exist_ok=True)
  paths = []
  for stem, fig in figs.items():
    paths.append(os.path.join(folder, f"{stem}.png"))
    fig.savefig(paths[-1], dpi=dpi)
    plt.close(fig)
  return paths
