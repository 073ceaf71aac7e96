r"""Evaluating a tutor: the tables of papers 003 (table 2), 001 (table 1) and 000 (table I).

  python -m pedrl.experiments.evaluate --config=experiments/evaluate.py:tiny --workdir=/tmp/eval
  python -m pedrl.experiments.evaluate --config=experiments/evaluate.py:pedagogical_rl --workdir=/runs/eval_ped \
      --config.tutor.path=/ckpt/tutor --config.student.path=/ckpt/Llama-3.1-8B-Instruct \
      --config.problems.path=/data/bigmath.jsonl --config.eval.pedrm.path=/ckpt/pedagogical-rewardmodel \
      --config.rewards.openai.base_url=http://judge:8000/v1
  python -m pedrl.tools.report /runs/eval_ped /runs/eval_base

Variants: `pedagogical_rl` (paper 003's protocol, the default `paper`: the 500
test problems of the filtered BigMath split, one dialogue each, K = 8 attempts
before and after, the leakage and helpfulness judges on an evaluation judge of
another family than the training judge, Gemma-3-27B served at an
OpenAI-compatible `base_url`, and Ped-RM), `thinking` (paper 001: the Polya
prompt with thinking, judged by GPT-4o-mini with the thinking-quality judge),
`uco` (paper 000 tables I, III-VIII: 003's protocol with dialogues of at most
10 turns; a Qwen2.5-14B-Instruct student by path), `reasoning` (003 table 3,
000 table IX: GSM8K 4-shot, MATH500 0-shot, MMLU 5-shot on the tutor alone,
from local files: --config.eval.reasoning.{gsm8k,math500,mmlu}_path=...,
optionally gsm8k_shots_path= the train file) and `tiny` (the testdata
models, rule judges, the testdata classifier as Ped-RM, 4 problems; under 2
minutes on a CPU; combines with a protocol: `tiny,thinking`). The tutor under
test: --config.tutor.path (a Hugging Face directory), --config.tutor.workdir
[--config.tutor.step] (a pedrl training run) or --config.tutor.endpoint.model
(an OpenAI-compatible endpoint; the student likewise). Shards: add
--config.eval.shard=I --config.eval.num_shards=N (launch/eval_array.sbatch).
"""
from pedrl.agents.cpa.agent import CPASettings
from pedrl.agents.tutor import TutorAgentSettings
from pedrl.env import party
from pedrl.experiments import base_config, settings, variants
from pedrl.eval import pedrm, reasoning, shards

VARIANTS = dict(protocol=("pedagogical_rl", "thinking", "uco", "reasoning"), tiny=bool)
# One line per variant, for `python -m pedrl.tools.configs` (read without importing this file).
VARIANT_HELP = {
    "paper": "the pedagogical_rl protocol",
    "pedagogical_rl": "paper 003 table 2: 500 test problems, K 8 attempts, Gemma-3-27B judges, Ped-RM",
    "thinking": "paper 001 table 1: Polya prompt with thinking, GPT-4o-mini judges",
    "uco": "paper 000 table I: 003's protocol, dialogues of at most 10 tutor turns",
    "reasoning": "003 table 3, 000 table IX: GSM8K, MATH500, MMLU on the tutor alone",
    "tiny": "the testdata models, rule judges and classifier as Ped-RM; combines with a protocol",
}


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  c = base_config.dialogue_config("tiny" if v.tiny else "paper")
  c.eval = settings.section(shards.EvalSettings)
  c.eval.pedrm = settings.section(pedrm.PedRMSettings)
  # The tutor under test: --config.tutor.path=HF_DIR, or a training run's checkpoint with
  # --config.tutor.workdir=RUN [--config.tutor.step=N] (its base model gives the tokenizer).
  c.tutor = settings.section(party.PartySettings, shards.TutorRun, TutorAgentSettings,
                             **c.tutor.to_dict())
  # Or an agent over that model (or endpoint) as its backbone: --config.tutor.agent=cpa (paper
  # 002's CPA, its table 3 ablations no_m1 ..., or the baselines cot, plan_solve, sot), with
  # CPA's numbers in tutor.cpa (section 4.4's; e.g. --config.tutor.cpa.max_resyntheses=2).
  c.tutor.cpa = settings.section(CPASettings)
  # Or an OpenAI-compatible endpoint: --config.tutor.endpoint.model=gpt-4o (and base_url,
  # api_key_env); the student likewise.
  c.tutor.endpoint = settings.section(party.EndpointSettings)
  c.student.endpoint = settings.section(party.EndpointSettings)
  # Paper 003 section 6: the test split, judged by Gemma-3-27B (not the Qwen training judge);
  # the model name is the serving endpoint's (vLLM serves it by its Hugging Face id).
  c.rewards.openai.model = "google/gemma-3-27b-it"
  c.batch_problems = 16
  if v.protocol == "thinking":
    # Paper 001 section 3: GPT-4o-mini judges leakage, helpfulness and the thinking traces.
    c.rollout.update(thinking=True, tutor_prompt="thinking/tutor_polya",
                     student_prompt="thinking/student_system")
    c.rewards.judges = "thinking"
    c.rewards.openai.model = "gpt-4o-mini"
    if not v.tiny:  # The thinking tutor's token limits, as it was trained (thinking.py).
      c.tutor.max_new_tokens, c.rollout.max_conversation_tokens = 4096, 32768
  if v.protocol == "uco":
    # Paper 000 section IV: dialogues of at most T = 10 turns with a Qwen2.5-14B-Instruct
    # student (give its path); its tables I and III-VIII report 003's metrics. The paper
    # names no evaluation judge: 003's is kept. Its dialogues: T = 10 tutor turns, tutor
    # first, table XII's prompts.
    c.rollout.update(max_tutor_turns=10, max_turns=20, scenario="guided",
                     tutor_prompt="uco/teacher", student_prompt="uco/student")
  c.eval.reasoning = settings.section(reasoning.ReasoningSettings)
  if v.protocol == "reasoning":
    # Paper 003 table 3 (MMLU 5-shot, GSM8K 4-shot, MATH500 0-shot), 000 table IX: the tutor
    # alone, at the reference's LightEval sampling (temperature 0.6, top-p 0.95).
    c.eval.reasoning.benchmarks = "gsm8k,math500,mmlu"
  if v.tiny:
    c.batch_problems = 2
    c.eval.samples_per_problem = 2
    c.eval.bootstrap_resamples = 1000
    c.eval.pedrm.path = "testdata/models/qwen2_seqcls"
    c.tutor.truncate_prompts = True  # An agent tutor's prompts overflow the tiny context.
    if v.protocol == "thinking":
      c.rollout.tutor_prompt = "thinking/tutor_general"  # Polya overflows the tiny context.
    if v.protocol == "reasoning":  # pedrl's own few-row files in the benchmarks' formats.
      c.eval.reasoning.update(
          gsm8k_path="testdata/reasoning/gsm8k_sample.jsonl",
          math500_path="testdata/reasoning/math500_sample.jsonl",
          mmlu_path="testdata/reasoning/mmlu", max_new_tokens=24, batch_examples=6)
  return c
