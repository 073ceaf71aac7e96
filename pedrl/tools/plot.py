r"""PNG curves of a training workdir's metrics.jsonl: reward components and training signals.

  python -m pedrl.tools.plot --workdir=/runs/uco            # writes /runs/uco/plots/*.png

Needs matplotlib (`pip install "pedrl[plot]"`).
"""
import json
import os

from absl import flags

from pedrl import logs


PANELS = {
    "rewards": lambda k: k.startswith("reward/"),
    "training": lambda k: k in ("kl", "clip_fraction", "grad_norm", "advantage/std",
                                "sampler_trainer_logp_diff"),
    "dialogues": lambda k: k in ("turns/mean", "tutor_tokens/mean"),
    "time": lambda k: k.startswith("seconds/"),
}


def plot(workdir: str) -> list[str]:
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
  except ImportError:
    raise ImportError('plotting needs matplotlib: pip install "pedrl[plot]"') from None
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f if line.strip()]
  if not rows:
    raise ValueError(f"{workdir}/metrics.jsonl has no steps yet")
  os.makedirs(os.path.join(workdir, "plots"), exist_ok=True)
  written = []
  for name, wanted in PANELS.items():
    keys = sorted({k for r in rows for k, v in r.items()
                   if wanted(k) and isinstance(v, (int, float))})
    if not keys:
      continue
    fig, ax = plt.subplots(figsize=(7, 4))
    for k in keys:
      points = [(r["step"], r[k]) for r in rows if k in r]
      ax.plot(*zip(*points), label=k, marker="." if len(points) < 30 else None)
    ax.set_xlabel("step")
    ax.set_title(f"{os.path.basename(os.path.abspath(workdir))}: {name}")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    path = os.path.join(workdir, "plots", f"{name}.png")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)
  return written


def main(argv):
  del argv
  for path in plot(flags.FLAGS.workdir):
    print(path)


if __name__ == "__main__":  # Flags only for the command: the functions import cleanly.
  flags.DEFINE_string("workdir", None, "Training workdir with metrics.jsonl.", required=True)
  logs.run(main)
