r"""MathTutorBench (papers 003 table 4, 000 tables II/IV, 002 tables 2-3) on a tutor.

  python -m pedrl.experiments.mathtutorbench --config=experiments/mathtutorbench.py:tiny --workdir=/tmp/mtb
  python -m pedrl.experiments.mathtutorbench --config=experiments/mathtutorbench.py:paper --workdir=/runs/mtb_ped \
      --config.tutor.path=/ckpt/tutor --config.benchmark_dir=/src/mathtutorbench --config.data_dir=/data/mtb \
      --config.pedrm.path=/models/Qwen2.5-1.5B-pedagogical-rewardmodel --config.pedrm.system_prompt_file=rm_system.txt

Variants: `paper` (the harness's settings: greedy, 2048 new tokens, every
example of the nine tasks, its default completion mode) and `tiny` (the
testdata tutor and classifier, 4 examples a task, 24 new tokens, prompts cut to
the tiny context, on testdata/mathtutorbench: task files and data written for
pedrl in the benchmark's format). A paper run reads the official files:
`benchmark_dir` is a checkout of github.com/eth-lre/mathtutorbench (commit
54b62137c717 read; its configs/*.yaml are the nine task files), `data_dir` holds
gsm8k/test.jsonl and gsm8k/test_socratic.jsonl (GSM8K's main and socratic test
splits, github.com/openai/grade-school-math), stepverify/dataset.json
(github.com/eth-lre/verify-then-generate dataset/dataset.json) and
mathtutorbench/mathdial_bridge.json, mathdial_bridge_hard.json (the checkout's
datasets/); a missing one stops the job with that pointer. The model under
test is `tutor.path`, a training run (`tutor.workdir`, `tutor.step`) or an
endpoint (`tutor.endpoint.model`, `base_url`, `api_key_env`); `mode=chat` asks
as the harness's is_chat=True does.
Shards: `--config.eval.shard=I --config.eval.num_shards=N` (launch/eval_array.sbatch).
"""
from pedrl.jobs import base_config, variants

ENTRY_POINT = "pedrl.experiments.mathtutorbench"  # The job it configures; others refuse it.
VARIANTS = dict(tiny=bool)
# One line per variant, for `python -m pedrl.tools.configs`.
VARIANT_HELP = {
    "paper": "the harness's settings: greedy, 2048 new tokens, every example of the nine tasks",
    "tiny": "the testdata tutor and classifier, 4 examples a task, 24 new tokens",
}


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  # The harness's decoding: greedy, 2048 new tokens.
  c = base_config.bench_config(v.tiny, temperature=0.0, top_p=1.0, max_new_tokens=2048)
  if v.tiny:
    c.update(limit=4, batch_examples=4, max_new_tokens=24)
  return c
