"""matplotlib for the PNGs pedrl writes (pedrl.tools.plot, the analysis), without a display."""


def pyplot():
  """matplotlib.pyplot on the Agg backend; one clear ImportError without matplotlib."""
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    raise ImportError('the figures need matplotlib: pip install "pedrl[plot]"') from None
  return plt
