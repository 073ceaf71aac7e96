"""Rewards for a batch of dialogues: judges, then solve attempts, then UCO turns, then totals.

The order matters for cost: with the hard penalty a rejected dialogue gets no
solve attempts (paper 003), and a dialogue a judge policy dropped gets nothing.
A call returns the batch's `assemble.BatchRewards`, whose counts are the
batch's alone; `stats` counts since the pipeline was built. The counts:
dropped, hard_rejected; judge/<key>, oracle/<key> and classifier/<key> with the
keys of `asking.AskStats`; judge_backend/, oracle_backend/ and classifier_backend/
with the backends' retries.
"""
import collections
import dataclasses
import time

from pedrl.engine.scoring import Scorer
from pedrl.env import solving
from pedrl.env.dialogue import Dialogue
from pedrl.env.party import Party
from pedrl.rewards import asking, assemble, judging, uco_turns
from pedrl.rewards.embedding import Embedder
from pedrl.rewards.oracle import Oracle


@dataclasses.dataclass
class RewardPipeline:
  settings: assemble.RewardSettings
  solver: Party | None  # The student, with the solve-attempt sampling params.
  solve: solving.SolveSettings
  judge_specs: tuple[judging.JudgeSpec, ...] = ()
  judge_backend: asking.TextBackend | None = None
  judge_rounds: int = judging.ROUNDS
  on_judge_failure: str = judging.ON_FAILURE
  judge_parse: str = judging.PARSE_RULE  # judging.PARSE_RULES: how a decision reply is read.
  judge_transcript: str = judging.TRANSCRIPT  # dialogue.TRANSCRIPT_STYLES.
  uco: uco_turns.UCOSettings | None = None
  student: Party | None = None  # Scores UCO candidates (the student's model).
  scorer: Scorer | None = None  # On the student's model.
  oracle: Oracle | None = None
  embedder: Embedder | None = None
  classifier: asking.TextBackend | None = None  # UCO's level classifier (level_method="llm").
  solve_always: bool = True  # Post-dialogue attempts even without r_sol (Δ solve-rate reports).
  stats: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  seconds: collections.Counter = dataclasses.field(default_factory=collections.Counter)
  # Above this share of judge answers filled in by the on_failure policy (or of UCO turns
  # without a classifier level): an error.
  max_failed_share: float = 1.0
  # The run's seed: with a dialogue's uid, it draws the post-dialogue solve attempts.
  seed: int = dataclasses.field(kw_only=True)

  def __post_init__(self):
    names = self.settings.names
    if self.settings.needs_judges and (not self.judge_specs or self.judge_backend is None):
      raise ValueError(f"reward components {sorted(names)} need judges and a judge backend")
    if "thinking" in names and not any(s.kind == judging.SCORE for s in self.judge_specs):
      raise ValueError("the thinking component needs the thinking-quality judge (THINKING)")
    if "uco" in names and None in (self.uco, self.student, self.scorer, self.oracle,
                                   self.embedder):
      raise ValueError("the uco component needs UCO settings, the student, a scorer, an "
                       "oracle and an embedder")

  def __call__(self, dialogues: list[Dialogue]) -> assemble.BatchRewards:
    """Rewards a batch: each dialogue's judgement, dropped, r_sol, turn_rewards and
    rewards are filled in place (a Dialogue is the record every stage adds its part to:
    the rollout, the solve attempts, the rewards; the advantages, samples and records
    read them there), and the batch's spread and counts are returned. A failed-share
    check stops the batch (JudgeError); its counts are in `stats` then, saying why."""
    batch = collections.Counter()
    sources_before = self._source_counts()
    try:
      spread = self._run(dialogues, batch)
    finally:
      self._collect(sources_before, batch)
    return assemble.BatchRewards(spread, dict(batch))

  def _run(self, dialogues, batch: collections.Counter) -> dict[str, assemble.Spread]:
    clock = time.perf_counter()
    if self.settings.needs_judges:
      judge_stats = asking.AskStats()
      try:
        verdicts, dropped = judging.judge(dialogues, self.judge_specs, self.judge_backend,
                                          self.judge_rounds, self.on_judge_failure,
                                          judge_stats, self.max_failed_share,
                                          self.judge_parse, self.judge_transcript)
      finally:
        self._count(batch, judge_stats, "judge/")
      for d, v, drop in zip(dialogues, verdicts, dropped):
        d.judgement, d.dropped = v, drop
    clock = self._tick("judges", clock)
    kept = [d for d in dialogues if not d.dropped]
    to_solve = [d for d in kept if not assemble.rejected(d, self.settings)]
    self._count(batch, {"dropped": len(dialogues) - len(kept),
                 "hard_rejected": len(kept) - len(to_solve)})
    if to_solve and (self.solve_always or "r_sol" in self.settings.names):
      solving.post_dialogue(to_solve, self.solver, self.solve, seed=self.seed)
    clock = self._tick("solve", clock)
    if "uco" in self.settings.names and to_solve:
      classifier_stats = asking.AskStats()
      try:
        scores = uco_turns.score_turns(to_solve, self.student, self.scorer, self.oracle,
                                       self.embedder, self.uco, self.classifier,
                                       classifier_stats, self.max_failed_share)
      finally:
        self._count(batch, classifier_stats, "classifier/")
      for d, turns in zip(to_solve, scores):
        d.turn_rewards = turns
    self._tick("uco", clock)
    return assemble.assign(dialogues, self.settings)

  def _count(self, batch: collections.Counter, counts, prefix: str = ""):
    """The pipeline's own counts: into the running totals and the batch's."""
    for k, v in counts.items():
      self.stats[prefix + k] += v
      batch[prefix + k] += v

  def _source_counts(self) -> dict:
    """Counters kept by the backends (retries) and the LLM oracle (its AskStats): running
    totals."""
    out = {}
    for prefix, source in (("judge_backend", self.judge_backend), ("oracle", self.oracle),
                           ("oracle_backend", getattr(self.oracle, "backend", None)),
                           ("classifier_backend", self.classifier)):
      for k, v in (getattr(source, "stats", None) or {}).items():
        out[f"{prefix}/{k}"] = v
    return out

  def _collect(self, before: dict, batch: collections.Counter):
    """The sources' totals into `stats`; what they counted during this call into the
    batch's counts."""
    for k, v in self._source_counts().items():
      self.stats[k] = v  # The source's counts are already running totals.
      if v != before.get(k, 0):
        batch[k] = v - before.get(k, 0)

  def _tick(self, what: str, since: float) -> float:
    now = time.perf_counter()
    self.seconds[what] += now - since
    return now
