r"""CPA (paper 002): tables 2 and 3 on MathTutorBench, CPA's ablations and the prompting baselines.

  python -m pedrl.experiments.cpa --config=experiments/cpa.py:tiny --workdir=/tmp/cpa
  python -m pedrl.experiments.cpa --config=experiments/cpa.py:paper --workdir=/runs/cpa_7b \
      --config.tutor.path=/ckpt/Qwen2.5-7B-Instruct --config.benchmark_dir=/src/mathtutorbench \
      --config.data_dir=/data/mtb --config.pedrm.path=/models/Qwen2.5-1.5B-pedagogical-rewardmodel \
      --config.pedrm.system_prompt_file=rm_system.txt

Variants: `paper` (section 4.4: temperature 0.7, top-p 0.95, 1024 new tokens per
call, K=3, J=3, 3-step dry runs, 2 repairs; seeds 42, 43, 44; every method) and
`tiny` (the testdata backbone and classifier, 2 examples a task, 24 new tokens,
seed 42, prompts cut to the tiny context; on testdata/mathtutorbench, the tiny
benchmark written for pedrl). The benchmark's official files come as for
experiments/mathtutorbench.py (`benchmark_dir`, `data_dir`). The backbone is
`tutor.path`, a training run (`tutor.workdir`) or an endpoint
(`tutor.endpoint.model`, e.g. gpt-4o-2024-08-06 for CPA-GPT-4o). `agents.methods`
picks the rows: cpa, no_m1, no_m2_loop, no_m2_sim, no_m3_monitor, no_m4, cot,
plan_solve, sot.
"""
from pedrl.agents.settings import AgentRuns, CPASettings
from pedrl.jobs import base_config, settings, variants

ENTRY_POINT = "pedrl.experiments.cpa"  # The job it configures; others refuse it.
VARIANTS = dict(tiny=bool)
# One line per variant, for `python -m pedrl.tools.configs`.
VARIANT_HELP = {
    "paper": "section 4.4: temperature 0.7, top-p 0.95, K 3, J 3; seeds 42-44; every method",
    "tiny": "the testdata backbone and classifier, 2 examples a task, seed 42",
}


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  # Paper 002 section 4.4's decoding for every backbone call.
  c = base_config.bench_config(v.tiny, temperature=0.7, top_p=0.95, max_new_tokens=1024)
  c.cpa = settings.section(CPASettings)
  c.agents = settings.section(AgentRuns)
  if v.tiny:
    c.tutor.max_new_tokens = 24
    c.update(limit=2, batch_examples=2)
    c.agents.update(seeds="42", truncate_prompts=True)
    c.cpa.update(rounds=2)
  return c
