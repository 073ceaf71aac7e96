"""The GRPO training loop: problems → rollouts → rewards → advantages → update.

Colocated: the tutor's live params feed the sampler directly every step (no
copy, no reload); the frozen reference and student sit beside it. Old-policy
log-probs are the sampler's own (the same log-prob function as the trainer's),
so the first pass has ratio 1; their gap to the trainer's is logged each step.

Data order is a function of (seed, step): step s takes positions s·B … s·B+B−1
of a sequence of seeded per-epoch permutations, and each problem's position is
its uid for sampling. A run resumed from a checkpoint at step s therefore sees
exactly the problems and draws of an uninterrupted run.
"""
import dataclasses
import functools
import glob
import json
import os
import shutil
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from pedrl import distributed, stopping
from pedrl.engine.sampling import bucket
from pedrl.env import dialogue as dialogue_lib, rollout
from pedrl.rl import advantages as adv_lib, checkpoint as checkpoint_lib, update


@dataclasses.dataclass(frozen=True)
class TrainSettings:
  steps: int = 100
  batch_problems: int = 16  # B.
  group_size: int = 8  # G.
  passes: int = 2  # μ optimizer passes over each generated batch (paper 003).
  mini_batch: int = 0  # Rows per optimizer step; 0: the whole batch.
  advantage: str = "dialogue"  # "dialogue" (003, 001) or "turn" (UCO).
  advantage_eps: float = 1e-4
  advantage_ddof: int = 1
  gamma: float = 0.95
  save_every: int = 10
  keep: int = 3
  samples_every: int = 10  # Steps between sample dialogues written as text.
  seed: int = 0
  max_bad_steps: int = 3  # Steps in a row with a skipped (non-finite) update before stopping.

  def __post_init__(self):
    if self.group_size < 2:
      raise ValueError(f"GRPO needs group_size >= 2, got {self.group_size}")
    if self.advantage not in ("dialogue", "turn"):
      raise ValueError(f"advantage {self.advantage!r} is not dialogue or turn")
    if self.steps < 1 or self.batch_problems < 1 or self.passes < 1:
      raise ValueError("steps, batch_problems and passes must be positive")


class TrainingDiverged(RuntimeError):
  """Updates were non-finite `max_bad_steps` steps in a row; the weights were left as they were."""


@functools.lru_cache(maxsize=4)
def _epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
  return np.random.default_rng([seed, epoch]).permutation(n)


def problems_for_step(problems, step: int, batch: int, seed: int):
  """(positions, problems) of step `step`: seeded permutation per epoch."""
  n = len(problems)
  out = []
  for pos in range(step * batch, (step + 1) * batch):
    epoch, i = divmod(pos, n)
    out.append((pos, problems[int(_epoch_order(n, seed, epoch)[i])]))
  return out


def build_batch(dialogues, token_advantages) -> dict:
  """Right-padded [N, T] arrays of the tutor sequences (T bucketed: few compiles)."""
  width = bucket(max(len(d.tutor_ids) for d in dialogues))
  n = len(dialogues)
  batch = {"tokens": np.zeros((n, width), np.int32), "attn_mask": np.zeros((n, width), bool),
           "loss_mask": np.zeros((n, width), bool), "advantages": np.zeros((n, width), np.float32),
           "old_logp": np.zeros((n, width), np.float32)}
  for i, (d, a) in enumerate(zip(dialogues, token_advantages)):
    k = len(d.tutor_ids)
    batch["tokens"][i, :k] = d.tutor_ids
    batch["attn_mask"][i, :k] = True
    batch["loss_mask"][i, :k] = d.tutor_mask
    batch["advantages"][i, :k] = a
    batch["old_logp"][i, :k] = d.tutor_logprobs
  return batch


def dialogue_advantages(dialogues, settings: TrainSettings, uco_weight: float = 0.0) -> list:
  """Per dialogue, its per-token advantages.

  dialogue mode: the group advantage of rewards["total"] on every tutor token.
  turn mode (UCO): each turn's advantage from the per-turn rewards (weighted by
  the uco component's weight), plus the group advantage of the other
  components (total − weight·uco) when there are any: so template terms, r_sol
  or a hard −λ still count. Dialogues a judge policy dropped get none and stay
  out of their group's statistics; a problem with fewer than 2 scored rollouts
  gives no signal.
  """
  out = []
  g = settings.group_size
  turn_mode = settings.advantage == "turn"
  for lo in range(0, len(dialogues), g):
    group = dialogues[lo:lo + g]
    kept = [d for d in group if d.rewards]
    if len(kept) < 2:
      out += [np.zeros(len(d.tutor_ids), np.float32) for d in group]
      continue
    rest = [d.rewards["total"] - (uco_weight * d.rewards.get("uco", 0.0) if turn_mode else 0.0)
            for d in kept]
    whole = adv_lib.group_advantages(rest, len(kept), settings.advantage_eps,
                                     settings.advantage_ddof)
    turns = (adv_lib.turn_advantages(
        [[uco_weight * t["reward"] for t in d.turn_rewards] for d in kept], len(kept),
        settings.gamma, settings.advantage_eps, settings.advantage_ddof) if turn_mode else None)
    k = 0
    for d in group:
      if not d.rewards:
        out.append(np.zeros(len(d.tutor_ids), np.float32))
        continue
      a = adv_lib.token_advantages(d.tutor_mask, [], float(whole[k]))
      if turn_mode and d.turn_rewards:  # A hard-rejected dialogue has no turn rewards.
        a = a + adv_lib.token_advantages(d.tutor_mask, d.tutor_turn_spans, turns[k])
      out.append(a)
      k += 1
  return out


class Trainer:
  """Holds the run's parts; `run()` trains to settings.steps, checkpointing and logging."""

  def __init__(self, settings: TrainSettings, grpo: update.GRPOSettings, tutor, student,
               rollout_settings, rewards, problems, optimizer, workdir: str, checkpoints,
               writer, model_fingerprint: dict):
    self.s, self.grpo, self.tutor, self.student = settings, grpo, tutor, student
    self.rollout_settings, self.rewards, self.problems = rollout_settings, rewards, problems
    self.optimizer, self.workdir, self.ckpt, self.writer = optimizer, workdir, checkpoints, writer
    self.fingerprint = model_fingerprint
    # The frozen reference is a copy: the update donates (reuses) the trained params' buffers.
    self.ref_params = jax.tree.map(jnp.copy, tutor.params)
    self.params, self.step = tutor.params, 0
    self.opt_state = update.init_optimizer(optimizer, tutor.params)
    self.stopped_by = None  # Set when run() returned early on a signal.

  def restore_if_any(self):
    """Restores the newest usable checkpoint (if any); metric rows of later steps are
    dropped either way, since those steps run again."""
    restored = self.ckpt.restore({"params": self.params, "opt_state": self.opt_state},
                                 self.fingerprint)
    if restored is not None:
      step, state, meta = restored
      for key, value in (("seed", self.s.seed), ("batch_problems", self.s.batch_problems),
                         ("group_size", self.s.group_size)):
        if meta.get(key) != value:
          raise checkpoint_lib.CheckpointError(
              f"{self.ckpt.directory}: the run was started with {key}={meta.get(key)}, this "
              f"config has {value}; resuming would change its data order. Use a new workdir.")
      self.params, self.opt_state, self.step = state["params"], state["opt_state"], int(step)
      self.tutor = dataclasses.replace(self.tutor, params=self.params)  # Frees the loaded weights.
    self.writer.resume(self.step)
    return restored is not None

  def save(self):
    self.ckpt.save(self.step, {"params": self.params, "opt_state": self.opt_state},
                   {"step": self.step, "data_position": self.step * self.s.batch_problems,
                    "seed": self.s.seed, "batch_problems": self.s.batch_problems,
                    "group_size": self.s.group_size, "model": self.fingerprint})

  def train_step(self) -> dict:
    t0 = time.perf_counter()
    chosen = problems_for_step(self.problems, self.step, self.s.batch_problems, self.s.seed)
    uids, batch_problems = zip(*chosen)
    tutor = dataclasses.replace(self.tutor, params=self.params)
    stats = rollout.RolloutStats()
    dialogues = rollout.run(batch_problems, self.s.group_size, tutor, self.student,
                            self.rollout_settings, problem_uids=uids, stats=stats)
    t1 = time.perf_counter()
    reward_stats = self.rewards(dialogues)
    t2 = time.perf_counter()
    uco_weight = dict(self.rewards.settings.components).get("uco", 0.0)
    token_adv = dialogue_advantages(dialogues, self.s, uco_weight)
    batch = build_batch(dialogues, token_adv)
    for i, d in enumerate(dialogues):
      if not d.rewards:  # Dropped by a judge policy: out of the loss and its token count.
        batch["loss_mask"][i] = False
    model, mesh = self.tutor.sampler.model, self.tutor.sampler.mesh
    batch["ref_logp"] = update.logprobs_in_chunks(
        model, self.ref_params, batch["tokens"], batch["attn_mask"], self.grpo.temperature,
        self.grpo.micro_batch, mesh)
    rows = len(dialogues)
    mini = self.s.mini_batch or rows
    order = np.random.default_rng([self.s.seed, self.step]).permutation(rows)
    updates = []
    for _ in range(self.s.passes):
      for lo in range(0, rows, mini):
        idx = np.sort(order[lo:lo + mini])
        part = {k: v[idx] for k, v in batch.items()}
        self.params, self.opt_state, m = update.train_step(
            model, self.params, self.opt_state, self.optimizer, part, self.grpo, mesh)
        updates.append(m)
    t3 = time.perf_counter()
    self.step += 1
    if not all(bool(m["params_finite"]) for m in updates):
      raise TrainingDiverged(
          f"step {self.step}: an update made some weights non-finite although its loss and "
          "gradients were finite (check rl.lr and rl.adam_eps); nothing of it was saved")
    first = updates[0]
    tutor_tokens = [sum(m.num_tokens for m in d.messages if m.role == dialogue_lib.TUTOR)
                    for d in dialogues]
    metrics = {f"reward/{k}": v[0] for k, v in reward_stats.items()}
    metrics.update({f"reward_std/{k}": v[1] for k, v in reward_stats.items()})
    metrics.update({
        "step": self.step, "problem_uids": list(map(int, uids)),
        "loss": float(np.mean([m["loss"] for m in updates])),
        "kl": float(updates[-1]["kl"]),
        "skipped_updates": sum(bool(m["skipped"]) for m in updates),
        "clip_fraction": float(np.mean([m["clip_fraction"] for m in updates])),
        "grad_norm": float(np.mean([m["grad_norm"] for m in updates])),
        "first_pass_ratio": float(first["ratio"]),
        "sampler_trainer_logp_diff": float(first["sampler_logp_diff"]),
        "advantage/mean": float(np.mean(batch["advantages"][batch["loss_mask"]])),
        "advantage/std": float(np.std(batch["advantages"][batch["loss_mask"]])),
        # −E[log π(a)] over sampled tutor tokens: an unbiased estimate of the policy's
        # entropy at the sampling temperature (the full distribution is never materialised).
        "entropy": float(-np.mean(batch["old_logp"][batch["loss_mask"]])),
        "tutor_tokens/mean": float(np.mean(tutor_tokens)),
        "turns/mean": float(np.mean([d.turns for d in dialogues])),
        "dropped": sum(bool(d.judgement.get("dropped")) for d in dialogues),
        **({"judges/accept_rate": float(np.mean(judged))} if (judged := [
            d.judgement["r_ped"] for d in dialogues
            if d.judgement.get("r_ped") is not None]) else {}),
        "tokens_per_second": float(sum(tutor_tokens) / max(stats.tutor_seconds, 1e-9)),
        "seconds/rollout": t1 - t0, "seconds/rewards": t2 - t1, "seconds/update": t3 - t2,
    })
    for k, v in self.rewards.batch_stats.items():  # This step's counts, not running totals.
      metrics[f"pipeline/{k}"] = v
    return metrics, dialogues

  def run(self, progress=None):
    """Trains to settings.steps. On SIGINT or SIGTERM it finishes the step, saves and
    returns early (`stopped_by` names the signal). Raises TrainingDiverged after
    max_bad_steps steps in a row with skipped updates (their weights unchanged; the
    last checkpoint is the last good state)."""
    bad = 0
    with stopping.StopRequest("the current step") as signals:
      while self.step < self.s.steps:
        metrics, dialogues = self.train_step()
        self.writer.write(self.step, metrics)
        if self.step % self.s.samples_every == 0 or self.step == 1:
          self.writer.samples(self.step, dialogues[:2])
        bad = bad + 1 if metrics["skipped_updates"] else 0
        if bad:
          logging.warning("step %d: %d updates skipped, non-finite loss=%s kl=%s grad_norm=%s "
                          "(%d of rl.max_bad_steps=%d in a row)", self.step,
                          metrics["skipped_updates"], metrics["loss"], metrics["kl"],
                          metrics["grad_norm"], bad, self.s.max_bad_steps)
        if bad >= self.s.max_bad_steps:
          raise TrainingDiverged(
              f"training diverged: steps {self.step - bad + 1}-{self.step} all had non-finite "
              f"loss, KL or gradients (last: loss={metrics['loss']}, kl={metrics['kl']}, "
              f"grad_norm={metrics['grad_norm']}); their updates were skipped. The last "
              f"checkpoint is step {self.ckpt.latest_step()}. Lower rl.lr or check the rewards.")
        # Hosts may get a signal on either side of a step: they stop at the same one.
        stop = distributed.any_process(signals.requested is not None)
        # No periodic save inside a run of skipped updates: with `keep`, such checkpoints
        # could push out the last one before the trouble began.
        if (self.step % self.s.save_every == 0 and not bad) or self.step == self.s.steps or stop:
          self.save()
        if progress is not None:
          progress(self.step, metrics)
        if stop:
          self.stopped_by = signals.requested or "SIGTERM"  # Another host's signal.
          break
    return self.step


class MetricsWriter:
  """Per-step metrics to WORKDIR/metrics.jsonl and TensorBoard; sample dialogues as text.
  Inactive (writes nothing) on all but the main process of a multi-host run.

  metrics.jsonl is the record: `resume(step)` keeps its rows up to `step` and
  rebuilds the TensorBoard events and samples from what is kept, so after any
  kill and restart each step is there once."""

  def __init__(self, workdir: str, active: bool = True):
    self.workdir, self.active = workdir, active
    self.path = os.path.join(workdir, "metrics.jsonl")
    self.tb = None

  def _rows(self, step: int) -> list[str]:
    """The lines of metrics.jsonl for steps ≤ `step` (a line cut by a crash removed)."""
    if not os.path.exists(self.path):
      return []
    cut = dialogue_lib.repair_jsonl(self.path)
    if cut:
      logging.warning("%s: removed a partly written last line (%d bytes)", self.path, cut)
    rows = []
    with open(self.path) as f:
      for n, line in enumerate(f, 1):
        if not line.strip():
          continue
        try:
          row = json.loads(line)
        except json.JSONDecodeError as e:
          raise ValueError(f"{self.path}, line {n}: not JSON ({e})") from None
        if not isinstance(row, dict) or "step" not in row:
          raise ValueError(f"{self.path}, line {n}: not a training metrics row (no 'step')")
        if row["step"] <= step:
          rows.append(line)
    return rows

  def resume(self, step: int):
    """Starts writing after `step`: later rows, events and samples are dropped."""
    if not self.active:
      return
    from tensorboardX import SummaryWriter
    rows = self._rows(step)
    with open(self.path, "w") as f:
      f.writelines(rows)
    samples = os.path.join(self.workdir, "samples")
    os.makedirs(samples, exist_ok=True)
    tb_dir = os.path.join(self.workdir, "tensorboard")
    shutil.rmtree(tb_dir, ignore_errors=True)
    self.tb = SummaryWriter(tb_dir)
    for line in rows:
      row = json.loads(line)
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
    with open(self.path, "a") as f:  # Synced: a crash can cut at most this line.
      f.write(json.dumps(metrics) + "\n")
      f.flush()
      os.fsync(f.fileno())
    self._scalars(step, metrics)
    self.tb.flush()

  def samples(self, step: int, dialogues):
    if not self.active:
      return
    text = "\n\n".join(
        f"# problem {d.problem_id} ({d.scenario}), reward {d.rewards.get('total')}\n"
        f"{d.problem}\n\n{dialogue_lib.transcript(d.messages)}" for d in dialogues)
    with open(os.path.join(self.workdir, "samples", f"step_{step:06d}.txt"), "w") as f:
      f.write(text)
    self._text(step, text)

  def close(self):
    if self.tb is not None:
      self.tb.close()
