"""The jobs' per-step record: metrics.jsonl, TensorBoard events, sample dialogues and
(training) the dialogue records.

The training job writes a row per GRPO step, the rollout job a row per batch
of problems, with the same names for what they share (`step`, `problem_uids`,
and `pedrl.rewards.assemble.BatchRewards.to_row`: reward/…, reward_std/…, pipeline/…).
"""
from collections.abc import Sequence
import glob
import json
import os
import shutil

from pedrl import files
from pedrl.env import dialogue as dialogue_lib
from pedrl.jobs import samples as samples_lib
from pedrl.rewards import assemble

NOT_SCALARS = ("step", "time")  # Row entries that are no TensorBoard scalar.
# Metric names earlier pedrl wrote -> today's (one spelling per measure, as summary.json and
# metrics.json spell it): a reader of metrics.jsonl passes its rows through `renamed`.
RENAMED = {"turns/mean": "mean_turns", "tutor_tokens/mean": "mean_tutor_tokens"}


def renamed(row: dict) -> dict:
  """A metrics.jsonl row under today's names (RENAMED); a row of today's pedrl as it is."""
  return {RENAMED.get(k, k): v for k, v in row.items()}


class MetricsWriter:
  """Per-step metrics to WORKDIR/metrics.jsonl and TensorBoard; sample dialogues as text.
  Inactive (writes nothing) on all but the main process of a multi-host run.
  The training job's step is an update step, the rollout job's a batch.

  metrics.jsonl is the record: `resume(step)` keeps its rows up to `step` and
  rebuilds the TensorBoard events and samples from what is kept, so after any
  kill and restart each step is there once. With `dialogues` (training), the
  job's dialogue records go to WORKDIR/dialogues.jsonl (`dialogues()`, each
  with its step) and resume drops those of later steps too; the rollout job
  keeps that file itself (pedrl.experiments.rollout.resume)."""

  def __init__(self, workdir: str, active: bool = True, dialogues: bool = False) -> None:
    self.workdir, self.active = workdir, active
    self.path = os.path.join(workdir, "metrics.jsonl")
    self.dialogues_path = os.path.join(workdir, "dialogues.jsonl") if dialogues else None
    self.tb = None

  def rows(self) -> list[dict]:
    """The rows of metrics.jsonl under today's names (a line cut by a crash removed)."""
    rows = files.read_rows(self.path, dialogue_lib.RecordError)
    for n, row in enumerate(rows, 1):
      if not isinstance(row, dict) or "step" not in row:
        raise dialogue_lib.RecordError(f"{self.path}, row {n}: not a metrics row (no 'step')")
    return [renamed(row) for row in rows]

  def resume(self, step: int) -> None:
    """Starts writing after `step`: later rows, events, samples (and dialogue records) are
    dropped."""
    if not self.active:
      return
    from tensorboardX import SummaryWriter
    every = self.rows()
    rows = [row for row in every if row["step"] <= step]
    if len(rows) < len(every):
      files.append_rows(rows, self.path, mode="w")
    if self.dialogues_path is not None:
      self._drop_dialogues_after(step)
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
        with open(path, encoding="utf-8") as f:
          self._text(s, f.read())
    self.tb.flush()

  def _drop_dialogues_after(self, step: int) -> None:
    """Cuts dialogues.jsonl before the first record of a step after `step` (or a line cut
    by a crash): those steps run again and append theirs. Records are appended in step
    order, so this reads line by line and truncates; a file of gigabytes is never held."""
    if not os.path.exists(self.dialogues_path):
      return
    keep = 0
    with open(self.dialogues_path, "rb") as f:
      for line in f:
        try:
          row_step = json.loads(line).get("step")
        except ValueError:
          break
        if not line.endswith(b"\n") or (row_step is not None and row_step > step):
          break
        keep += len(line)
    if keep < os.path.getsize(self.dialogues_path):
      with open(self.dialogues_path, "rb+") as f:
        f.truncate(keep)
        os.fsync(f.fileno())

  def _scalars(self, step: int, metrics: dict) -> None:
    for k, v in metrics.items():
      if isinstance(v, (int, float)) and k not in NOT_SCALARS:
        self.tb.add_scalar(k, v, step)

  def _text(self, step: int, text: str) -> None:
    self.tb.add_text("samples", text.replace("\n", "  \n"), step)

  def write(self, step: int, metrics: dict) -> None:
    if not self.active:
      return
    if self.tb is None:
      self.resume(step - 1)
    files.append_rows([metrics], self.path)  # Synced: a crash cuts at most this line.
    self._scalars(step, metrics)
    self.tb.flush()

  def samples(self, step: int, dialogues: Sequence[dialogue_lib.Dialogue],
              advantages: Sequence[float | None], reward_settings: assemble.RewardSettings) -> None:
    """The step's sample dialogues (pedrl.jobs.samples), each with its advantage and
    its reward's terms (`reward_settings`), as samples/step_NNNNNN.txt and TensorBoard text."""
    if not self.active:
      return
    text = samples_lib.step_text(step, dialogues, advantages, reward_settings)
    with open(os.path.join(self.workdir, "samples", f"step_{step:06d}.txt"), "w",
              encoding="utf-8") as f:
      f.write(text)
    self._text(step, text)

  def dialogues(self, dialogues: Sequence[dialogue_lib.Dialogue]) -> None:
    """Appends the records (each carries its step) to dialogues.jsonl, synced."""
    if not self.active:
      return
    if self.dialogues_path is None:
      raise ValueError("this MetricsWriter keeps no dialogues (dialogues=False)")
    dialogue_lib.save_jsonl(dialogues, self.dialogues_path)

  def close(self) -> None:
    if self.tb is not None:
      self.tb.close()
