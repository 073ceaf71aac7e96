"""The jobs' per-step record: metrics.jsonl, TensorBoard events and sample dialogues.

The training job writes a row per GRPO step, the rollout job a row per batch
of problems, with the same names for what they share (`step`, `problem_uids`,
and `pedrl.rewards.assemble.batch_metrics`: reward/…, reward_std/…, pipeline/…).
"""
import glob
import os
import shutil

from pedrl.env import dialogue as dialogue_lib


class MetricsWriter:
  """Per-step metrics to WORKDIR/metrics.jsonl and TensorBoard; sample dialogues as text.
  Inactive (writes nothing) on all but the main process of a multi-host run.
  The training job's step is an update step, the rollout job's a batch.

  metrics.jsonl is the record: `resume(step)` keeps its rows up to `step` and
  rebuilds the TensorBoard events and samples from what is kept, so after any
  kill and restart each step is there once."""

  def __init__(self, workdir: str, active: bool = True):
    self.workdir, self.active = workdir, active
    self.path = os.path.join(workdir, "metrics.jsonl")
    self.tb = None

  def rows(self) -> list[dict]:
    """The rows of metrics.jsonl (a line cut by a crash removed)."""
    rows = dialogue_lib.read_rows(self.path)
    for n, row in enumerate(rows, 1):
      if not isinstance(row, dict) or "step" not in row:
        raise dialogue_lib.RecordError(f"{self.path}, row {n}: not a metrics row (no 'step')")
    return rows

  def resume(self, step: int):
    """Starts writing after `step`: later rows, events and samples are dropped."""
    if not self.active:
      return
    from tensorboardX import SummaryWriter
    every = self.rows()
    rows = [row for row in every if row["step"] <= step]
    if len(rows) < len(every):
      dialogue_lib.append_rows(rows, self.path, mode="w")
    samples = os.path.join(self.workdir, "samples")
    os.makedirs(samples, exist_ok=True)
    tb_dir = os.path.join(self.workdir, "tensorboard")
    shutil.rmtree(tb_dir, ignore_errors=True)
    self.tb = SummaryWriter(tb_dir)
    for row in rows:
      self._scalars(row["step"], row)
    for path in sorted(glob.glob(os.path.join(samples, "step_*.txt"))):
      s = int(os.path.basename(path)[5:-4])
      if s > step:
        os.remove(path)
      else:
        with open(path) as f:
          self._text(s, f.read())
    self.tb.flush()

  def _scalars(self, step: int, metrics: dict):
    for k, v in metrics.items():
      if isinstance(v, (int, float)) and k != "step":
        self.tb.add_scalar(k, v, step)

  def _text(self, step: int, text: str):
    self.tb.add_text("samples", text.replace("\n", "  \n"), step)

  def write(self, step: int, metrics: dict):
    if not self.active:
      return
    if self.tb is None:
      self.resume(step - 1)
    dialogue_lib.append_rows([metrics], self.path)  # Synced: a crash cuts at most this line.
    self._scalars(step, metrics)
    self.tb.flush()

  def samples(self, step: int, dialogues):
    if not self.active:
      return
    text = "\n\n".join(
        f"# problem {d.problem_id} ({d.scenario}), reward "
        f"{d.rewards.total if d.rewards else None}\n"
        f"{d.problem}\n\n{dialogue_lib.transcript(d.messages)}" for d in dialogues)
    with open(os.path.join(self.workdir, "samples", f"step_{step:06d}.txt"), "w") as f:
      f.write(text)
    self._text(step, text)

  def close(self):
    if self.tb is not None:
      self.tb.close()
