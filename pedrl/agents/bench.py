"""Agents as MathTutorBench policies: CPA's table 3 variants and the table 2 baselines.

`AgentPolicy` answers a batch of one task's prompts (rendered from the task
file, as every policy gets them) with one agent run over all of them, so each
stage is one batched backbone call. The task's stop strings cut the final
replies as an endpoint would, after a leading "Teacher:" or "Student:" label is
dropped rather than left to empty the reply (`contracts.harness_cut`). CPA's rule
checks judge its would-be replies as that cut leaves them (`Instance.stop`); a
reply the cut changes all the same (a baseline's; CPA's text after a blank line)
is counted in its trace's `fallbacks["stop"]`; the trace keeps the reply as the
agent wrote it (`response`), the record the reply as cut. Besides the prompts
it is told only the task's name (which contract applies): never the examples,
whose reference solutions and labels the prompts do not show. Traces come back
per reply and are stored in the BenchRecords (`pedrl.tools.show_trace` prints
them).
"""
import dataclasses
from collections.abc import Sequence

from pedrl.agents import baselines, structured
from pedrl.agents.cpa import agent as cpa, contracts
# Re-exported: defined there, importable without JAX.
from pedrl.agents.settings import BASELINES, METHODS



def build(method: str, backbone: structured.Backbone,
          settings: cpa.CPASettings) -> cpa.CPA | baselines.Prompting | baselines.SkeletonOfThought:
  """The agent of `method`: "cpa" (all modules), an ablation such as "no_m1", or a baseline."""
  if method == "cpa":
    return cpa.CPA(backbone, settings, "full")
  if method in cpa.ABLATIONS:
    return cpa.CPA(backbone, dataclasses.replace(settings, **cpa.ABLATIONS[method]), method)
  if method in ("cot", "plan_solve"):
    return baselines.Prompting(backbone, method, settings.rounds)
  if method == "sot":
    return baselines.SkeletonOfThought(backbone, rounds=settings.rounds)
  raise ValueError(f"unknown agent method {method!r}; the methods: {', '.join(METHODS)}")


class AgentPolicy:
  """A MathTutorBench policy (pedrl.eval.mathtutorbench_harness.runner) played by an agent."""
  traced = True

  def __init__(self, agent) -> None:
    self.agent = agent

  def __call__(self, prompts: Sequence[str], stop: Sequence[str], uids: Sequence[int],
               task: str) -> tuple[list, list, list]:
    stop = tuple(stop)
    instances = [cpa.Instance(int(u), task, p, stop=stop) for u, p in zip(uids, prompts)]
    traces = self.agent.run(instances)
    replies = [contracts.harness_cut(t.response, stop) for t in traces]
    for t, r in zip(traces, replies):
      if r != t.response.strip():  # What is scored is not the reply the agent wrote.
        t.fallback("stop")
    return replies, [False] * len(replies), [t.to_dict() for t in traces]
