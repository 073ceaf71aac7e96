"""Real text through every path (the real tier): SmolLM2-135M-Instruct as tutor and student in
the tiny rollout, the tiny evaluation and one MathTutorBench task, and served through the
openai client with greedy text equal to transformers' `generate`. SmolLM2 is ChatML with
`<|im_end|>` as its end of turn and has no thinking: messages carry no template tokens, its
turns end at `<|im_end|>`, and the runs turn thinking off. Token counts are small: the tier
must stay cheap on two cores."""
import json
import subprocess

import openai
import pytest

from tests.helpers import jobs
from pedrl.env import dialogue
from pedrl.eval import records as records_lib

pytestmark = [pytest.mark.real, pytest.mark.job]

TEMPLATE = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>")
# Both parties SmolLM2, no thinking, one problem, two short turns each. Scanned layers: one
# compiled layer body, where the tiny configs' unrolled 30 layers compile for minutes.
PARTIES = ("--config.scan_layers=True", "--config.rollout.thinking=False",
           "--config.rollout.max_turns=4",
           "--config.tutor.max_new_tokens=24", "--config.student.max_new_tokens=24",
           "--config.solve.max_new_tokens=16", "--config.problems.limit=1",
           "--config.batch_problems=1")


def _run(module, workdir, smollm2, *overrides):
  cmd = jobs.cmd(module, workdir, f"--config.tutor.path={smollm2}",
                 f"--config.student.path={smollm2}", *overrides)
  r = subprocess.run(cmd, cwd=jobs.ROOT, env=jobs.env(optimized=True), capture_output=True,
                     text=True, timeout=900)
  assert r.returncode == 0, r.stderr[-3000:]
  return r


def _clean(text: str) -> bool:
  return not any(t in text for t in TEMPLATE)


def _check_messages(messages):
  """Clean text, no thinking, words. (A sampled 24-token turn may be cut before its
  <|im_end|>; the server's greedy reply checks the turn's end deterministically.)"""
  assert messages and all(_clean(m.text) and _clean(m.raw) for m in messages)
  assert all(not m.thinking for m in messages)  # Thinking off: none asked for, none found.
  assert sum(any(c.isalpha() for c in m.text) for m in messages) >= len(messages) // 2


def test_tiny_rollout_with_smollm2_as_tutor_and_student(smollm2, tmp_path):
  _run("rollout", tmp_path, smollm2, *PARTIES, "--config.solve.k=1")
  records = dialogue.load_jsonl(str(tmp_path / "dialogues.jsonl"))
  assert len(records) == 2  # One problem x G=2.
  _check_messages([m for d in records for m in d.messages])
  assert all(d.r_sol is not None for d in records)


def test_tiny_evaluation_with_smollm2(smollm2, tmp_path):
  # Two dialogues of one problem: the rollout's rows, so its programs are reused.
  _run("evaluate", tmp_path, smollm2, *PARTIES, "--config.solve.k=1")
  records = records_lib.load(str(tmp_path / "eval_dialogues.jsonl"))
  assert len(records) == 2
  _check_messages([m for r in records for m in r.dialogue.messages])
  assert json.loads((tmp_path / "metrics.json").read_text())["n_problems"] == 1


def test_one_mathtutorbench_task_with_smollm2(smollm2, tmp_path):
  cmd = jobs.cmd("mathtutorbench", tmp_path, f"--config.tutor.path={smollm2}",
                 "--config.scan_layers=True", "--config.tasks=socratic_questioning",
                 "--config.limit=2",
                 "--config.mode=chat", "--config.max_new_tokens=40")
  r = subprocess.run(cmd, cwd=jobs.ROOT, env=jobs.env(optimized=True), capture_output=True,
                     text=True, timeout=900)
  assert r.returncode == 0, r.stderr[-3000:]
  rows = [json.loads(x) for x in
          (tmp_path / "responses-socratic_questioning.jsonl").read_text().splitlines()]
  assert len(rows) == 2
  for row in rows:
    assert row["response"].strip() and _clean(row["response"]), row["response"]
  assert "bleu" in json.loads((tmp_path / "results.json").read_text())["socratic_questioning"]


def test_served_chat_and_stream_equal_transformers_greedy_text(smollm2):
  import torch
  import transformers
  from pedrl import cli
  from pedrl.serve import server
  messages = [{"role": "user", "content": "What is 7 times 8? Answer in one sentence."}]
  tok = transformers.AutoTokenizer.from_pretrained(smollm2)
  model = transformers.AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32)
  ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                return_dict=True)
  with torch.no_grad():
    out = model.generate(**ids, max_new_tokens=32, do_sample=False)
  new = out[0, ids["input_ids"].shape[1]:].tolist()
  assert tok.eos_token_id in new  # The reply ends at <|im_end|> within the budget.
  want = tok.decode(new[:new.index(tok.eos_token_id)])

  cli.use_compilation_cache(cli.default_cache_dir())
  # Scanned layers and no warm-up: only the programs these two requests need compile.
  app, scheduler = server.build(smollm2, served_name="smollm2", scan_layers=True,
                                options=server.Options(max_num_seqs=2, max_model_len=256,
                                                       max_queue=8, warmup=False))
  url, stop = server.start(app)
  try:
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
    reply = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=32,
                                           temperature=0)
    assert reply.choices[0].message.content == want
    assert reply.choices[0].finish_reason == "stop" and _clean(want)
    chunks = list(client.chat.completions.create(model="smollm2", messages=messages,
                                                 max_tokens=32, temperature=0, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    assert chunks[-1].choices[0].finish_reason == "stop"
  finally:
    stop()
    scheduler.close()
