"""CPA's control flow (paper 002, algorithm 1 and section 3.6) on a scripted backbone:
canned replies per stage, calls counted per stage."""
import json

import pytest

from pedrl.agents.backbone import Usage
from pedrl.agents.cpa import agent, contracts
from pedrl.agents.cpa.agent import CPA, Instance

STATE = {"context": "A student solves 3 + 4.", "goal": "guide the next step",
         "bottlenecks": ["adding"], "constraints": ["no answer"],
         "summary": {"problem": "3 + 4", "student_state": "stuck", "deliverable": "a hint",
                     "constraints": "no answer"}, "evidence": ["3 + 4"]}
TEMPLATE = {"steps": [{"role": "understand", "goal": "read"}, {"role": "verify", "goal": "check"},
                      {"role": "compose guidance", "goal": "write the hint"}], "deliverable": 3}
GOOD = dict(feasibility=True, coverage=True, consistency=True, economy=True, feedback="")
BAD = dict(GOOD, coverage=False, feedback="add a check")


class Scripted:
  """replies[stage]: a JSON-able object, or a function (prompt, n) -> object, n counting
  that stage's calls so far."""

  def __init__(self, **replies):
    defaults = dict(m1=STATE, generate={"templates": [TEMPLATE] * 3},
                    simulate={"steps": ["a", "b", "c", "d"], "deliverable": "Try adding 3 and 4 step by step."},
                    evaluate=GOOD, revise=TEMPLATE, execute={"output": "Count on from 3."},
                    repair={"output": "Count on from 3, four times."}, monitor={"ok": True},
                    finish={"response": "What do you get if you count on from 3?"})
    self.replies = {**defaults, **replies}
    self.stats = Usage()
    self.prompts = {}

  def chat(self, conversations, stage, uids, steps):
    out = []
    for c in conversations:
      n = self.stats[f"calls/{stage}"]
      self.stats.add(stage, 1, 1)
      self.prompts.setdefault(stage, []).append(c[0]["content"])
      r = self.replies[stage]
      r = r(c[0]["content"], n) if callable(r) else r
      out.append(r if isinstance(r, str) else json.dumps(r))
    return out


def inst(uid=0, task="scaffolding_generation", memory=None):
  return Instance(uid, task, "Student: I am stuck on 3 + 4.",
                  {"reference_solution": "3 + 4 = 7\n#### 7"}, memory)


def calls(backbone):
  return {k[6:]: v for k, v in backbone.stats.items() if k.startswith("calls/")}


def test_the_first_passing_candidate_is_chosen_and_nothing_is_revised():
  b = Scripted(evaluate=lambda p, n: GOOD if n == 1 else BAD,  # Candidate 2 of 3 passes.
               generate={"templates": [dict(TEMPLATE, deliverable=i) for i in (1, 2, 3)]})
  [t] = CPA(b).run([inst()])
  assert t.passed and t.template["deliverable"] == 2 and t.revisions == []
  assert (calls(b)["generate"], calls(b)["simulate"], calls(b)["evaluate"]) == (1, 3, 3)
  assert "revise" not in calls(b)


def test_revisions_stop_at_j_and_the_last_one_is_executed_unchecked():
  b = Scripted(evaluate=BAD, revise=lambda p, n: dict(TEMPLATE, deliverable=n % 3 + 1))
  s = agent.CPASettings(k=3, j=3)
  [t] = CPA(b, s).run([inst()])
  assert len(t.revisions) == 3 and calls(b)["revise"] == 3 and not t.passed
  # Round 0 checks K candidates, rounds 1 and 2 the one revision each: S^(3) is unchecked.
  assert calls(b)["evaluate"] == 3 + 2 and [len(r) for r in t.rounds] == [3, 1, 1]
  assert t.template == t.revisions[-1]


def test_a_dry_run_covers_at_most_three_steps():
  long = {"steps": [{"role": f"r{i}", "goal": "g"} for i in range(5)], "deliverable": 5}
  b = Scripted(generate={"templates": [long]})
  [t] = CPA(b).run([inst()])
  assert all("first 3 steps" in p for p in b.prompts["simulate"])
  assert all(len(c.simulation["steps"]) <= 3 for r in t.rounds for c in r)


def test_the_monitor_repairs_twice_then_resynthesizes_once():
  b = Scripted(monitor={"ok": False, "issue": "skips the check"})
  [t] = CPA(b, agent.CPASettings(max_repairs=2, max_resyntheses=1)).run([inst()])
  # Step 1 fails its check, is repaired twice, still fails: back to M2, then again.
  assert t.resyntheses == 1 and t.repairs == 4
  assert calls(b)["generate"] == 2 and calls(b)["repair"] == 4
  assert [s.repairs for s in t.steps] == [2]
  assert t.response  # The output stands, flagged by the counts.


def test_a_rule_violation_at_the_deliverable_step_is_repaired():
  # The executed hint states the answer (7): the contract's rules flag it.
  b = Scripted(execute={"output": "The answer is 7."}, finish=lambda p, n: {"response": p[-60:]})
  [t] = CPA(b).run([inst()])
  checks = t.steps[2].checks
  assert checks[0].rules and "states_answer" in checks[0].rules
  assert t.steps[2].repairs == 1 and t.steps[2].output.startswith("Count on")


@pytest.mark.parametrize("variant,removed", [
    ("no_m1", {"m1"}), ("no_m2_loop", {"simulate", "evaluate"}), ("no_m2_sim", {"simulate"}),
    ("no_m3_monitor", {"monitor"}), ("no_m4", {"finish"})])
def test_each_ablation_removes_exactly_its_stage(variant, removed):
  full, ablated = Scripted(), Scripted()
  CPA(full).run([inst(0), inst(1)])
  CPA(ablated, agent.settings_for(variant), variant).run([inst(0), inst(1)])
  expected = {k: v for k, v in calls(full).items() if k not in removed}
  if variant == "no_m2_loop":  # One template is asked for, never checked.
    assert "k=1" not in ablated.prompts["generate"][0] and "Propose 1 " in ablated.prompts["generate"][0]
  assert calls(ablated) == expected


def test_garbage_replies_fall_back_and_every_instance_still_answers():
  b = Scripted(**{k: "no json here" for k in ("m1", "generate", "simulate", "evaluate",
                                               "revise", "execute", "repair", "monitor",
                                               "finish")})
  traces = CPA(b, agent.CPASettings(rounds=2)).run([inst(0), inst(1, "problem_solving")])
  for t in traces:
    assert t.fallbacks["m1"] == 1 and t.fallbacks["generate"] == 1 + t.resyntheses
    assert t.template == agent.FALLBACK_TEMPLATE.model_dump()
    assert t.response == "no json here"  # The raw text stands in, counted, flagged.
    assert t.fallbacks["execute"] >= 1
    assert t.fallbacks.get("format", 0) == (t.task == "problem_solving")  # No number in it.
  assert calls(b)["m1"] == 4  # Two instances, each asked twice.


@pytest.mark.parametrize("task,text,out", [
    ("problem_solving", "So she earns 1,200 dollars.", "Final Answer: 1200"),
    ("mistake_correction", "The corrected total is 18.", "Final Answer: 18"),
    ("mistake_location", "The error is in step 3, not 4.", "3"),
    ("solution_correctness", "The solution is incorrect in step 2.", "Yes"),
    ("solution_correctness", "Every step is correct.", "No"),
    ("socratic_questioning", "- How many eggs?\nnote\n- What is left?", "How many eggs?\nWhat is left?"),
    ("problem_solving", "no number here", None),
    ("scaffolding_generation", " What comes next? ", "What comes next?"),
])
def test_m4_formats_structured_deliverables(task, text, out):
  assert contracts.formatted(task, text) == out


def test_a_turn_keeps_its_template_until_the_goal_changes():
  b = Scripted()
  cpa = CPA(b)
  [t1] = cpa.run([inst()])
  memory = CPA.memory(t1)
  [t2] = cpa.run([inst(memory=memory)])
  assert t2.reused_template and calls(b)["generate"] == 1
  b.replies["m1"] = dict(STATE, goal="check the student's final answer")
  [t3] = cpa.run([inst(memory=memory)])
  assert not t3.reused_template and calls(b)["generate"] == 2


def test_cpa_tutors_dialogues_and_keeps_its_template_across_turns(testdata):
  from pedrl.agents.tutor import AgentTutor
  from pedrl.engine.distribution import SamplingParams
  from pedrl.env import dialogue, party, rollout
  from pedrl.env.problems import Problem
  b = Scripted()
  tutor = AgentTutor(CPA(b))
  student = party.load(testdata("qwen2"), SamplingParams(8), scan_layers=False)
  problems = [Problem(id="p0", problem="What is 3 + 4?", answer="7"),
              Problem(id="p1", problem="What is 5 * 6?", answer="30")]
  settings = rollout.RolloutSettings(scenario=dialogue.GUIDED, max_turns=6)
  out = rollout.run(problems, 2, tutor, student, settings)
  # The turn limit is checked after tutor turns (paper 003's reference): 4 tutor turns.
  assert [sum(m.role == dialogue.TUTOR for m in d.messages) for d in out] == [4] * 4
  assert all(m.text == "What do you get if you count on from 3?" for d in out
             for m in d.messages if m.role == dialogue.TUTOR)
  # Four dialogues, four tutor turns each: the template of turn 1 serves turns 2 to 4
  # (the state keeps its goal): each dialogue found its memory under its own view.
  assert calls(b)["generate"] == 4 and calls(b)["m1"] == 16
  assert [t.reused_template for t in tutor.traces] == [False] * 4 + [True] * 12
  assert "Student: " in b.prompts["m1"][-1]  # The dialogue so far is the task input.


def test_an_unknown_tutor_agent_is_refused_when_the_config_is_read():
  from pedrl.agents.tutor import TutorAgentSettings
  assert TutorAgentSettings("no_m2_sim").agent == "no_m2_sim"
  with pytest.raises(ValueError, match="tutor.agent='cpa2' is not one of"):
    TutorAgentSettings("cpa2")


def test_tables_average_seeds_with_their_spread():
  from pedrl.experiments import cpa as job
  stats = lambda bvr: dict(bvr=bvr, repair_share=0.5, fallbacks=2, calls_per_instance=10.0,
                           tokens_per_instance=100.0, seconds_per_instance=1.0)
  runs = {"cpa": [({"pedagogy_following_hard": {"win_rate": 0.4}}, stats(0.1)),
                  ({"pedagogy_following_hard": {"win_rate": 0.6}}, stats(0.3))],
          "cot": [({"problem_solving": {"accuracy_strict-match": 0.25}}, stats(0.2))]}
  text = job.tables(runs)
  # Mean ± population std over the two seeds: 50 ± 10 and 20 ± 10, in percent.
  assert "| cpa | – | 50.0 ± 10.0 | 20.0 ± 10.0 | 50.0 ± 0.0 | 4 | 10.0 | 100 | 1.00 |" in text
  assert "| cot | 25.0 | – |" in text
