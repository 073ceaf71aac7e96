"""The MathTutorBench job on the testdata tutor and on an endpoint (sharded), policies,
and the Ped-RM win rate against transformers."""
import json
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest

from tests.helpers import jobs, reference
from tests.helpers.chat_server import ChatServer
from pedrl.clients import openai_compat
from pedrl.env import chat
from pedrl.eval import pedrm, shards
from pedrl.eval.counts import Counts
from pedrl.eval.mathtutorbench_harness import results, runner, tasks, win_rate
from pedrl.tokenizer import load_tokenizer

# pedrl's tiny benchmark (testdata/make_mathtutorbench.py): the tiny config's task files and data.
DATA = os.path.join(jobs.ROOT, "testdata", "mathtutorbench")
GENERATION_KEYS = {"problem", "reference_solution", "dialog_history", "dialog_formatted",
                   "ground_truth_response", "generated_teacher_utterance"}


def _run(workdir, *more):
  cmd = [sys.executable, "-m", "pedrl.experiments.mathtutorbench",
         "--config=experiments/mathtutorbench.py:tiny", f"--workdir={workdir}", *more]
  return subprocess.run(cmd, cwd=jobs.ROOT, env=jobs.env(), capture_output=True, text=True,
                        timeout=600)


@pytest.mark.job
def test_tiny_writes_nine_numbers_responses_and_generations(tmp_path, short_context):
  # The tiny models with a short context (tests/conftest.py): the task prompts are cut either way.
  short = (f"--config.tutor.path={short_context('qwen2')}",
           f"--config.pedrm.path={short_context('qwen2_seqcls')}")
  r = _run(tmp_path, *short)
  assert r.returncode == 0, r.stderr[-3000:]
  config = json.loads((tmp_path / "config.json").read_text())  # From a clone: its testdata.
  assert (config["benchmark_dir"], config["data_dir"]) == (
      os.path.join(DATA, "mathtutorbench"), DATA)
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
  # One short line per task in the log (results.json has every metric).
  lines = [x for x in r.stderr.splitlines() if any(f" {t}: " in x for t in tasks.TASKS)]
  assert len(lines) == 9 and all(len(x) < 100 and "{" not in x for x in lines), lines
  # BVR beside the nine numbers, for a plain model too: per task, and in the table.
  assert all(0 <= m["bvr"] <= 1 and "violations/states_answer" in m for m in results.values())
  head, _, row = (tmp_path / "results.md").read_text().splitlines()
  assert head.endswith("| BVR | BVR† (hard) |") and re.search(r"\| \d+\.\d \| \d+\.\d \|$", row)
  again = _run(tmp_path, *short)  # Every batch is there: nothing is asked again, nothing loads.
  assert again.returncode == 0 and "9 of 9 batches already in" in again.stderr
  assert json.loads((tmp_path / "results.json").read_text())["problem_solving"]["examples"] == 4


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
  ours, baselines = win_rate.pair_scores(rm, [example] * 3, replies, system)
  np.testing.assert_allclose(ours, chosen, atol=1e-4, rtol=0)
  np.testing.assert_allclose(baselines, [human] * 3, atol=1e-4, rtol=0)
  m = win_rate.win_rate(ours, baselines)
  assert m["win_rate"] == pytest.approx(np.mean([c > human for c in chosen]))
  assert m["mean_margin"] == pytest.approx(np.mean(chosen) - human, abs=1e-4)
  assert m["baseline_score"] == pytest.approx(human, abs=1e-4) and m["total_samples"] == 3
  # In bfloat16 (the MathTutorBench job's dtype, as the benchmark's script loads the RM),
  # scores are bfloat16 values, as transformers' bfloat16 model returns them: replies that
  # tie there tie here, and a tie is no win.
  rm16 = pedrm.PedRM(pedrm.PedRMSettings(path=path, format="mathtutorbench", dtype="bfloat16",
                                         system_prompt_file=str(_write(tmp_path, system))))
  ours16, _ = win_rate.pair_scores(rm16, [example] * 3, replies, system)
  as_bf16 = np.asarray(ours16, np.float32).astype("bfloat16").astype(float)
  np.testing.assert_array_equal(as_bf16, ours16)
  np.testing.assert_allclose(ours16, chosen, rtol=0, atol=0.05)
  # 1 and 1 + 2^-10 differ in float32 and are one bfloat16 value: a win there, a tie here.
  apart = [1.0, 1.0 + 2 ** -10]
  assert pedrm.in_dtype(apart, "float32") == apart
  assert win_rate.win_rate(*([x] for x in pedrm.in_dtype(apart[::-1], "float32")))[
      "win_rate"] == 1.0
  assert win_rate.win_rate(*([x] for x in pedrm.in_dtype(apart[::-1], "bfloat16")))[
      "win_rate"] == 0.0


def _write(tmp_path, text):
  path = tmp_path / "system.txt"
  path.write_text(text)
  return path


@pytest.mark.job
def test_bad_inputs_stop_before_loading(tmp_path):
  for args, message in (
      ((f"--config.benchmark_dir={tmp_path}",), "must be a MathTutorBench checkout"),
      ((f"--config.data_dir={tmp_path}",), "does not exist: task problem_solving reads its data"),
      (("--config.tasks=problem_solving,socratic",), "unknown MathTutorBench task 'socratic'"),
      ((f"--config.pedrm.path={tmp_path}",), "is not a checkpoint directory (no config.json)")):
    r = _run(tmp_path / "out", *args)
    assert r.returncode == 1 and message in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()  # Stopped before writing or loading anything.


def test_a_tasks_summary_is_its_leaderboard_number_in_one_line():
  m = {"accuracy_strict-match": 0.25, "accuracy_flexible-extract": 0.25, "examples": 4,
       "prompts_cut": 0, "seconds": 1.234, "examples_per_s": 3.24}
  assert results.summary("problem_solving", m) == (
      "problem_solving: accuracy_strict-match 25.0% (4 examples, 1.2 s)")
  assert results.summary("pedagogy_following_hard", {"match": 0.5, "examples": 2,
                                                     "prompts_cut": 2}) == (
      "pedagogy_following_hard: win_rate – (2 examples, 2 prompts cut)")  # No Ped-RM.


def test_batches_never_span_a_task():
  assert shards.batches([3, 2], 2, 0, 1) == [(0, range(0, 2)), (1, range(2, 3)),
                                             (2, range(3, 5))]
  assert [j for j, _ in shards.batches([3, 2], 2, 0, 2)] == [0, 2]
  assert shards.batches([3, 2], 2, 1, 2) == [(1, range(2, 3))]
  assert shards.batches(5, 2, 0, 1) == shards.batches([5], 2, 0, 1)


class _RM:
  """A stand-in reward model: a reply's score is its length, the human turn's is 10."""
  system_prompt, cut = "judge", 0

  def score(self, chats):
    return [10.0 if c[-1]["content"] == "human says hi" else float(len(c[-1]["content"]))
            for c in chats]


def test_any_policy_answers_and_is_scored():
  """A policy is any callable; records carry the parse and the Ped-RM pair, and the
  metrics come from the records alone."""
  data = DATA
  ps = tasks.examples("problem_solving", data)[:3]
  t = tasks.read_task(os.path.join(DATA, "mathtutorbench"), "problem_solving")
  asked = []

  def policy(prompts, stop, uids):
    asked.append((len(prompts), tuple(stop), list(uids)))
    return [f"So the answer is {t.target(x)}." for x in ps[uids[0]:uids[0] + len(prompts)]], [
        False] * len(prompts)
  recs = (runner.answer("problem_solving", t, ps[:2], [0, 1], 0, policy) +
          runner.answer("problem_solving", t, ps[2:], [2], 1, policy))
  assert asked == [(2, ("Question:",), [0, 1]), (1, ("Question:",), [2])]
  assert [r.prediction for r in recs] == [t.target(x) for x in ps]
  bridge = [dict(x, ground_truth_response={"user": "Teacher", "text": "human says hi"})
            for x in tasks.examples("scaffolding_generation", data)[:3]]
  tb = tasks.read_task(os.path.join(DATA, "mathtutorbench"), "scaffolding_generation")
  replies = ["short", "a reply of 21 letters", "what is twelve minus 3?"]
  recs += runner.answer("scaffolding_generation", tb, bridge, [0, 1, 2], 2,
                        lambda p, s, u: (replies, [False] * 3), _RM())
  got = results.metrics(list(reversed(recs)),
                        Counts.from_json({"seconds/problem_solving": 2.0}))
  assert got["problem_solving"]["accuracy_strict-match"] == 1.0
  assert got["problem_solving"]["examples_per_s"] == 1.5
  sg = got["scaffolding_generation"]
  assert sg["win_rate"] == pytest.approx(2 / 3)  # 21 and 23 letters beat 10; 5 does not.
  assert sg["mean_margin"] == pytest.approx((5 + 21 + 23) / 3 - 10)
  assert sg["match"] == pytest.approx(1 / 3)  # Only the last reply is a question.
  assert recs[-1].context["ground_truth_response"]["text"] == "human says hi"


def _client(url, mode):
  return runner.EndpointPolicy(openai_compat.OpenAIBackend(openai_compat.EndpointSettings(
      model="scripted", base_url=url, api_key_env="PEDRL_TEST_KEY", temperature=0.0,
      max_tokens=64, max_tries=1)), runner.BenchSettings(mode=mode))


@pytest.mark.job
def test_endpoint_policy_asks_as_the_harness(monkeypatch):
  """completion: the prompt as raw text on /v1/completions, the reply stripped; chat: the
  prompt as the only, system, message, the reply as it comes; both send the task's stop
  strings and cut at them too (a server may ignore them)."""
  monkeypatch.setenv("PEDRL_TEST_KEY", "sk-test")
  monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
  server = ChatServer([], reply=lambda body: "  How many apples? \nStudent: 7")
  try:
    raw, cut = _client(server.url, "completion")(["Problem: apples"], ["Student:"], [0])
    chat, _ = _client(server.url, "chat")(["Problem: apples"], ["Student:"], [0])
  finally:
    server.close()
  assert raw == ["How many apples?"] and cut == [False]
  assert chat == ["  How many apples? \n"]
  (completion, _), (conversation, _) = server.bodies
  assert server.paths == ["/v1/completions", "/v1/chat/completions"]
  assert completion["prompt"] == "Problem: apples" and completion["stop"] == ["Student:"]
  assert completion["temperature"] == 0.0 and completion["max_tokens"] == 64
  assert conversation["messages"] == [{"role": "system", "content": "Problem: apples"}]
  assert conversation["stop"] == ["Student:"]


def _endpoint_job(workdir, url, *more):
  env = dict(jobs.env(), PEDRL_TEST_KEY="sk-test", NO_PROXY="127.0.0.1,localhost")
  return subprocess.run(
      [sys.executable, "-m", "pedrl.experiments.mathtutorbench",
       "--config=experiments/mathtutorbench.py:tiny", f"--workdir={workdir}",
       "--config.tutor.endpoint.model=scripted", f"--config.tutor.endpoint.base_url={url}",
       "--config.tutor.endpoint.api_key_env=PEDRL_TEST_KEY",
       "--config.tasks=problem_solving,mistake_location,pedagogy_following",
       "--config.limit=3", "--config.batch_examples=2", *more],
      cwd=jobs.ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.job
def test_endpoint_shards_merge_into_the_unsharded_run(tmp_path):
  # The reply depends on the prompt only, ignores the stop strings (cut client-side). The
  # endpoint serves no chat API: completion mode (the harness's default) asks text
  # completions alone, its preflight included.
  server = ChatServer([], reply=lambda body: (
      f" Step {len(body.get('prompt', '')) % 4}. Is it {len(body.get('prompt', '')) % 9}?"
      "\nStudent: more\nQuestion: next"), chat=False)
  try:
    whole = _endpoint_job(tmp_path / "whole", server.url)
    assert whole.returncode == 0, whole.stderr[-3000:]
    first = _endpoint_job(tmp_path / "split", server.url, "--config.eval.num_shards=2")
    assert first.returncode == 0 and "not merged yet" in first.stderr, first.stderr[-3000:]
    assert not (tmp_path / "split" / "results.json").exists()
    second = _endpoint_job(tmp_path / "split", server.url, "--config.eval.num_shards=2",
                           "--config.eval.shard=1")
    assert second.returncode == 0, second.stderr[-3000:]
    assert server.paths and not any("chat" in p for p in server.paths)
  finally:
    server.close()
  assert "| Problem solving |" in second.stdout
  for task in ("problem_solving", "mistake_location", "pedagogy_following"):
    a, b = ((tmp_path / w / f"responses-{task}.jsonl").read_text() for w in ("whole", "split"))
    assert a == b and len(a.splitlines()) == 3, task
  rows = [json.loads(x) for x in
          (tmp_path / "whole" / "responses-pedagogy_following.jsonl").read_text().splitlines()]
  assert [r["index"] for r in rows] == [0, 1, 2]
  assert all(re.fullmatch(r"Step \d\. Is it \d\?", r["response"]) for r in rows)  # Cut, stripped.
  # An endpoint's BVR: every reply holds a number, so problem solving and mistake location
  # read all three; pedagogy following's replies are two sentences, one question each.
  got = json.loads((tmp_path / "whole" / "results.json").read_text())
  assert got["problem_solving"]["bvr"] == 0 and got["mistake_location"]["bvr"] == 0
  assert got["pedagogy_following"]["violations/several_questions"] == 0
  assert got["pedagogy_following"]["violations/too_long"] == 0
  drop = lambda m: {t: {k: v for k, v in x.items() if k not in ("seconds", "examples_per_s")}
                    for t, x in m.items()}
  assert drop(json.loads((tmp_path / "whole" / "results.json").read_text())) == drop(
      json.loads((tmp_path / "split" / "results.json").read_text()))
  gens = json.loads((tmp_path / "split" / "generations-model-pedagogy_following.json").read_text())
  assert [g["generated_teacher_utterance"] for g in gens] == [r["response"] for r in rows]


def test_model_policy_tokenizes_each_mode_as_the_harness_server(testdata):
  """completion: the raw prompt as a vLLM server tokenizes it (the tokenizer's own special
  tokens, no chat markup); chat: the prompt as the only, system, message with the
  generation prompt.
  A prompt too long for the context is an error, or cut at its start when allowed."""
  tok = load_tokenizer(testdata("llama3"))
  prompt = "Question: Ana has 3 apples and buys 4. How many?\nAnswer:"
  party = types.SimpleNamespace(chat=chat.ChatFormat(tok), sampler=types.SimpleNamespace(
      cfg=types.SimpleNamespace(max_position_embeddings=64)))
  ids = lambda mode, **kw: runner.ModelPolicy(party, runner.BenchSettings(
      mode=mode, max_new_tokens=16, **kw)).ids(prompt)
  raw, cut = ids("completion")
  assert raw == tok(prompt)["input_ids"] and tok.decode(raw) == prompt and not cut
  chatted, _ = ids("chat")
  want = tok.apply_chat_template([{"role": "system", "content": prompt}],
                                 add_generation_prompt=True, tokenize=True, return_dict=True)
  assert chatted == list(want["input_ids"]) and chatted != raw
  party.sampler.cfg.max_position_embeddings = len(raw) + 16 - 3
  with pytest.raises(ValueError, match="exceeds the model's context"):
    ids("completion")
  short, cut = ids("completion", truncate_prompts=True)
  assert cut and short == raw[3:]
