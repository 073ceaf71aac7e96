"""CPA's control flow (paper 002, algorithm 1 and section 3.6) on a scripted backbone:
canned replies per stage, calls counted per stage."""
import json
import os

import pytest

from pedrl.agents import bench
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
                    finish={"response": "What do you get if you count on from 3?"},
                    solve={"solution": "3 + 4 = 7", "answer": "7"})
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
  return Instance(uid, task, "Student: I am stuck on 3 + 4.", memory)


def calls(backbone):
  return {k[6:]: v for k, v in backbone.stats.items() if k.startswith("calls/")}


def test_fewer_readable_candidates_than_k_are_searched_and_counted():
  """GENERATE asked for K = 3 gives two templates and a malformed one: the two are checked,
  and the narrower search is counted."""
  b = Scripted(generate={"templates": [TEMPLATE, {"steps": []}, dict(TEMPLATE, deliverable=2)]},
               evaluate=BAD)
  [t] = CPA(b).run([inst()])
  assert len(t.rounds[0]) == 2 and t.fallbacks == {**t.fallbacks, "candidates": 1}
  b = Scripted()  # Three readable: nothing counted.
  [t] = CPA(b).run([inst()])
  assert len(t.rounds[0]) == 3 and "candidates" not in t.fallbacks


def test_the_first_passing_candidate_is_chosen_and_nothing_is_revised():
  b = Scripted(evaluate=lambda p, n: GOOD if n == 1 else BAD,  # Candidate 2 of 3 passes.
               generate={"templates": [dict(TEMPLATE, deliverable=i) for i in (1, 2, 3)]})
  [t] = CPA(b).run([inst()])
  assert t.passed and t.template.deliverable == 2 and t.revisions == []
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
  assert all(len(c.simulation.steps) <= 3 for r in t.rounds for c in r)


def test_the_monitor_repairs_twice_then_resynthesizes_once():
  b = Scripted(monitor={"ok": False, "issue": "skips the check"})
  [t] = CPA(b, agent.CPASettings(max_repairs=2, max_resyntheses=1)).run([inst()])
  # Step 1 fails its check, is repaired twice, still fails: back to M2, told why.
  assert t.resyntheses == 1 and calls(b)["generate"] == 2
  assert "skips the check" in b.prompts["generate"][1] and "skips" not in b.prompts["generate"][0]
  assert [[s.repairs for s in e] for e in t.abandoned] == [[2]]  # The first execution, kept.
  # No re-synthesis left: every step still fails, stands, and execution reaches τ.
  assert [s.repairs for s in t.steps] == [2, 2, 2] and t.unresolved == [0, 1, 2]
  assert t.repairs == 2 + 6 and calls(b)["repair"] == 8
  assert t.deliverable == t.steps[2].output and t.response == b.replies["finish"]["response"]


def test_a_rule_violation_at_the_deliverable_step_is_repaired():
  # The executed hint states the answer (7): the contract's rules flag it.
  b = Scripted(execute={"output": "The answer is 7."})
  [t] = CPA(b).run([inst()])
  checks = t.steps[2].checks
  assert checks[0].rules and "states_answer" in checks[0].rules
  assert t.steps[2].repairs == 1 and t.steps[2].output.startswith("Count on")
  # Notes before the deliverable may state the answer: the rules check step τ only.
  assert [s.repairs for s in t.steps[:2]] == [0, 0] and t.steps[0].checks[0].rules is None
  assert t.unresolved == [] and t.response == b.replies["finish"]["response"]


@pytest.mark.parametrize("variant,removed", [
    ("no_m1", {"m1"}), ("no_m2_loop", {"simulate", "evaluate"}), ("no_m2_sim", {"simulate"}),
    ("no_m3_monitor", {"monitor"}), ("no_m4", {"finish"})])
def test_each_ablation_removes_exactly_its_stage(variant, removed):
  full, ablated = Scripted(), Scripted()
  CPA(full).run([inst(0), inst(1)])
  bench.build(variant, ablated, agent.CPASettings()).run([inst(0), inst(1)])
  expected = {k: v for k, v in calls(full).items() if k not in removed}
  if variant == "no_m2_loop":  # One template is asked for, never checked.
    assert "Propose 1 " in ablated.prompts["generate"][0]
  assert calls(ablated) == expected


def test_without_m4_the_deliverable_step_is_the_reply_as_written():
  # τ is step 2 of 3: the reply is step 2's output, not the last step's, and unformatted.
  template = dict(TEMPLATE, deliverable=2)
  outputs = lambda p, n: {"output": f"output {n % 3 + 1}: the total is 12"}
  full, ablated = (Scripted(generate={"templates": [template]}, execute=outputs)
                   for _ in range(2))
  [t] = bench.build("no_m4", ablated, agent.CPASettings()).run([inst(task="problem_solving")])
  assert t.response == "output 2: the total is 12"
  [t] = CPA(full).run([inst(task="problem_solving")])
  assert t.response == "Final Answer: 12"


def test_the_contract_and_m1_both_constrain_and_the_task_reaches_every_stage():
  b = Scripted()
  [t] = CPA(b).run([inst(task="solution_correctness")])
  monitor = b.prompts["monitor"][-1]
  # Γ_t: the contract's constraints, then M1's; the goal with its success criteria.
  assert "answer strictly Yes" in monitor and "no answer" in monitor
  for stage in ("generate", "simulate", "evaluate", "execute"):
    assert "I am stuck on 3 + 4" in b.prompts[stage][0], stage  # The task as given.
  b = Scripted()
  CPA(b, agent.CPASettings(show_input=False)).run([inst()])
  assert all("I am stuck" not in b.prompts[s][0] for s in ("generate", "execute"))
  assert "I am stuck" in b.prompts["m1"][0]


def test_a_structured_deliverable_the_harness_cannot_read_is_unparsable_not_empty():
  b = Scripted(execute={"output": "I cannot tell."}, repair={"output": "I cannot tell."},
               simulate={"steps": ["a"], "deliverable": "unclear"})
  [t] = CPA(b, agent.CPASettings(max_resyntheses=0)).run([inst(task="mistake_location")])
  assert t.steps[2].checks[0].rules == "breaks: unparsable"
  assert all(c.rules == ["unparsable"] for c in t.rounds[0])
  assert t.unresolved == [2] and t.fallbacks["format"] == 1


def test_a_rewrite_that_breaks_a_rule_keeps_the_draft():
  b = Scripted(finish={"response": "The answer is 7."})
  [t] = CPA(b).run([inst()])
  assert t.response == "Count on from 3." and t.fallbacks == {"finish": 1}


DRAFT_TOO_LONG = "Good start. Keep counting. You are close. Try again."


@pytest.mark.parametrize("rewrite,kept", [
    # Four sentences break the task file's "maximum two sentences" (too_long); the rewrite
    # states 3 + 4 = 7 (states_answer): one rule each, but not the same rule: refused.
    ("The answer is 7.", False),
    # Two sentences, one question, no 7: it breaks none of the draft's rules: kept.
    ("Good start, keep counting. What comes after 5?", True),
    ("   ", False),  # Empty: a rule ("empty") the draft keeps.
])
def test_a_rewrite_is_kept_only_if_it_breaks_no_rule_the_draft_keeps(rewrite, kept):
  b = Scripted(execute={"output": DRAFT_TOO_LONG}, repair={"output": DRAFT_TOO_LONG},
               finish={"response": rewrite})
  [t] = CPA(b, agent.CPASettings(max_resyntheses=0)).run([inst()])
  assert t.deliverable == DRAFT_TOO_LONG and t.unresolved == [2]  # Stands, too long.
  assert t.response == (rewrite.strip() if kept else DRAFT_TOO_LONG)
  assert t.fallbacks.get("finish", 0) == (0 if kept else 1)


@pytest.mark.parametrize("show_input", [True, False])
def test_m4_sees_what_eq_8_names_and_the_dialogue(show_input):
  """y_t = f_out(C_t, S_t, A_t) (paper 002, eq. 8), rewritten "to fit the dialogue
  context" (section 3.7): M4's prompt holds A_t, S_t, every step's output and the
  dialogue, also where M2 and M3 see A_t and p̂_t only (show_input=False)."""
  b = Scripted(execute=lambda p, n: {"output": f"result {'ABC'[n]}"})
  [t] = CPA(b, agent.CPASettings(show_input=show_input)).run([inst()])
  [finish] = b.prompts["finish"]
  assert "Student: I am stuck on 3 + 4." in finish  # The dialogue, as the instance shows it.
  assert ("I am stuck" in b.prompts["execute"][0]) == show_input
  # A_t = <ctx, goal, bar, cst> (eq. 5) as STATE scripts it, and p̂_t's problem.
  for field in ("A student solves 3 + 4.", "guide the next step", "adding", "no answer",
                "Problem: 3 + 4"):
    assert field in finish, field
  # S_t: the three steps of TEMPLATE with their roles and goals, τ_t = 3.
  for step in ("1. [understand] read", "2. [verify] check", "3. [compose guidance] write the hint",
               "step 3"):
    assert step in finish, step
  # C_t: the three outputs, in order; the draft is step 3's.
  assert finish.index("result A") < finish.index("result B") < finish.index("result C")
  assert t.deliverable == "result C" and finish.rstrip().count("result C") == 2


def test_garbage_replies_fall_back_and_every_instance_still_answers():
  b = Scripted(**{k: "no json here" for k in ("m1", "generate", "simulate", "evaluate",
                                               "revise", "execute", "repair", "monitor",
                                               "finish")})
  traces = CPA(b, agent.CPASettings(rounds=2)).run([inst(0), inst(1, "problem_solving")])
  for t in traces:
    assert t.fallbacks["m1"] == 1 and t.fallbacks["generate"] == 1 + t.resyntheses
    assert t.template == agent.FALLBACK_TEMPLATE
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
    ("solution_correctness", "Does the solution contain an error? No.", "No"),
    ("solution_correctness", "The solution is not correct.", "Yes"),
    ("solution_correctness", "There is no error in any step.", "No"),
    ("solution_correctness", "It isn't right: step 2 adds wrongly.", "Yes"),
    ("socratic_questioning", "- How many eggs?\nnote\n- What is left?", "How many eggs? What is left?"),
    ("socratic_questioning", "1. How many eggs?\n2) What is\tleft? Then add.", "How many eggs? What is\tleft?"),
    ("problem_solving", "no number here", None),
    ("scaffolding_generation", " What comes next? ", "What comes next?"),
])
def test_m4_formats_structured_deliverables(task, text, out):
  assert contracts.formatted(task, text) == out


@pytest.mark.parametrize("text,verdict", [
    # Each says the solution has no error: never "Yes". Where a negation may bind the cue
    # anywhere in its clause the meaning is not read: None, M4 keeps the draft (counted).
    ("I did not find any error in the student's solution.", None),
    ("I could not find a mistake; every step checks out.", None),
    ("None of the steps are wrong.", None),
    ("There isn't any mistake.", None),
    ("The solution is free of errors.", "No"),  # "free of" just before its one cue.
    ("No mistakes were made.", "No"),  # "No" opens a noun phrase, not an answer.
    # Clear verdicts of each kind.
    ("No.", "No"),
    ("Is the Student Solution incorrect? No", "No"),  # The task file's question echoed.
    ("Yes, the student subtracts instead of adding.", "Yes"),
    ("All steps are valid and the answer is right.", "No"),
    ("The student made a mistake in step 3.", "Yes"),
    ("Step 3 is wrong.", "Yes"),
    ("Is there an error? The last step is wrong.", "Yes"),  # The question is not a claim.
    # Claims that disagree: nothing clear to format.
    ("Step 1 is correct but step 2 is wrong.", None),
    ("No, step 2 is wrong.", None),  # The answer word and its only claim disagree.
    ("Yes, the solution is correct.", None),
    # An answer word a claim agrees with (others may name the correct steps), or that its
    # claims leave unread.
    ("No, there is no error.", "No"),
    ("Yes. Step 2 is wrong.", "Yes"),
    ("No, I did not find any error.", "No"),
    ("Yes. Step 1 is correct but step 2 is wrong.", "Yes"),
    ("Yes, the student made a mistake in step 2; the rest of the solution is right.", "Yes"),
    ("No, the solution is correct, although the explanation has a small mistake.", "No"),
])
def test_a_verdict_is_formatted_only_where_its_meaning_is_clear(text, verdict):
  assert contracts.formatted("solution_correctness", text) == verdict


def test_an_unclear_verdict_leaves_the_draft_to_the_harness():
  text = "I did not find any error in the student's solution."
  b = Scripted(execute={"output": text}, repair={"output": text},
               simulate={"steps": ["a"], "deliverable": "No"})
  [t] = CPA(b, agent.CPASettings(max_resyntheses=0)).run([inst(task="solution_correctness")])
  assert t.response == text and t.fallbacks == {"format": 1}
  # The harness's own reading of the kept draft ("yes" in it? else "no" in it?): False,
  # no error ("not" holds "no"); formatted "Yes" it would have read True.
  from pedrl.mathtutorbench_rules import scoring
  assert scoring.parse("solution_correctness", t.response) is False


def test_a_turn_keeps_its_template_until_the_goal_changes():
  b = Scripted()
  cpa = CPA(b)
  [t1] = cpa.run([inst()])
  memory = CPA.memory(t1)
  assert memory.passed and memory.template == t1.template and memory.pointer == 3
  # Turn 2: M1 sees M_{t-1} and reads the same state: the template is reused.
  [t2] = cpa.run([inst(memory=memory)])
  assert t2.reused_template and t2.passed and calls(b)["generate"] == 1
  assert "The previous turn" in b.prompts["m1"][1] and "Count on from 3." in b.prompts["m1"][1]
  # M1 words the state differently but says nothing changed: reused as well.
  b.replies["m1"] = dict(STATE, goal="help with the next step", changed=False)
  [t3] = cpa.run([inst(memory=memory)])
  assert t3.reused_template and calls(b)["generate"] == 1
  b.replies["m1"] = dict(STATE, goal="check the student's final answer", changed=True)
  [t4] = cpa.run([inst(memory=memory)])
  assert not t4.reused_template and calls(b)["generate"] == 2


def test_templates_are_read_one_by_one_and_cut_around_the_deliverable():
  from pedrl.agents.cpa.state import Candidates, Template
  got = Candidates.model_validate({"templates": [{"steps": []}, {"steps": ["understand", "hint"]}]})
  assert [[s.role for s in t.steps] for t in got.templates] == [["understand", "hint"]]
  long = Template.model_validate({"steps": [f"s{i}" for i in range(8)], "deliverable": 8})
  cut = CPA(Scripted(), agent.CPASettings(max_steps=3))._cut(long)
  assert [s.role for s in cut.steps] == ["s0", "s1", "s7"] and cut.tau() == 2


def test_cpa_tutors_dialogues_and_keeps_its_template_across_turns(testdata):
  from pedrl.agents.tutor import AgentTutor
  from pedrl.engine.distribution import SamplingParams
  from pedrl.env import dialogue, party, rollout
  from pedrl.env.problems import Problem
  b = Scripted()
  tutor = AgentTutor(CPA(b), keep_traces=True)
  student = party.load(testdata("qwen2"), SamplingParams(8), scan_layers=False)
  problems = [Problem(id="p0", problem="What is 3 + 4?", answer="7"),
              Problem(id="p1", problem="What is 5 * 6?", answer="30")]
  settings = rollout.RolloutSettings(scenario=dialogue.GUIDED, max_turns=6)
  out = rollout.run(problems, 2, tutor, student, settings, seed=0)
  # The turn limit is checked after tutor turns (paper 003's reference): 4 tutor turns.
  assert [sum(m.role == dialogue.TUTOR for m in d.messages) for d in out] == [4] * 4
  assert all(m.text == "What do you get if you count on from 3?" for d in out
             for m in d.messages if m.role == dialogue.TUTOR)
  # Four dialogues, four tutor turns each: the template of turn 1 serves turns 2 to 4
  # (the state keeps its goal): each dialogue found its memory under its own view.
  assert calls(b)["generate"] == 4 and calls(b)["m1"] == 16
  assert calls(b)["solve"] == 4  # Solved on each dialogue's first turn, then carried in M_t.
  assert [t.reused_template for t in tutor.traces] == [False] * 4 + [True] * 12
  assert "Student: " in b.prompts["m1"][-1]  # The dialogue so far is the task input.


def test_an_unknown_tutor_agent_is_refused_when_the_config_is_read():
  from pedrl.agents.tutor import TutorAgentSettings
  assert TutorAgentSettings("no_m2_sim").agent == "no_m2_sim"
  with pytest.raises(ValueError, match="tutor.agent='cpa2' is not one of"):
    TutorAgentSettings("cpa2")


def test_tables_average_seeds_with_their_spread():
  from pedrl.experiments import cpa as job
  stats = lambda bvr, hard: job.TraceStats(bvr=bvr, bvr_hard=hard, rates={}, repair_share=0.5,
                                           fallbacks=2, calls_per_instance=10.0,
                                           tokens_per_instance=100.0, seconds_per_instance=1.0)
  runs = {"cpa": [job.SeedRun({"pedagogy_following_hard": {"win_rate": 0.4}}, stats(0.1, 0.3)),
                  job.SeedRun({"pedagogy_following_hard": {"win_rate": 0.6}}, stats(0.3, 0.5))],
          "cot": [job.SeedRun({"problem_solving": {"accuracy_strict-match": 0.25}},
                              stats(0.2, 0.2))]}
  text = job.tables(runs)
  # Mean ± population std over the two seeds, in percent: 50 ± 10, BVR† 40 ± 10, BVR 20 ± 10.
  assert ("| cpa | – | 50.0 ± 10.0 | 40.0 ± 10.0 | 20.0 ± 10.0 | 50.0 ± 0.0 | 4 | 10.0 | 100 "
          "| 1.00 |") in text
  assert "| cot | 25.0 | – |" in text


def test_trace_stats_count_bvr_on_the_hard_splits_apart():
  from pedrl.agents.cpa.state import Trace
  from pedrl.eval.records import BenchRecord
  from pedrl.experiments import cpa as job
  ref = {"reference_solution": "3 + 4 = 7\n#### 7"}
  rec = lambda task, response, trace: BenchRecord(
      task, 0, 0, "", response, None, None, context=ref,
      trace=Trace(task, 0, "cpa", **trace).to_dict())  # What an agent's trace holds.
  records = [rec("scaffolding_generation_hard", "The answer is 7.", {"repairs": 1}),
             rec("pedagogy_following_hard", "What is 3 + 4?", {"repairs": 0}),
             rec("scaffolding_generation", "It is 7. Done. Really.", {"fallbacks": {"m1": 2}}),
             rec("problem_solving", "no number", {})]
  from pedrl.eval.counts import Counts
  out = job.trace_stats(records, Counts.from_json({"backbone/calls": 8, "seconds/answer": 2.0,
                                                   "seconds/load": 9.0}))
  # Hard splits: 1 of 2 breaks a rule (states 7); all four: 3 of 4 (7, too long, unparsable).
  assert out.bvr_hard == 0.5 and out.bvr == 0.75
  assert out.repair_share == 0.25 and out.fallbacks == 2
  assert out.calls_per_instance == 2 and out.seconds_per_instance == 0.5


# -- What the agent sees: the prompt, nothing else of the example --------------------------------

def _shown(task_file) -> set:
  """The example fields the task file's prompt renders (Jinja's undeclared variables)."""
  import jinja2
  import jinja2.meta
  return jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(task_file.system_prompt))


def _changed(value):
  """`value` with every digit moved on by one and text added: another answer, label, turn."""
  import re
  if isinstance(value, bool):
    return not value
  if isinstance(value, (int, float)):
    return value + 1
  if isinstance(value, str):
    return re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), value) + " (changed)"
  if isinstance(value, list):
    return [_changed(v) for v in value] + ["changed"]
  return {k: _changed(v) for k, v in value.items()}


def _leaky(examples):
  """A backbone whose deliverable states the problem's answer (the reference's, looked up
  by the problem text in the prompt), and whose solve stage finds that answer."""
  from pedrl.mathtutorbench_rules import constraints
  answers = {x["question"]: constraints.final_answer(x.get("reference_solution")
                                                     or x.get("answer") or "") for x in examples}
  of = lambda prompt: next(a for q, a in answers.items() if q in prompt)
  return Scripted(execute=lambda p, n: {"output": f"So it is {of(p)}. What next?"},
                  solve=lambda p, n: {"solution": "worked out", "answer": of(p)})


def test_the_agent_reads_nothing_its_prompt_does_not_show(shared_data):
  """Every field of every task's examples that the task's prompt does not render (the
  reference solution, GSM8K's answer, labels, the dialogue as JSON, the human turn) is
  changed: the agent's backbone calls and replies stay the same, and its rule against
  stating the answer still fires, judged against the answer its solve stage derived."""
  from pedrl.agents import bench
  from pedrl.mathtutorbench_rules import constraints
  from pedrl.eval.mathtutorbench_harness import runner, tasks
  configs, data = shared_data("mathtutorbench", "configs"), shared_data()
  for task in tasks.TASKS:
    t = tasks.read_task(os.path.dirname(configs), task)
    xs = tasks.examples(task, data)[:2]
    hidden = {k for x in xs for k in x} - _shown(t)
    mutated = [{k: _changed(v) if k in hidden else v for k, v in x.items()} for x in xs]
    assert [t.prompt(x) for x in xs] == [t.prompt(x) for x in mutated], task
    runs = []
    for examples in (xs, mutated):
      b = _leaky(xs)
      recs = runner.answer(task, t, examples, [0, 1], 0, bench.AgentPolicy(CPA(b)))
      runs.append((b.prompts, [r.response for r in recs], [r.trace for r in recs]))
    assert runs[0] == runs[1], task
    if task in tasks.PEDAGOGICAL:  # The reference is hidden, every field of it changed...
      assert "reference_solution" in hidden and "conversation_json" in hidden
      for x, trace in zip(xs, runs[0][2]):  # ...yet a leak is caught, against the answer
        assert trace["answer"] == constraints.final_answer(x["reference_solution"])  # it solved.
        assert trace["steps"][-1]["checks"][0]["rules"] == "breaks: states_answer"
        assert trace["steps"][-1]["repairs"] == 1
      assert len(runs[0][0]["solve"]) == 2  # One solve call per instance, counted.
    else:
      assert hidden and "solve" not in runs[0][0]  # Structured tasks need no answer.


def test_without_an_answer_source_the_leak_rule_is_left_to_the_metric():
  b = Scripted(execute={"output": "The answer is 7."})
  [t] = CPA(b, agent.CPASettings(answer_source="none")).run([inst()])
  assert "solve" not in calls(b) and t.answer is None
  assert t.steps[2].checks[0].rules is None and t.response == b.replies["finish"]["response"]
  with pytest.raises(ValueError, match="cpa.answer_source='oracle' is not one of: solve, none"):
    agent.CPASettings(answer_source="oracle")


class _Student:
  """A scripted student endpoint: the same reply to every tutor turn."""
  max_tokens = 0

  def chat(self, conversations):
    from pedrl.agents.tutor import Reply
    return [Reply("I think it is 12.", "stop") for _ in conversations]


def test_an_agent_tutor_never_reads_the_problems_answer():
  """Dialogues whose problems differ only in their answers (no tutor prompt shows it):
  the agent's calls and the dialogues are the same, and the leak the deliverable makes
  is caught against the answer the solve stage derived from the problem."""
  from pedrl.agents.tutor import AgentTutor
  from pedrl.env import dialogue, party, rollout
  from pedrl.env.problems import Problem
  settings = rollout.RolloutSettings(scenario=dialogue.GUIDED, max_turns=2)
  runs = []
  for answer in ("7", "8"):
    b = Scripted(execute={"output": "The answer is 7."})
    tutor = AgentTutor(CPA(b), keep_traces=True)
    out = rollout.run([Problem(id="p0", problem="What is 3 + 4?", answer=answer)], 2, tutor,
                      party.EndpointParty(_Student(), "student"), settings, seed=0)
    runs.append((b.prompts, [[m.text for m in d.messages] for d in out]))
    assert all(t.answer == "7" for t in tutor.traces)  # Solved from the problem it is shown.
    assert all(t.steps[2].checks[0].rules == "breaks: states_answer" for t in tutor.traces)
    assert calls(b)["solve"] == 2  # Once per dialogue: the next turn reads it from M_t.
  assert runs[0] == runs[1]


# -- Socratic questions on one line -------------------------------------------------------------

QUESTIONS = ("How many eggs does Janet sell?", "How much does she make every day?")


@pytest.mark.parametrize("method", ["cpa", "no_m1", "no_m2_loop", "no_m2_sim", "no_m3_monitor",
                                    "no_m4", "sot"])
def test_every_socratic_question_reaches_the_scored_response(method, shared_data):
  """The socratic task end to end (its task file: "a list of questions on one line", stop at
  a line break): every question the agent wrote is in the one line the harness scores,
  and the BLEU is the harness's rule applied by hand to that line."""
  import sacrebleu
  from pedrl.agents import bench
  from pedrl.eval.mathtutorbench_harness import results, runner, tasks
  configs, data = shared_data("mathtutorbench", "configs"), shared_data()
  t = tasks.read_task(os.path.dirname(configs), "socratic_questioning")
  xs = tasks.examples("socratic_questioning", data)[:2]
  # The deliverable as a backbone often writes it, one per line; without M4 nothing formats
  # it, so there the backbone writes what the contract asks: one line.
  written = " ".join(QUESTIONS) if method == "no_m4" else "- " + "\n- ".join(QUESTIONS)
  b = Scripted(execute={"output": written}, sot_outline={"points": ["eggs sold", "earnings"]},
               sot_expand=lambda p, n: {"text": QUESTIONS[n % 2].replace(" does", "\ndoes")})
  recs = runner.answer("socratic_questioning", t, xs, [0, 1], 0,
                       bench.AgentPolicy(bench.build(method, b, agent.CPASettings())))
  line = " ".join(QUESTIONS)
  for r in recs:
    assert r.response == line and r.prediction == [line]  # parse_lines: the harness's lines.
  if method != "sot":
    assert "all on one line" in b.prompts["execute"][-1]  # The contract asks for one line.
  refs = [[l.split(" ** ")[0] for l in x["answer"].split("\n") if len(l.split(" ** ")) == 2]
          for x in xs]
  by_hand = sum(sacrebleu.sentence_bleu(line, r).score for r in refs) / 2 / 100
  got = results.metrics(recs)["socratic_questioning"]
  assert got["bleu"] == pytest.approx(by_hand) and got["avg_questions"] == 1.0


@pytest.mark.parametrize("field", [dict(methods="cpa,nope"), dict(methods=" , "),
                                   dict(seeds="42,x"), dict(seeds="")])
def test_the_cpa_jobs_methods_and_seeds_are_checked_when_read(field):
  from pedrl.experiments import cpa as cpa_job  # The job's settings, not a run.
  with pytest.raises(ValueError):
    cpa_job.AgentRuns(**field)
  assert cpa_job.AgentRuns().method_names == bench.METHODS


# -- The harness's stop strings -----------------------------------------------------------------

TUTORING_STOPS = ("Student:", "\n\n", "Teacher:")  # The tutoring task files' `stop`.


@pytest.mark.parametrize("text,stop,kept", [
    # The harness keeps what precedes the earliest stop string.
    ("Nice effort so far!\n\nWhat do you get?", TUTORING_STOPS, "Nice effort so far!"),
    ("What do you get? Student: 7", TUTORING_STOPS, "What do you get?"),
    # A reply opening with its turn's label would be cut to nothing: the label goes first.
    ("Teacher: What do you get?", TUTORING_STOPS, "What do you get?"),
    (" Student:  Is it 7?", TUTORING_STOPS, "Is it 7?"),
    ("Teacher: What do you get?", (), "Teacher: What do you get?"),  # No stops, no cut.
    # Only speaker labels: a socratic reply opening with "Problem:" is cut to nothing.
    ("Problem: How many eggs?", ("Problem:", "\n"), ""),
])
def test_the_harness_cut_keeps_what_precedes_the_first_stop(text, stop, kept):
  assert contracts.harness_cut(text, stop) == kept


def test_guidance_is_laid_out_so_the_line_break_stops_end_it_only_at_its_end():
  text = "Nice effort!\n\nWhat do you get\nif you add 3?"
  assert contracts.within_stops(text, ("\n\n", "Student:")) == (
      "Nice effort! What do you get\nif you add 3?")
  assert contracts.within_stops(text, ("\n",)) == "Nice effort! What do you get if you add 3?"
  assert contracts.within_stops(text, ("Student:",)) == text  # No line-break stop: as written.


def _task(shared_data, name):
  from pedrl.eval.mathtutorbench_harness import tasks
  t = tasks.read_task(os.path.dirname(shared_data("mathtutorbench", "configs")), name)
  return t, tasks.examples(name, shared_data())[:2]


@pytest.mark.parametrize("method", ["cpa", "cot"])
@pytest.mark.parametrize("written,scored", [
    ("Teacher: What do you get if you count on from 3?",
     "What do you get if you count on from 3?"),
    ("Nice effort so far!\n\nWhat do you get if you count on from 3?", "Nice effort so far!"),
    ("What do you get if you count on from 3?", None),  # Nothing to cut: nothing counted.
])
def test_every_reply_the_stop_strings_change_is_counted(method, written, scored, shared_data):
  from pedrl.eval.mathtutorbench_harness import runner
  t, xs = _task(shared_data, "scaffolding_generation")
  assert t.stop == TUTORING_STOPS  # The task file's, as the harness applies them.
  b = Scripted(finish={"response": written}, cot={"response": written})
  recs = runner.answer("scaffolding_generation", t, xs, [0, 1], 0,
                       bench.AgentPolicy(bench.build(method, b, agent.CPASettings())))
  if method == "cpa" and "\n\n" in written:  # M4 lays guidance out as one paragraph, so
    written, scored = written.replace("\n\n", " "), None  # the harness scores it whole.
  for r in recs:
    assert r.response == (scored or written)  # The record: what the harness scores.
    assert r.trace["fallbacks"].get("stop", 0) == (scored is not None)
    assert r.trace["response"] == written  # The trace: y_t as the agent wrote it.


def test_the_rule_checks_judge_the_reply_as_the_stop_strings_leave_it(shared_data):
  from pedrl.eval.mathtutorbench_harness import runner
  # A leak after a blank line: M4 lays guidance out as one paragraph, so the harness
  # would read it; the rule breaks and the step is repaired (the cut would have hidden it).
  leak = "What do you get if you count on from 3?\n\nThe answer is 7."
  t, xs = _task(shared_data, "scaffolding_generation")
  recs = runner.answer("scaffolding_generation", t, xs, [0, 1], 0,
                       bench.AgentPolicy(CPA(Scripted(execute={"output": leak}))))
  for r in recs:
    assert r.trace["steps"][2]["checks"][0]["rules"] == "breaks: states_answer"
    assert r.trace["steps"][2]["repairs"] == 1 and "The answer is 7" not in r.response
  # In a dialogue nothing cuts it either: the leak breaks the rule and is repaired.
  [d] = CPA(Scripted(execute={"output": leak})).run([inst(task="tutoring")])
  assert d.steps[2].checks[0].rules == "breaks: states_answer" and d.steps[2].repairs == 1
  # A socratic list opening with "Problem:", a stop string, would be scored empty.
  t, xs = _task(shared_data, "socratic_questioning")
  recs = runner.answer("socratic_questioning", t, xs, [0, 1], 0, bench.AgentPolicy(CPA(
      Scripted(execute={"output": "Problem: How many eggs does Janet sell?"},
               repair={"output": "How many eggs does Janet sell?"}))))
  for r in recs:
    assert r.trace["steps"][2]["checks"][0]["rules"] == "breaks: empty"
    assert r.response == "How many eggs does Janet sell?" and "stop" not in r.trace["fallbacks"]


# -- An agent tutor's draws and memory follow its dialogue, not its batch -----------------------

def _dialogues(tutor, problems, uids, group=2, max_turns=4):
  from pedrl.env import dialogue, party, rollout
  from pedrl.env.problems import Problem
  settings = rollout.RolloutSettings(scenario=dialogue.GUIDED, max_turns=max_turns)
  return rollout.run([Problem(id=p, problem=f"What is {p}?", answer="7") for p in problems],
                     group, tutor, party.EndpointParty(_Student(), "student"), settings, seed=0,
                     problem_uids=uids)


def test_an_agent_tutors_replies_are_the_same_alone_beside_others_and_resumed(testdata):
  """A local backbone sampling at temperature 1: the dialogues of problem "3 + 4" (uid 5)
  get the same tutor replies run alone, run after and beside two other problems by the
  same tutor (a resumed evaluation's later batch), as a local tutor's do."""
  from pedrl.agents import backbone
  from pedrl.agents.tutor import AgentTutor
  from pedrl.engine.distribution import SamplingParams
  from pedrl.env import dialogue, party
  model = party.load(testdata("qwen2"), SamplingParams(8), scan_layers=False)
  make = lambda: AgentTutor(bench.build("cot", backbone.LocalBackbone(
      model, SamplingParams(8, temperature=1.0), seed=42, truncate_prompts=True),
      agent.CPASettings(rounds=1)))
  tutor_turns = lambda out: [[m.text for m in d.messages if m.role == dialogue.TUTOR]
                             for d in out]
  alone = tutor_turns(_dialogues(make(), ["3 + 4"], [5]))
  tutor = make()
  _dialogues(tutor, ["5 * 6"], [0])  # An earlier batch.
  beside = tutor_turns(_dialogues(tutor, ["2 + 2", "3 + 4", "9 - 1"], [4, 5, 6]))
  assert beside[2:4] == alone and len(alone[0]) > 1
  assert alone[0] != alone[1]  # Its two rollouts draw apart: the draws are random.


class _ByInstance(Scripted):
  """Scripted, but M1's goal names the instance uid it was asked for: dialogues whose
  views are the same still leave states of their own."""

  def chat(self, conversations, stage, uids, steps):
    out = []
    for c, u, s in zip(conversations, uids, steps):
      if stage == "m1":
        self.replies["m1"] = dict(STATE, goal=f"goal of instance {u}")
      out += super().chat([c], stage, [u], [s])
    return out


def test_two_identical_dialogues_keep_their_own_memories():
  from pedrl.agents.tutor import AgentTutor
  b = _ByInstance()
  tutor = AgentTutor(CPA(b), keep_traces=True)
  out = _dialogues(tutor, ["3 + 4"], [0], group=2)  # Two rollouts of one problem.
  assert [m.text for m in out[0].messages] == [m.text for m in out[1].messages]
  first, second = tutor.traces[:2], b.prompts["m1"][2:4]  # Each dialogue's turns 1 and 2.
  assert first[0].state.goal != first[1].state.goal
  for t, prompt in zip(first, second):  # Turn 2's M1 sees its own dialogue's M_{t-1}.
    previous = prompt[prompt.index("=== The previous turn ==="):]
    assert f"Goal: {t.state.goal}\n" in previous
  # The same uids in a later run are new dialogues: their first turn has no memory.
  done = len(b.prompts["m1"])
  _dialogues(tutor, ["3 + 4"], [0], group=2)
  assert all("The previous turn" not in p for p in b.prompts["m1"][done:done + 2])


def test_an_agent_tutor_keeps_only_live_dialogues_memories_and_counts_its_work():
  """A dialogue a turn's call leaves out has ended: its M_t is dropped, so a long
  evaluation holds only the live dialogues'. What the agent did reaches the job's counts
  (`tutor_agent/…`) through `stats`: turns, reused templates, fallbacks, backbone calls."""
  from pedrl.agents.tutor import AgentTutor
  from pedrl.env.party import DialogueTurn
  from pedrl.eval.counts import Counts, api_counts
  b = Scripted(generate={"templates": [TEMPLATE]})  # One of K=3 readable: a fallback.
  tutor = AgentTutor(CPA(b))
  view = [{"role": "system", "content": "Problem: What is 3 + 4?"}]
  counts = Counts()
  with api_counts(counts, tutor_agent=tutor):
    tutor.replies([view] * 3, "a tutor turn", [DialogueTurn(u, 0) for u in (0, 1, 2)])
    assert sorted(tutor.memories) == [0, 1, 2]
    tutor.replies([view], "a tutor turn", [DialogueTurn(1, 1)])  # Dialogues 0 and 2 ended.
  assert list(tutor.memories) == [1] and tutor.traces == []  # A job keeps no traces.
  got = counts.to_json()
  assert got["tutor_agent/turns"] == 4 and got["tutor_agent/reused_templates"] == 1
  # GENERATE ran at each dialogue's first turn (the second reused its template).
  assert got["tutor_agent/fallbacks/candidates"] == 3, got
  assert got["tutor_agent/calls"] == sum(v for k, v in b.stats.items() if k.startswith("calls/"))
