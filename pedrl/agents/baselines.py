"""Paper 002's prompting baselines (table 2) on the same backbone as CPA: chain of thought,
Plan-and-Solve (its PS+ variant) and Skeleton-of-Thought.

Each answers in JSON like CPA's stages (`structured.ask`: re-asked, counted),
and its `response` field is the reply the benchmark reads, so a baseline's
reasoning never leaks into the parsed answer. Skeleton-of-Thought asks for an
outline of at most `points` points, then expands every point of every
instance in one batched call and joins them in order on one line (a point's own
line breaks become spaces): the socratic task file asks for its questions on
one line and stops at the first line break, and the tutoring tasks stop at a
blank line. A reply still unread after the rounds falls back to its raw text
(counted in `Trace.fallbacks`).
"""
from collections.abc import Sequence

import pydantic

from pedrl.agents import structured
from pedrl.agents.structured import user_turn
from pedrl.agents.cpa.agent import Instance
from pedrl.agents.cpa.state import StepRecord, Texts, Trace
from pedrl.rewards import asking


class _Final(structured.Schema):
  response: str


class _Outline(structured.Schema):
  points: Texts = pydantic.Field(min_length=1)


class _Point(structured.Schema):
  text: str


class Prompting:
  """CoT ("cot") or PS+ ("plan_solve"): one call per instance."""

  def __init__(self, backbone, method: str, rounds: int = 3):
    if method not in ("cot", "plan_solve"):
      raise ValueError(f"unknown prompting baseline {method!r}")
    self.backbone, self.method, self.rounds = backbone, method, rounds
    self.stats = asking.AskStats()

  def run(self, instances: Sequence[Instance]) -> list[Trace]:
    convs = [user_turn(f"baselines/{self.method}", task_input=i.text) for i in instances]
    got, raw = structured.ask(self.backbone, convs, _Final, self.method,
                              [i.uid for i in instances], [0] * len(instances), self.rounds,
                              self.stats)
    traces = []
    for inst, g, text in zip(instances, got, raw):
      t = Trace(inst.task, inst.uid, self.method, calls=1)
      t.steps = [StepRecord(self.method, "reason, then reply", text)]
      if g is None:
        t.fallback(self.method)
      t.response = g.response.strip() if g else text.strip()
      traces.append(t)
    return traces


class SkeletonOfThought:
  """An outline, then every point expanded in parallel (Ning et al. 2023)."""
  method = "sot"

  def __init__(self, backbone, points: int = 4, rounds: int = 3) -> None:
    self.backbone, self.points, self.rounds = backbone, points, rounds
    self.stats = asking.AskStats()

  def run(self, instances: Sequence[Instance]) -> list[Trace]:
    uids = [i.uid for i in instances]
    got, raw = structured.ask(self.backbone, [
        user_turn("baselines/sot_outline", task_input=i.text, points=self.points)
        for i in instances], _Outline, "sot_outline", uids, [0] * len(instances), self.rounds, self.stats)
    traces, jobs = [], []
    for inst, g, text in zip(instances, got, raw):
      t = Trace(inst.task, inst.uid, self.method, calls=1)
      if g is None:
        t.fallback("sot_outline")
      points = list(g.points[:self.points]) if g else [text.strip() or "the reply"]
      t.steps = [StepRecord("outline", "the reply's skeleton", "\n".join(points))]
      jobs += [(len(traces), inst, points, k) for k in range(len(points))]
      traces.append(t)
    texts, raw = structured.ask(self.backbone, [
        user_turn("baselines/sot_expand", task_input=inst.text, points=points, index=k)
        for _, inst, points, k in jobs], _Point, "sot_expand", [inst.uid for _, inst, _, _ in jobs],
        [1 + k for _, _, _, k in jobs], self.rounds, self.stats)
    parts = [[] for _ in traces]
    for (n, _, _, _), g, text in zip(jobs, texts, raw):
      traces[n].calls += 1
      if g is None:
        traces[n].fallback("sot_expand")
      parts[n].append((g.text if g else text).strip())
    for t, p in zip(traces, parts):
      t.steps.append(StepRecord("expand", "each point in a sentence or two", "\n".join(p)))
      t.response = " ".join(" ".join(x.split()) for x in p if x)
    return traces
