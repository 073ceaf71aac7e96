"""The GRPO training loop: problems → rollouts → rewards → advantages → update.

Colocated: the tutor's live params feed the sampler directly every step (no
copy, no reload); the frozen reference and student sit beside it. Old-policy
log-probs are the training forward's before the step's updates, as the reference
trainer's (or, `rl.old_logprobs=sampler`, the sampler's own: the same function,
computed another way), so the first pass has ratio 1; the sampler's gap to the
trainer's is logged each step.

Data order is a function of (seed, step): step s takes positions s·B … s·B+B−1
of a sequence of seeded per-epoch permutations, and each problem's position is
its uid for sampling. A run resumed from a checkpoint at step s therefore sees
exactly the problems and draws of an uninterrupted run.
"""
import collections
import dataclasses
import time
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from pedrl.env import dialogue as dialogue_lib, rollout
from pedrl.env.party import Party, Replier
from pedrl.env.problems import Problem
from pedrl.rewards import assemble, pipeline
from pedrl.rl import advantages as adv_lib, batch as batch_lib, loop, update
# Re-exported: defined there, importable without JAX.
from pedrl.rl.settings import ADVANTAGES, TrainSettings


def problems_for_step(problems: Sequence[Problem], step: int, batch: int,
                      seed: int) -> list[tuple[int, Problem]]:
  """(positions, problems) of step `step`: seeded permutation per epoch."""
  return loop.items_for_step(problems, step, batch, seed)


def dialogue_advantages(dialogues: Sequence[dialogue_lib.Dialogue], group_size: int,
                        settings: TrainSettings, rewards: assemble.BatchRewards) -> list:
  """Per dialogue (G = group_size consecutive ones per problem), its per-token advantages.

  dialogue mode: the group advantage of the reward total on every tutor token.
  turn mode: the turn-level reward components (as registered in
  pedrl.rewards.assemble; UCO's) give each turn its advantage from the per-turn
  rewards, plus the group advantage of the dialogue-level rest when there is
  any: so template terms, r_sol or a hard −λ still count. Dialogues a judge
  policy dropped get none and stay out of their group's statistics; a problem
  with fewer than 2 scored rollouts gives no signal. `rewards`: the RewardSettings.
  """
  out = []
  g = group_size
  turn_mode = settings.advantage == "turn"
  for lo in range(0, len(dialogues), g):
    group = dialogues[lo:lo + g]
    kept = [d for d in group if not d.dropped]
    if len(kept) < 2:
      out += [np.zeros(len(d.tutor_ids), np.float32) for d in group]
      continue
    rest = [assemble.dialogue_part(d, rewards) if turn_mode else d.rewards.total for d in kept]
    whole = adv_lib.group_advantages(rest, len(kept), settings.advantage_eps,
                                     settings.advantage_ddof)
    per_turn = [assemble.weighted_turn_rewards(d, rewards) for d in kept] if turn_mode else None
    turns = (adv_lib.turn_advantages(per_turn, len(kept), rewards.gamma, settings.advantage_eps,
                                     settings.advantage_ddof) if turn_mode else None)
    k = 0
    for d in group:
      if d.dropped:
        out.append(np.zeros(len(d.tutor_ids), np.float32))
        continue
      a = adv_lib.token_advantages(d.tutor_mask, [], float(whole[k]))
      if turn_mode and per_turn[k]:  # A hard-rejected dialogue has no turn rewards.
        a = a + adv_lib.token_advantages(d.tutor_mask, d.tutor_turn_spans, turns[k])
      out.append(a)
      k += 1
  return out


@dataclasses.dataclass
class Collected:
  """One step's rollouts with their rewards, and where the time went."""
  uids: tuple[int, ...]
  dialogues: list[dialogue_lib.Dialogue]
  rewards: assemble.BatchRewards
  tutor_seconds: float
  tutor_compile_seconds: float  # Of tutor_seconds: getting programs, not running them.
  seconds: dict[str, float]  # Stage -> seconds.


@dataclasses.dataclass(frozen=True)
class LearningSignal:
  """What says whether a step taught anything (`signal_warnings` reads it)."""
  # Share of groups with no nonzero advantage on a trained token (`zero_spread_share`).
  zero_spread_groups: float
  kl: float  # Per-token KL to the reference, the step's last update.
  sampler_trainer_logp_diff: float  # Mean |sampler − trainer| log-prob at the step's start.


@dataclasses.dataclass(frozen=True)
class StepMetrics:
  """One GRPO step's numbers (`step_metrics`); `to_row` is its row of metrics.jsonl."""
  step: int
  problem_uids: tuple[int, ...]
  rewards: assemble.BatchRewards
  loss: float  # Mean over the step's updates.
  skipped_updates: int
  skipped_values: dict[str, float]  # What the last skipped update measured ({}: none).
  clip_fraction: float  # Mean over the updates.
  grad_norm: float  # Mean over the updates.
  first_pass_ratio: float
  signal: LearningSignal
  advantage_mean: float  # Over the trained tokens.
  advantage_std: float
  # −E[log π(a)] over the sampled tutor tokens (π at the sampling temperature; the full
  # distribution is never materialised). Tokens drawn from π itself make it an unbiased
  # estimate of π's entropy; drawn through top-k or top-p (paper 003's tutor: top-k 50),
  # from the filtered q, it is the cross-entropy of q against π, smaller than H(π) where
  # the filter cuts a long tail.
  entropy: float
  mean_tutor_tokens: float
  mean_turns: float
  dropped: int
  judges_accept_rate: float | None  # Mean r_ped of the judged dialogues (None: none).
  # The tutor's sampling rate, compilation left out (reported apart): a step that
  # compiles new shapes would otherwise read as a slow one.
  tokens_per_second: float
  seconds: dict[str, float]  # tutor_compile, rollout, rewards, update.
  lr: float | None  # Mean learning rate of the applied updates (None: not known).
  time: float  # Unix seconds: the row's wall clock, for rates across restarts.

  def to_row(self) -> dict:
    return {
        **self.rewards.to_row(),
        "step": self.step, "problem_uids": list(self.problem_uids), "loss": self.loss,
        "kl": self.signal.kl, "skipped_updates": self.skipped_updates,
        "clip_fraction": self.clip_fraction, "grad_norm": self.grad_norm,
        "first_pass_ratio": self.first_pass_ratio,
        "sampler_trainer_logp_diff": self.signal.sampler_trainer_logp_diff,
        "advantage/mean": self.advantage_mean, "advantage/std": self.advantage_std,
        "entropy": self.entropy, "mean_tutor_tokens": self.mean_tutor_tokens,
        "mean_turns": self.mean_turns, "dropped": self.dropped,
        "signal/zero_spread_groups": self.signal.zero_spread_groups,
        **({"judges/accept_rate": self.judges_accept_rate}
           if self.judges_accept_rate is not None else {}),
        "tokens_per_second": self.tokens_per_second,
        **{f"seconds/{k}": v for k, v in self.seconds.items()},
        **({"lr": self.lr} if self.lr is not None else {}),
        "time": self.time,
    }


@dataclasses.dataclass
class StepResult:
  """One step's metrics, its dialogues (in batch order) and per dialogue its mean
  advantage over the tokens trained on (None: none were, e.g. a dropped dialogue)."""
  metrics: StepMetrics
  dialogues: list[dialogue_lib.Dialogue]
  advantages: list[float | None]


def mean_advantages(batch: batch_lib.TrainBatch) -> list:
  """Per row of the batch, the mean advantage of its trained tokens (None if it has none)."""
  return [float(a[m].mean()) if m.any() else None
          for a, m in zip(batch.advantages, batch.loss_mask)]


def zero_spread_share(batch: batch_lib.TrainBatch, group_size: int) -> float:
  """Share of the batch's groups (problems) in which no trained token has a nonzero
  advantage: equal rewards, or fewer than 2 kept rollouts. Only the KL term acts on them."""
  signal = ((batch.advantages != 0) & batch.loss_mask).any(axis=1)
  return float(np.mean(~signal.reshape(-1, group_size).any(axis=1)))


def signal_warnings(signal: LearningSignal, settings: TrainSettings) -> dict[str, str]:
  """What a step's learning signal says is wrong with it, by kind, each naming the
  number and the config field that bounds it; empty when all is in range."""
  out = {}
  share, kl, gap = signal.zero_spread_groups, signal.kl, signal.sampler_trainer_logp_diff
  if share > settings.warn_zero_spread:
    out["zero_spread"] = (f"{share:.0%} of groups have no reward spread (rl.warn_zero_spread="
                          f"{settings.warn_zero_spread:g}): only the KL term moves them")
  if kl > settings.warn_kl:
    out["kl"] = (f"KL to the reference {kl:.4g} per token > rl.warn_kl={settings.warn_kl:g}: "
                 "lr too high, reward hacking?")
  if gap > settings.warn_logp_diff:
    out["logp_diff"] = (f"sampler_trainer_logp_diff {gap:.3g} > rl.warn_logp_diff="
                        f"{settings.warn_logp_diff:g}: the sampler and trainer disagree")
  return out


class SignalWarnings:
  """Logs a kind of `signal_warnings` on the step it starts, not on the steps it lasts
  (metrics.jsonl has the numbers of every step); `summary` counts the steps of each."""

  def __init__(self, settings: TrainSettings) -> None:
    self.settings, self.last, self.steps = settings, set(), collections.Counter()

  def __call__(self, step: int, signal: LearningSignal) -> dict[str, str]:
    found = signal_warnings(signal, self.settings)
    for kind, message in found.items():
      if kind not in self.last:
        logging.warning("step %d: %s (not repeated while it lasts)", step, message)
    self.last = set(found)
    self.steps.update(found.keys())
    return found

  def summary(self, steps: int) -> str | None:
    """One line for the run, when some kind lasted more than its first step."""
    if not any(n > 1 for n in self.steps.values()):
      return None
    return "learning-signal warnings: " + ", ".join(
        f"{kind} on {n} of {steps} steps" for kind, n in sorted(self.steps.items()))


def sample_rows(rows: int, group_size: int, n: int) -> list[int]:
  """Batch rows of `n` sample dialogues, each of another problem, spread evenly over the
  batch (a problem's rollouts are contiguous); the k-th shows rollout k mod G."""
  groups = rows // group_size
  picked = np.unique(np.linspace(0, groups - 1, min(n, groups)).round().astype(int))
  return [int(g) * group_size + k % group_size for k, g in enumerate(picked)]


def step_metrics(step: int, collected: Collected, batch: batch_lib.TrainBatch,
                 updates: list[update.UpdateMetrics], update_seconds: float, group_size: int,
                 lr: float | None = None, sampler_gap: float | None = None) -> StepMetrics:
  """The metrics of one step; `lr`: the mean learning rate of its applied updates (None:
  not known, not written); `sampler_gap`: the sampler's distance from the training
  forward's log-probs when the batch holds the latter (None: the batch holds the
  sampler's, and the first update measures it)."""
  dialogues = collected.dialogues
  grpo = [m.objective for m in updates]  # GRPOMetrics.
  mask = batch.loss_mask
  tutor_tokens = [sum(m.num_tokens for m in d.messages if m.role == dialogue_lib.TUTOR)
                  for d in dialogues]
  judged = [d.judgement.r_ped for d in dialogues
            if d.judgement is not None and d.judgement.r_ped is not None]
  skips, values = loop.skipped(updates)
  return StepMetrics(
      step=step, problem_uids=tuple(map(int, collected.uids)), rewards=collected.rewards,
      loss=float(np.mean([m.loss for m in grpo])), skipped_updates=skips,
      skipped_values=values, clip_fraction=float(np.mean([m.clip_fraction for m in grpo])),
      grad_norm=float(np.mean([m.grad_norm for m in updates])),
      first_pass_ratio=float(grpo[0].ratio),
      signal=LearningSignal(zero_spread_share(batch, group_size), float(grpo[-1].kl),
                            float(grpo[0].sampler_logp_diff) if sampler_gap is None
                            else sampler_gap),
      advantage_mean=float(np.mean(batch.advantages[mask])),
      advantage_std=float(np.std(batch.advantages[mask])),
      entropy=float(-np.mean(batch.old_logp[mask])),
      mean_tutor_tokens=float(np.mean(tutor_tokens)),
      mean_turns=float(np.mean([d.turns for d in dialogues])),
      dropped=sum(d.dropped for d in dialogues),
      judges_accept_rate=float(np.mean(judged)) if judged else None,
      tokens_per_second=float(sum(tutor_tokens) / max(
          collected.tutor_seconds - collected.tutor_compile_seconds, 1e-9)),
      seconds={"tutor_compile": collected.tutor_compile_seconds, **collected.seconds,
               "update": update_seconds},
      lr=lr, time=time.time())


class Trainer(loop.Loop):
  """GRPO's run: each step collects rollouts with the current params, then updates
  (pedrl.rl.loop.Loop: checkpoints, resume, non-finite guard, signals).

  The current params are the tutor party's (`self.tutor.params`): the sampler
  reads them, the update replaces them (its input buffers are donated). A step takes
  `batch_problems` problems × `group_size` rollouts; `seed` draws the problems, the
  dialogues and the mini-batch order. The update's log-probs are of logits over the
  tutor's sampling temperature, as the sampler's (GRPOObjective)."""

  def __init__(self, settings: TrainSettings, grpo: update.GRPOSettings, tutor: Party,
               student: Party | Replier, rollout_settings: rollout.RolloutSettings,
               rewards: pipeline.RewardPipeline, problems, optimizer, workdir: str,
               checkpoints, writer, model_fingerprint: dict, lr_schedule=None, *,
               seed: int, batch_problems: int, group_size: int,
               schedule_decays: bool = False) -> None:
    objective = update.GRPOObjective(grpo, tutor.sampling.logprob_temperature)
    super().__init__(settings, objective, tutor, optimizer, checkpoints, writer,
                     model_fingerprint, lr_schedule, seed=seed)
    self.batch_problems, self.group_size = batch_problems, group_size
    # A cosine or linear learning rate decays to 0 at the run's last step: its length then
    # fixes the schedule, and a resume with more steps would jump up along it.
    self.schedule_decays = schedule_decays
    self.student = student
    self.rollout_settings, self.rewards, self.problems = rollout_settings, rewards, problems
    self.workdir = workdir
    # The frozen reference is a copy: the update donates (reuses) the trained params' buffers.
    self.ref_params = jax.tree.map(jnp.copy, tutor.params)
    self.signal_warnings = SignalWarnings(settings)

  def data_meta(self) -> dict:
    meta = {"seed": self.seed, "batch_problems": self.batch_problems,
            "group_size": self.group_size}
    return dict(meta, steps=self.steps) if self.schedule_decays else meta

  def collect(self) -> Collected:
    """This step's problems → rollouts with the current params → rewards."""
    t0 = time.perf_counter()
    chosen = problems_for_step(self.problems, self.step, self.batch_problems, self.seed)
    uids, problems = zip(*chosen)
    stats = rollout.RolloutStats()
    dialogues = rollout.run(problems, self.group_size, self.tutor, self.student,
                            self.rollout_settings, seed=self.seed, problem_uids=uids,
                            stats=stats)
    for d in dialogues:
      d.step = self.step + 1  # The step they train.
    t1 = time.perf_counter()
    rewards = self.rewards(dialogues)
    return Collected(uids, dialogues, rewards, stats.tutor_seconds, stats.tutor_compile_seconds,
                     {"rollout": t1 - t0, "rewards": time.perf_counter() - t1})

  def batch(self, dialogues: Sequence[dialogue_lib.Dialogue]) -> batch_lib.TrainBatch:
    """The training batch: advantages, and the frozen reference's log-probs."""
    model, mesh, grpo = self.tutor.sampler.model, self.tutor.sampler.mesh, self.objective
    advantages = dialogue_advantages(dialogues, self.group_size, self.settings,
                                     self.rewards.settings)
    logprobs = lambda params: lambda tokens, attn: update.logprobs_in_chunks(
        model, params, tokens, attn, grpo.temperature, grpo.micro_batch, mesh)
    # The policy's own log-probs before this step's updates (the reference trainer's old
    # ones), read before the update donates the params' buffers; or the sampler's.
    old = logprobs(self.tutor.params) if grpo.settings.old_logprobs == "trainer" else None
    return batch_lib.build(dialogues, advantages, logprobs(self.ref_params), old)

  def update(self, batch: batch_lib.TrainBatch) -> list[update.UpdateMetrics]:
    """μ passes over the batch in mini-batches (seeded order); the metrics of each update."""
    return super().update(batch, self.settings.passes, self.settings.mini_batch)

  def train_step(self) -> StepResult:
    """One step: collect → batch (advantages, reference) → update → metrics."""
    collected = self.collect()
    t0 = time.perf_counter()
    batch = self.batch(collected.dialogues)
    gap = (batch_lib.sampler_gap(collected.dialogues, batch)
           if self.objective.settings.old_logprobs == "trainer" else None)
    updates = self.update(batch)
    self.step += 1
    metrics = step_metrics(self.step, collected, batch, updates, time.perf_counter() - t0,
                           self.group_size, self.step_lr(updates), gap)
    return StepResult(metrics, collected.dialogues, mean_advantages(batch))

  def record(self, out: StepResult) -> None:
    """The step's metrics row, signal warnings, sample dialogues and dialogue records."""
    self.writer.write(self.step, out.metrics.to_row())
    self.signal_warnings(self.step, out.metrics.signal)
    if self.step % self.settings.samples_every == 0 or self.step == 1:
      rows = sample_rows(len(out.dialogues), self.group_size, self.settings.samples_dialogues)
      self.writer.samples(self.step, [out.dialogues[i] for i in rows],
                          [out.advantages[i] for i in rows], self.rewards.settings)
    every = self.settings.dialogues_every
    if every and (self.step % every == 0 or self.step == 1):
      self.writer.dialogues(out.dialogues)

  def run(self, progress: Callable[[int, StepMetrics], None] | None = None) -> int:
    """Loop.run, then one line for the learning-signal warnings that lasted."""
    first = self.step
    super().run(progress)
    summary = self.signal_warnings.summary(self.step - first)
    if summary:
      logging.warning("%s", summary)
    return self.step
