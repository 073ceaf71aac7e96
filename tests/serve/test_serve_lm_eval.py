"""lm-evaluation-harness's `local-completions` model against a pedrl server, offline:
a log-likelihood (multiple choice) task and a generate-until task from local JSONL."""
import json
import math

import pytest

pytest.importorskip("fastapi")
lm_eval = pytest.importorskip("lm_eval")
from lm_eval import tasks as lm_tasks

from tests.serve.test_serve import MODEL, NAME
from pedrl.serve import server

pytestmark = pytest.mark.job

ROWS = [
    {"question": "2 + 2 =", "choices": [" 4", " 5", " 22"], "answer": 0},
    {"question": "The capital of France is", "choices": [" Paris", " Rome"], "answer": 0},
    {"question": "3 x 3 =", "choices": [" 6", " 9", " 33"], "answer": 1},
]

TASK = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
"""
CHOICE = """output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
metric_list:
  - metric: acc
"""
GENERATE = """output_type: generate_until
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{choices[answer]}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 8
  do_sample: false
metric_list:
  - metric: exact_match
"""


def test_local_completions_runs_loglikelihood_and_generate_until(tmp_path, monkeypatch):
  monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
  monkeypatch.setenv("HF_HUB_OFFLINE", "1")
  data = tmp_path / "rows.jsonl"
  data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
  for name, body in (("pedrl_choice", CHOICE), ("pedrl_generate", GENERATE)):
    (tmp_path / f"{name}.yaml").write_text(TASK.format(name=name, data=data) + body.format())
  app, scheduler = server.build(MODEL, served_name=NAME,
                                options=server.Options(max_num_seqs=4, warmup=False))
  url, stop = server.start(app)
  try:
    out = lm_eval.simple_evaluate(
        model="local-completions",
        model_args=(f"model={NAME},base_url={url}/completions,tokenizer_backend=huggingface,"
                    f"tokenizer={MODEL},max_length=1024,num_concurrent=4,max_retries=1"),
        tasks=["pedrl_choice", "pedrl_generate"],
        task_manager=lm_tasks.TaskManager(include_path=str(tmp_path)), log_samples=True)
  finally:
    stop()
    scheduler.close()
  acc = out["results"]["pedrl_choice"]["acc,none"]
  match = out["results"]["pedrl_generate"]["exact_match,none"]
  assert 0 <= acc <= 1 and 0 <= match <= 1
  # Every choice got a finite log-likelihood from the server's echoed log-probs.
  lls = [ll for s in out["samples"]["pedrl_choice"] for ll, _ in s["filtered_resps"]]
  assert len(lls) == sum(len(r["choices"]) for r in ROWS)
  assert all(math.isfinite(float(x)) and float(x) < 0 for x in lls)
  assert len(out["samples"]["pedrl_generate"]) == len(ROWS)
  assert scheduler.metrics.registry.get_sample_value("pedrl_generation_tokens_total") > 0
