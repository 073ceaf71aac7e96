"""What the evaluation job (pedrl.experiments.evaluate) computes per batch, given its
parties (local or endpoint), judges and Ped-RM; the job loads them and runs the batches
of its shard (pedrl.jobs.sharded).

Tutoring, papers 003/001/000's protocol: the student alone (K attempts, the
pre-dialogue solve rate), the dialogues with the tutor under test, K attempts after
each (post; every dialogue: Δ is never penalised), the evaluation judges (every
sample kept, unparsed ones as None) and Ped-RM on every tutor turn. Reasoning
preservation: the tutor alone on benchmark questions, graded by each benchmark's rule.
"""
from collections.abc import Sequence
import time
from typing import Any

from pedrl import streams
from pedrl.env import party as party_lib, problems, rollout, solving
from pedrl.eval import judges as eval_judges, reasoning, records as records_lib
from pedrl.eval.counts import Counts, api_counts
from pedrl.rewards import asking, judging


def tutoring_batch(batch: Sequence[problems.Problem], uids: Sequence[int], j: int,
                   parties: tuple[party_lib.Party, ...], s: Any,
                   specs: Sequence[judging.JudgeSpec], backend: asking.TextBackend,
                   rm: Any, counts: Counts) -> list[records_lib.EvalRecord]:
  """The EvalRecords of one batch of problems (`uids` their indices, `j` the batch): see
  the module docstring. `s`: the job's EvaluationSettings (pedrl.jobs', a layer above);
  `rm`: a PedRM or None; `counts` gets each stage's
  seconds, the judges' re-asks, each endpoint's calls and an agent tutor's counts."""
  tutor, student, solver = parties
  clock = time.perf_counter()
  with api_counts(counts, judge_backend=backend,
                  tutor_endpoint=getattr(tutor, "client", None),
                  # An agent tutor's turns, fallbacks and backbone use (pedrl.agents.tutor).
                  tutor_agent=tutor if hasattr(tutor, "stats") else None,
                  student_endpoint=getattr(student, "client", None),
                  solve_endpoint=getattr(solver, "client", None)):
    return _evaluate(batch, uids, j, parties, s, specs, backend, rm, counts, clock)


def _evaluate(batch, uids, j: int, parties, s, specs, backend, rm, counts, clock) -> list:
  tutor, student, solver = parties
  seed = s.job.seed
  pre = solving.pre_dialogue(batch, solver, s.solve, seed=seed)
  clock = counts.tick("pre_solve", clock)
  dialogues = rollout.run(batch, s.evaluation.samples_per_problem, tutor, student, s.rollout,
                          seed=seed, problem_uids=uids)
  clock = counts.tick("dialogues", clock)
  # Every dialogue: Δ is never penalised.
  solving.post_dialogue(dialogues, solver, s.solve, seed=seed)
  clock = counts.tick("post_solve", clock)
  stats = asking.AskStats()
  try:
    verdicts = eval_judges.judge(dialogues, specs, backend, s.judging.judge_rounds,
                                 s.judging.max_failed_share, stats, s.judging.judge_parse,
                                 s.judging.judge_transcript)
  finally:
    counts.judge.update(stats)
  clock = counts.tick("judges", clock)
  scores = rm.score_dialogues(dialogues) if rm else [[] for _ in dialogues]
  counts.tick("pedrm", clock)
  return [records_lib.EvalRecord(
      problem_id=d.problem_id, sample=d.rollout, batch=j,
      pre_solve_rate=pre[d.problem_id].rate, post_solve_rate=d.r_sol,
      leak_decisions=a.leakage, helpful_decisions=a.helpfulness, thinking_scores=a.thinking,
      pedrm_turn_scores=t, dialogue=d)
      for d, a, t in zip(dialogues, map(eval_judges.labels, verdicts), scores)]


def reasoning_batch(batch: Sequence[reasoning.Example], idx: list[int], j: int,
                    tutor: party_lib.Party, seed: int,
                    counts: Counts) -> list[records_lib.ReasoningRecord]:
  """The ReasoningRecords of one batch of benchmark questions (`idx` their indices):
  the tutor answers each once, and its answer is graded (pedrl.eval.reasoning)."""
  clock = time.perf_counter()
  texts = solving.sample(tutor, [list(x.chat) for x in batch], idx, k=1, seed=seed,
                         stream=streams.REASONING, prompts_per_call=len(batch))
  counts.tick("answers", clock)
  out = []
  for x, (reply,) in zip(batch, texts):
    extracted, correct = reasoning.grade(x.benchmark, reply, x.target, x.options)
    out.append(records_lib.ReasoningRecord(x.benchmark, x.id, j, reply, extracted, x.target,
                                           bool(correct), x.category))
  return out
