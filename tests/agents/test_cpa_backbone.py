"""CPA, its ablations and the baselines on a real (tiny, random: garbage-answering)
backbone over one example of every MathTutorBench task (an ablation: of every dataset):
each instance gets a reply, a trace and counted stand-ins."""
import os

import pytest

from pedrl.agents import backbone, bench
from pedrl.agents.cpa.agent import CPASettings, Instance
from pedrl.engine.distribution import SamplingParams
from pedrl.env import party
from pedrl.eval.mathtutorbench_harness import runner, tasks

# pedrl's tiny benchmark in MathTutorBench's format (testdata/make_mathtutorbench.py).
DATA = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "testdata",
                                    "mathtutorbench"))


@pytest.fixture(scope="module")
def instances():
  out = []
  for task in tasks.TASKS:
    t = tasks.read_task(os.path.join(DATA, "mathtutorbench"), task)
    for x in tasks.examples(task, DATA)[:1]:  # Every task's prompt; more examples add time only.
      out.append(Instance(len(out), task, t.prompt(x)))
  return out


@pytest.fixture(scope="module")
def tiny(short_context):
  # The tiny Qwen2 with a short context: every task prompt is cut to it either way.
  return party.load(short_context("qwen2"), SamplingParams(12), scan_layers=False)


def _first_task_of_each_dataset() -> tuple[str, ...]:
  first = {}
  for name, (_, dataset) in tasks.TASKS.items():
    first.setdefault(dataset, name)
  return tuple(first.values())


# An ablation drops one of CPA's modules, whatever the task: it runs on one task of each
# dataset (the full method and the baselines on all nine).
ONE_TASK_A_DATASET = _first_task_of_each_dataset()


@pytest.mark.job  # A pipeline end to end in-process: each method on every task.
@pytest.mark.parametrize("method", bench.METHODS)
def test_every_method_answers_every_task_on_a_garbage_backbone(method, instances, tiny):
  if method.startswith("no_"):
    instances = [x for x in instances if x.task in ONE_TASK_A_DATASET]
  b = backbone.LocalBackbone(tiny, SamplingParams(12, temperature=0.7, top_p=0.95), seed=42,
                             truncate_prompts=True)
  agent = bench.build(method, b, CPASettings(rounds=2))
  traces = agent.run(instances)
  assert [t.task for t in traces] == [x.task for x in instances]
  assert all(t.response.strip() for t in traces)
  assert sum(sum(t.fallbacks.values()) for t in traces) > 0  # Garbage is counted, not hidden.
  # Every backbone call is a stage's first ask of an instance, or a counted re-ask.
  assert b.stats["calls"] == sum(t.calls for t in traces) + agent.stats["reasks"]
  assert b.stats["prompts_cut"] > 0  # The tiny context cuts the task prompts, counted.


def test_agent_policy_fills_bench_records_with_traces(instances, tiny):
  b = backbone.LocalBackbone(tiny, SamplingParams(8), seed=42, truncate_prompts=True)
  policy = bench.AgentPolicy(bench.build("cot", b, CPASettings(rounds=1)))
  t = tasks.read_task(os.path.join(DATA, "mathtutorbench"), "pedagogy_following")
  xs = tasks.examples("pedagogy_following", DATA)[:2]
  recs = runner.answer("pedagogy_following", t, xs, [0, 1], 0, policy)
  assert [r.trace["variant"] for r in recs] == ["cot", "cot"]
  assert all(r.prediction == r.response for r in recs)
