r"""MathTutorBench (papers 003 table 4, 000 tables II/IV, 002 tables 2-3) on a tutor.

  python -m pedrl.experiments.mathtutorbench --config=experiments/mathtutorbench.py:tiny --workdir=/tmp/mtb
  python -m pedrl.experiments.mathtutorbench --config=experiments/mathtutorbench.py:paper --workdir=/runs/mtb_ped \
      --config.tutor.path=/ckpt/tutor --config.benchmark_dir=/src/mathtutorbench --config.data_dir=/data/mtb \
      --config.pedrm.path=/models/Qwen2.5-1.5B-pedagogical-rewardmodel --config.pedrm.system_prompt_file=rm_system.txt

Variants: `paper` (the harness's settings: greedy, 2048 new tokens, every
example of the nine tasks, its default completion mode) and `tiny` (the
testdata tutor and classifier, 4 examples a task, 24 new tokens, prompts cut to
the tiny context; reads ../shared/data). The task files come from a
MathTutorBench checkout (`benchmark_dir`/configs), the data from `data_dir` laid
out as ../shared/data. The model under test is `tutor.path`, a training run
(`tutor.workdir`, `tutor.step`) or an endpoint (`tutor.endpoint.model`,
`base_url`, `api_key_env`); `mode=chat` asks as the harness's is_chat=True does.
Shards: `--config.eval.shard=I --config.eval.num_shards=N` (launch/eval_array.sbatch).
"""
from pedrl.env import party
from pedrl.eval import pedrm
from pedrl.eval.mathtutorbench import runner
from pedrl.eval.shards import ShardSettings, TutorRun
from pedrl.experiments import settings, variants

VARIANTS = dict(tiny=bool)


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  c = settings.section(settings.JobSettings, runner.BenchSettings)
  c.mesh = settings.section(settings.MeshSettings)
  c.tutor = settings.section(party.PartySettings, TutorRun, path=None, temperature=0.0, top_k=0,
                             top_p=1.0, max_new_tokens=2048)
  c.tutor.endpoint = settings.section(party.EndpointSettings)
  c.eval = settings.section(ShardSettings)
  c.pedrm = settings.section(pedrm.PedRMSettings, format="mathtutorbench")
  if v.tiny:
    c.scan_layers = False
    c.tutor.path = "testdata/models/qwen2"
    c.update(benchmark_dir="../shared/data/mathtutorbench", data_dir="../shared/data",
             limit=4, batch_examples=4, max_new_tokens=24, truncate_prompts=True)
    # The testdata classifier, with a stand-in system prompt written for pedrl (the real
    # run's is the benchmark's, given by path).
    c.pedrm.update(path="testdata/models/qwen2_seqcls", truncate_inputs=True,
                   system_prompt_file="testdata/pedrm_system_prompt.txt")
  return c
