"""The MathTutorBench job on the testdata tutor, and the Ped-RM win rate against transformers."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import jobs
import reference
from pedrl.eval import pedrm
from pedrl.eval.mathtutorbench import tasks, win_rate

SHARED = os.path.join(jobs.ROOT, "..", "shared", "data")
GENERATION_KEYS = {"problem", "reference_solution", "dialog_history", "dialog_formatted",
                   "ground_truth_response", "generated_teacher_utterance"}


def _run(workdir, *more):
  cmd = [sys.executable, "-m", "pedrl.experiments.mathtutorbench",
         "--config=experiments/mathtutorbench.py:tiny", f"--workdir={workdir}", *more]
  return subprocess.run(cmd, cwd=jobs.ROOT, env=jobs.env(), capture_output=True, text=True,
                        timeout=600)


@pytest.fixture
def shared():
  if not os.path.isdir(os.path.join(SHARED, "mathtutorbench", "configs")):
    pytest.skip("../shared/data/mathtutorbench not present")


def test_tiny_writes_nine_numbers_responses_and_generations(tmp_path, shared):
  r = _run(tmp_path)
  assert r.returncode == 0, r.stderr[-3000:]
  results = json.loads((tmp_path / "results.json").read_text())
  assert set(results) == set(tasks.TASKS)
  for task, m in results.items():
    lines = (tmp_path / f"responses-{task}.jsonl").read_text().splitlines()
    assert len(lines) == m["examples"] == 4
    row = json.loads(lines[0])
    assert set(row) >= {"index", "prompt", "response", "target", "prediction"}
    assert row["response"].strip(), task  # The model answered: visible text.
    if task in tasks.PEDAGOGICAL:
      assert 0 <= m["win_rate"] <= 1 and m["total_samples"] == 4 and "match" in m
      gens = json.loads((tmp_path / f"generations-model-{task}.json").read_text())
      assert len(gens) == 4 and all(set(g) == GENERATION_KEYS for g in gens)
      assert gens[0]["ground_truth_response"]["user"] == "Teacher"
  assert "f1" in results["solution_correctness"] and "bleu" in results["socratic_questioning"]
  assert "| Problem solving |" in r.stdout
  again = _run(tmp_path)  # Every task's responses are there: nothing is asked again.
  assert again.returncode == 0 and json.loads((tmp_path / "results.json").read_text())[
      "problem_solving"]["examples"] == 4


def test_win_rate_scores_equal_transformers(testdata, tmp_path):
  example = {"question": "Ana has 3 apples and buys 4. How many?", "reference_solution": "3+4=7\n 7",
             "conversation_json": [{"user": "Teacher", "text": "What do you know?"},
                                   {"user": "Student", "text": "I think it is 12."}],
             "ground_truth_response": {"user": "Teacher", "text": "How did you get 12?"}}
  replies = ["Can you count them again?", "It is 7.", "What does buying 4 more do?"]
  system = "Rate the teacher's next turn."
  path = testdata("qwen2_seqcls")
  rm = pedrm.PedRM(pedrm.PedRMSettings(path=path, format="mathtutorbench",
                                       system_prompt_file=str(_write(tmp_path, system))))
  hf, tok = reference.load(path, "seq_cls"), rm.chat.tokenizer

  def torch_score(reply):
    ids = tok(tok.apply_chat_template(win_rate.chat(example, reply, system), tokenize=False),
              add_special_tokens=False)["input_ids"]
    return float(reference.forward(hf, [ids], [[1] * len(ids)])[0, 0])
  chosen = [torch_score(r) for r in replies]
  human = torch_score("How did you get 12?")
  ours = rm.score([win_rate.chat(example, r, system) for r in replies])
  np.testing.assert_allclose(ours, chosen, atol=1e-4, rtol=0)
  m = win_rate.win_rate(rm, [example] * 3, replies, system)
  assert m["win_rate"] == pytest.approx(np.mean([c > human for c in chosen]))
  assert m["mean_margin"] == pytest.approx(np.mean(chosen) - human, abs=1e-4)
  assert m["baseline_score"] == pytest.approx(human, abs=1e-4) and m["total_samples"] == 3


def _write(tmp_path, text):
  path = tmp_path / "system.txt"
  path.write_text(text)
  return path


def test_bad_inputs_stop_before_loading(tmp_path, shared):
  for args, message in (
      ((f"--config.benchmark_dir={tmp_path}",), "must be a MathTutorBench checkout"),
      ((f"--config.data_dir={tmp_path}",), "does not exist: task problem_solving reads its data"),
      (("--config.tasks=problem_solving,socratic",), "unknown MathTutorBench task 'socratic'")):
    r = _run(tmp_path / "out", *args)
    assert r.returncode == 1 and message in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()  # Stopped before writing or loading anything.
