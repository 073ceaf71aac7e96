"""The training loops' settings types: checkpoints and the non-finite guard, GRPO's `rl`
section, the optimizer, and the offline objectives' fields.

Importable without JAX: config files and pedrl.jobs.settings build on them, so a config is
read and its mistakes reported before a job loads anything heavy. Each type stays
importable from the module that uses it (pedrl.rl.loop, pedrl.rl.trainer, pedrl.rl.update).
"""
import dataclasses
import typing

from pedrl import fields

if typing.TYPE_CHECKING:  # optax: loaded when a job builds its optimizer.
  import optax


@dataclasses.dataclass(frozen=True)
class LoopSettings:
  """What every training loop's config says of checkpoints, the non-finite guard and the
  trained weights: the fields GRPO's `rl` section (pedrl.rl.trainer.TrainSettings) and
  an offline run's `train` section (pedrl.jobs.settings.OfflineSettings) share."""
  save_every: int = 10  # Steps between checkpoints (a GRPO step is a whole rollout batch).
  keep: int = 3  # Checkpoints kept.
  max_bad_steps: int = 3  # Steps in a row with a skipped (non-finite) update before stopping.
  remat: bool = False  # Recompute the tutor's layer activations in the backward pass.
  param_dtype: str = "float32"  # The trained tutor's weights (bfloat16 loses small updates).
  # Positions per pass of the tutor's float32 vocabulary head in the update and the
  # scoring passes (ModelConfig.logits_chunk): [rows, 1024, V] logits rather than
  # [rows, T, V], 13 GB less per row at 8192 tokens and Qwen2.5's vocabulary; 0: whole.
  # With bfloat16 weights the head's gradient is summed over the chunks in bfloat16.
  logits_chunk: int = 1024

  def __post_init__(self):
    fields.counts(self, ("save_every", "keep", "max_bad_steps"))
    fields.counts(self, ["logits_chunk"], least=0)

  def tutor_runtime(self) -> dict:
    """The trained tutor's ModelConfig runtime fields these settings choose."""
    return dict(remat=self.remat, dtype=self.param_dtype, logits_chunk=self.logits_chunk)


ADVANTAGES = ("dialogue", "turn")
# How the loss averages over tokens (pedrl.rl.loss.aggregate).
AGGREGATIONS = ("token_mean", "sequence_mean")


@dataclasses.dataclass(frozen=True)
class TrainSettings(LoopSettings):
  """The training loop (the config's `rl` section, with GRPOSettings and OptimizerSettings;
  checkpoints and the non-finite guard are LoopSettings'). Defaults are paper 003's
  (appendix A and its reference code). The batch shape (B problems × G rollouts) and the
  seed are the config's top level, every dialogue job's (pedrl.jobs.settings.JobSettings)."""
  steps: int = 150  # About 300 policy updates per run = 150 batches × μ 2 (paper 003 A.1).
  passes: int = 2  # μ optimizer passes over each generated batch (paper 003).
  mini_batch: int = 0  # Rows per optimizer step; 0: the whole batch.
  advantage: str = "dialogue"  # "dialogue" (003, 001) or "turn" (UCO): see dialogue_advantages.
  advantage_eps: float = 1e-4
  advantage_ddof: int = 1  # Unbiased group std, as TRL (paper 003's reference code).
  samples_every: int = 10  # Steps between sample dialogues written as text (and step 1).
  samples_dialogues: int = 4  # Sample dialogues per step: each of another problem.
  # Steps between appends of the step's dialogues (typed records with their step) to
  # WORKDIR/dialogues.jsonl, and step 1; 0: never. A record keeps its token ids and
  # log-probs, about 18 bytes a tutor token: up to 20 MB a step at paper 003's 128
  # dialogues of at most 8192 tokens, so every 10th step keeps a 150-step run's file
  # under a third of a GB (4× that at paper 001's 32768-token thinking dialogues).
  dialogues_every: int = 10
  # Signal warnings: logged on each step out of range (the metrics are always written).
  # Above this share of groups whose rewards do not differ (every advantage 0), most of the
  # batch teaches nothing and only the KL term moves the policy.
  warn_zero_spread: float = 0.5
  # Per-token KL to the reference (k3, nats): 0 at the start, a few thousandths after the
  # tiny runs' 3 steps. A whole nat a token is a policy far from where it started (a too
  # high lr, reward hacking, collapse), whatever β pulls back.
  warn_kl: float = 1.0
  # Mean |sampler − trainer| log-prob of a tutor token. Both run the same function on the
  # same params, so the gap is rounding (≈1e-6 in the float32 tiny runs on CPU, more where
  # matmuls or kernels round lower); at 1e-2, 5% of the clip range ε 0.2, the sampled
  # distribution is not the trained one (stale params, another mask or temperature).
  warn_logp_diff: float = 1e-2

  def __post_init__(self):
    super().__post_init__()
    fields.one_of(self, "advantage", ADVANTAGES)
    fields.counts(self, ("steps", "passes", "samples_every", "samples_dialogues"))
    fields.counts(self, ("mini_batch", "dialogues_every", "advantage_ddof"), least=0)
    fields.non_negative(self, ["advantage_eps"])
    fields.need(0.0 <= self.warn_zero_spread <= 1.0, self, "warn_zero_spread",
                "a share in [0, 1]")
    for name in ("warn_kl", "warn_logp_diff"):  # NaN fails too.
      fields.need(getattr(self, name) > 0, self, name, "> 0 (inf: never warn)")


OLD_LOGPROBS = ("trainer", "sampler")


@dataclasses.dataclass(frozen=True)
class GRPOSettings:
  """GRPO's settings (the config's `rl` section, with TrainSettings and OptimizerSettings)."""
  beta: float = 0.001  # KL coefficient (paper 003 reference; UCO uses 0.01).
  eps_low: float = 0.2  # Clip range.
  eps_high: float | None = None  # None: symmetric.
  aggregation: str = "token_mean"  # or "sequence_mean".
  micro_batch: int = 8  # Rows per gradient computation.
  # The ratio's old policy log-probs (one of OLD_LOGPROBS). "trainer": the training
  # forward's, computed before the step's first update, as paper 003's reference trainer
  # does with μ > 1 (TRL's GRPO recomputes old_per_token_logps with the model), so the
  # first pass's ratio is 1 up to rounding. "sampler": the log-probs the sampler reported
  # with each token, one forward pass less per step; where the decode over a cache and the
  # full-sequence forward round differently (lower precision, other kernels), ε clips
  # that gap as if the policy had moved.
  old_logprobs: str = "trainer"

  def __post_init__(self):
    fields.one_of(self, "old_logprobs", OLD_LOGPROBS)
    fields.non_negative(self, ["beta"])
    fields.need(fields.finite(self.eps_low) and 0 < self.eps_low < 1, self, "eps_low",
                "in (0, 1)")
    fields.need(self.eps_high is None or (fields.finite(self.eps_high) and self.eps_high > 0),
                self, "eps_high", "None or a finite number > 0")
    fields.one_of(self, "aggregation", AGGREGATIONS)
    fields.counts(self, ["micro_batch"])


SCHEDULES = ("constant", "cosine", "linear")


@dataclasses.dataclass(frozen=True)
class OptimizerSettings:
  """AdamW with clipping and a schedule; defaults are paper 003's (A.2)."""
  lr: float = 5e-7  # Constant in paper 003.
  lr_schedule: str = "constant"  # One of SCHEDULES (decay to 0 over the run's updates).
  warmup_steps: int = 0  # Optimizer updates of linear warmup.
  weight_decay: float = 0.0
  adam_eps: float = 1e-8
  max_grad_norm: float = 1.0

  def __post_init__(self):
    fields.positive(self, ("lr", "adam_eps", "max_grad_norm"))
    fields.non_negative(self, ["weight_decay"])
    fields.one_of(self, "lr_schedule", SCHEDULES)
    fields.counts(self, ["warmup_steps"], least=0)

  def schedule(self, total_updates: int) -> "optax.Schedule":
    """The learning rate after n applied updates (an optax schedule)."""
    from pedrl.rl import update  # optax and JAX: loaded when a job builds its optimizer.
    return update.lr_schedule(self.lr, self.lr_schedule, total_updates, self.warmup_steps)

  def optimizer(self, total_updates: int) -> "optax.GradientTransformation":
    from pedrl.rl import update
    return update.make_optimizer(self.schedule(total_updates), self.weight_decay,
                                 self.max_grad_norm, eps=self.adam_eps)


@dataclasses.dataclass(frozen=True)
class SFTSettings:
  """The SFT objective's fields (pedrl.rl.sft.SFTObjective; the offline config's `train`)."""
  micro_batch: int = 4  # Rows per gradient computation.

  def __post_init__(self):
    fields.counts(self, ["micro_batch"])


@dataclasses.dataclass(frozen=True)
class DPOSettings:
  """The MDPO objective's fields (pedrl.rl.dpo.DPOObjective; the offline config's `train`)."""
  beta: float = 0.1  # KL coefficient η of M-DPO (Xiong et al. 2025; TRL's DPOConfig default).
  micro_batch: int = 2  # Pairs per gradient computation (each two sequences).

  def __post_init__(self):
    fields.positive(self, ["beta"])
    fields.counts(self, ["micro_batch"])
