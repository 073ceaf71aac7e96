r"""Evaluating a tutor: the tables of papers 003 (table 2), 001 (table 1) and 000 (table I).

  python -m pedrl.experiments.evaluate --config=experiments/evaluate.py:tiny --workdir=/tmp/eval
  python -m pedrl.experiments.evaluate --config=experiments/evaluate.py:pedagogical_rl --workdir=/runs/eval_ped \
      --config.tutor.path=/ckpt/tutor --config.student.path=/ckpt/Llama-3.1-8B-Instruct \
      --config.problems.path=/data/big_math_rl_verified_filtered_test.jsonl \
      --config.eval.pedrm.path=/ckpt/pedagogical-rewardmodel \
      --config.eval.pedrm.system_prompt_file=/data/pedrm_system_prompt.txt \
      --config.rewards.openai.base_url=http://judge:8000/v1
  python -m pedrl.tools.report /runs/eval_ped /runs/eval_base

Protocols (`paper` is `pedagogical_rl`):
- `pedagogical_rl`: paper 003 table 2 (and 000 table I's baselines): the published test
  split (rd211/Big-Math-RL-Verified-Filtered `test`, 500 rows as given), one dialogue each,
  K = 8 attempts before and after, the leakage and helpfulness judges on an evaluation judge
  of another family than the training judge (Gemma-3-27B served at an OpenAI-compatible
  `base_url`), Ped-RM in the reference's format; `pedagogical_rl,think` for the +think rows.
- `thinking,condition=NAME`: paper 001 table 1, the condition's prompts and thinking
  (ped_think_reward, no_think, think_no_reward, think_reward, ped_think_no_reward), judged
  by GPT-4o-mini with the thinking-quality judge.
- `uco`: paper 000 with UCO's own dialogues (T = 10 tutor turns, tutor first, table XII's
  prompts; a Qwen2.5-14B-Instruct student by path).
- `uco_003`: a UCO tutor in paper 003's dialogues (Llama-3.1-8B-Instruct student, 003's
  turn limit, both scenarios): the protocol of the baselines 000 table I prints beside it.
- `reasoning`: 003 table 3, 000 table IX: GSM8K 4-shot, MATH500 0-shot, MMLU 5-shot on the
  tutor alone (--config.eval.reasoning.{gsm8k,math500,mmlu}_path=..., a file or a tfds:
  source; optionally gsm8k_shots_path= the train file).
- `wbeb`: 001 table 2: accuracy per category of a WBEB-shaped multiple-choice JSONL on the
  thinking tutor (--config.eval.reasoning.wbeb_path=...; see pedrl.eval.reasoning).
`tiny` runs a protocol on the testdata models (rule judges, the testdata classifier as
Ped-RM, 4 problems of the testdata published-split sample; under 2 minutes on a CPU):
`tiny,thinking`. A training run of `X.py:V` is evaluated with the variant `X.py`'s
`evaluation_variant(V)` names (the same dialogue definition, pedrl.jobs.conditions).

Every tutoring protocol samples as paper 003's reference evaluation does (eth-lre/
PedagogicalRL @ bae10cd, config/eval.py and config/eval/*.yaml; `reference_evaluation`
below). The tutor under test: --config.tutor.path (a Hugging Face directory),
--config.tutor.workdir [--config.tutor.step] (a pedrl training run; the evaluation stops
with one line if any of its problems is one the run trained on, pedrl.jobs.trained_on)
or --config.tutor.endpoint.model (an OpenAI-compatible endpoint; the student likewise).
Shards: add --config.eval.shard=I --config.eval.num_shards=N (launch/eval_array.sbatch).
"""
from pedrl.agents.settings import CPASettings, TutorAgentSettings
from pedrl.clients.settings import EndpointSettings
from pedrl.env.settings import PartySettings
from pedrl.jobs import base_config, conditions, settings, variants
from pedrl.eval.settings import EvalSettings, PedRMSettings, ReasoningSettings, TutorRun

PROTOCOLS = ("pedagogical_rl", "thinking", "uco", "uco_003", "reasoning", "wbeb")
ENTRY_POINT = "pedrl.experiments.evaluate"  # The job it configures; others refuse it.
VARIANTS = dict(protocol=PROTOCOLS, think=bool, condition=tuple(conditions.THINKING), tiny=bool)
# One line per variant, for `python -m pedrl.tools.configs`.
VARIANT_HELP = {
    "paper": "the pedagogical_rl protocol",
    "pedagogical_rl": "paper 003 table 2: the published 500-problem test split, K 8, Gemma-3-27B judges, Ped-RM",
    "thinking": "paper 001 table 1: a condition's prompts and thinking, GPT-4o-mini judges",
    "uco": "paper 000 table I: UCO's dialogues (10 tutor turns, tutor first, table XII's prompts)",
    "uco_003": "a UCO tutor in paper 003's dialogues (000 table I's baselines' protocol)",
    "reasoning": "003 table 3, 000 table IX: GSM8K, MATH500, MMLU on the tutor alone",
    "wbeb": "001 table 2: accuracy per category of a WBEB-shaped multiple-choice file",
    "think": "with pedagogical_rl: 003's +think rows (tagged thinking, forced <think>)",
    "ped_think_reward": "with thinking: the Polya prompt, thinking, thinking reward (the default condition)",
    "ped_think_no_reward": "with thinking: the Polya prompt, thinking, no thinking reward",
    "think_reward": "with thinking: the general prompt, thinking, thinking reward",
    "think_no_reward": "with thinking: the general prompt, thinking, no thinking reward",
    "no_think": "with thinking: thinking off, the general prompt",
    "tiny": "a protocol on the testdata models, rule judges and classifier as Ped-RM; 4 problems",
}
REFERENCE = "eth-lre/PedagogicalRL @ bae10cd"  # Where the evaluation settings below are read.


def reference_evaluation(c):
  """Paper 003's evaluation settings, each from its reference code's evaluation configs
  (REFERENCE: config/eval.py and every config/eval/*.yaml); training keeps its own.
  Papers 001 and 000 state none: their protocols take these too."""
  # config/eval/*.yaml: teacher_model, student_model and judge_model all sample at
  # temperature 0.6; top_k 50 and top_p 1.0 are config/train_rl_model.py's ModelvLLMConfig
  # defaults, which no eval config changes.
  for side in (c.tutor, c.student, c.rewards.local_judge):
    side.update(temperature=0.6, top_k=50, top_p=1.0)
  # The judge at an endpoint: temperature 0.6 (the chat API has no top_k); replies of up to
  # GenerationConfig.max_tokens_per_judge_attempt = 2048 tokens (config/train_rl_model.py).
  c.rewards.openai.update(temperature=0.6, max_tokens=2048)
  c.rewards.local_judge.max_new_tokens = 2048
  c.rewards.judge_samples = 2  # config/eval.py: number_judge_attempts=2.
  c.solve.k = 8  # config/eval.py: number_student_attempts=8 (at the student's 0.6).
  c.eval.samples_per_problem = 1  # config/eval.py: num_samples_per_problem=1.
  c.seed = 42  # config/eval.py: seed=42.
  # config/eval.py: ignore_rejected_judge=True. In src/classroom.py a REJECT then no longer
  # ends the dialogue's judging (Conversation.add_judge_decisions): every judge runs on every
  # dialogue and the student always makes its post-dialogue attempts, so Δ solve rate is
  # never penalised. pedrl's evaluation always works that way (pedrl.experiments.evaluate).
  # Problems: the published test split, as eval.py loads it (Dataset: split="test",
  # max_val_examples=500). It has 500 rows: utils/data.py's shuffle(seed).select(range(500))
  # takes them all, in an order that changes no metric; pedrl reads them in file order and
  # refuses a file of another length (problems.load_published; fewer: problems.limit).
  c.problems.update(split="published", filter=False, on_error="fatal", n_test=500)
  # A raw pool split the way training split it (problems.split=test): the training
  # configs' seed, not the evaluation's.
  c.problems.split_seed = 0
  return c


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  if v.think and v.protocol != "pedagogical_rl":
    raise ValueError(f"variant {arg!r}: think is paper 003's +think (pedagogical_rl only)")
  if v.condition != tuple(conditions.THINKING)[0] and v.protocol != "thinking":
    raise ValueError(f"variant {arg!r}: condition is paper 001's (the thinking protocol only)")
  c = base_config.dialogue_config("tiny" if v.tiny else "paper")
  c.eval = settings.section(EvalSettings)
  c.eval.pedrm = settings.section(PedRMSettings)
  # The tutor under test: --config.tutor.path=HF_DIR, or a training run's checkpoint with
  # --config.tutor.workdir=RUN [--config.tutor.step=N] (its base model gives the tokenizer).
  c.tutor = settings.section(PartySettings, TutorRun, TutorAgentSettings,
                             **c.tutor.to_dict())
  # Or an agent over that model (or endpoint) as its backbone: --config.tutor.agent=cpa (paper
  # 002's CPA, its table 3 ablations no_m1 ..., or the baselines cot, plan_solve, sot), with
  # CPA's numbers in tutor.cpa (section 4.4's; e.g. --config.tutor.cpa.max_resyntheses=2).
  c.tutor.cpa = settings.section(CPASettings)
  # Or an OpenAI-compatible endpoint: --config.tutor.endpoint.model=gpt-4o (and base_url,
  # api_key_env); the student likewise. Sampling is the side's (tutor.temperature, …).
  c.tutor.endpoint = settings.section(EndpointSettings, skip=EndpointSettings.SAMPLING)
  c.student.endpoint = settings.section(EndpointSettings, skip=EndpointSettings.SAMPLING)
  reference_evaluation(c)
  # Paper 003 section 5.4: judged by Gemma-3-27B (not the Qwen training judge); the model
  # name is the serving endpoint's (vLLM serves it by its Hugging Face id;
  # config/eval/*.yaml: judge_model google/gemma-3-27b-it).
  c.rewards.openai.model = "google/gemma-3-27b-it"
  c.batch_problems = 16
  # The dialogues: the condition the tutor was trained in (pedrl.jobs.conditions).
  if v.protocol == "pedagogical_rl":
    conditions.pedagogical_rl(c, v.think, v.tiny)
  if v.protocol == "thinking":
    conditions.thinking(c, v.condition, v.tiny)
    # Paper 001 section 3: GPT-4o-mini judges leakage, helpfulness and the thinking traces.
    c.rewards.judges = "thinking"
    c.rewards.openai.model = "gpt-4o-mini"
  if v.protocol == "uco":
    # Paper 000 section IV: UCO's dialogues with a Qwen2.5-14B-Instruct student (give its
    # path); its tables I and III-VIII report 003's metrics. It names no evaluation judge:
    # 003's is kept.
    conditions.uco(c, v.tiny)
  if v.protocol == "uco_003":
    # 000 table I prints 003's baselines as 003 measured them (a Llama-3.1-8B-Instruct
    # student, 003's turn limit, both scenarios): a UCO tutor in those dialogues, with the
    # teacher prompt it was trained on (table XII's, 003's figure 13 in other words).
    conditions.pedagogical_rl(c, False, v.tiny)
    c.rollout.tutor_prompt = conditions.UCO_DIALOGUES["tutor_prompt"]
  c.eval.reasoning = settings.section(ReasoningSettings)
  if v.protocol == "reasoning":
    # Paper 003 table 3 (MMLU 5-shot, GSM8K 4-shot, MATH500 0-shot), 000 table IX: the tutor
    # alone, at the reference's LightEval sampling (temperature 0.6, top-p 0.95).
    c.eval.reasoning.benchmarks = "gsm8k,math500,mmlu"
  if v.protocol == "wbeb":
    # Paper 001 table 2: WBEB's multiple-choice accuracy per category on the thinking tutor.
    # WBEB is not published with the paper: --config.eval.reasoning.wbeb_path=FILE.jsonl.
    c.eval.reasoning.benchmarks = "wbeb"
    c.rollout.thinking = True
  if v.tiny:
    c.batch_problems = 2
    c.eval.samples_per_problem = 2
    c.eval.bootstrap_resamples = 1000
    # The testdata classifier, with a stand-in system prompt written for pedrl (a real run
    # gives the released reward model's; see pedrl.eval.pedrm).
    c.eval.pedrm.update(path="testdata/models/qwen2_seqcls",
                        system_prompt_file="testdata/pedrm_system_prompt.txt")
    # pedrl's own rows in the published split's format (11); its first 4.
    c.problems.update(path="testdata/problems/bigmath_published_sample.jsonl", n_test=11,
                      limit=4)
    c.tutor.truncate_prompts = True  # An agent tutor's prompts overflow the tiny context.
    if v.protocol == "reasoning":  # pedrl's own few-row files in the benchmarks' formats.
      c.eval.reasoning.update(
          gsm8k_path="testdata/reasoning/gsm8k_sample.jsonl",
          math500_path="testdata/reasoning/math500_sample.jsonl",
          mmlu_path="testdata/reasoning/mmlu", max_new_tokens=24, batch_examples=6)
    if v.protocol == "wbeb":  # pedrl's own eight questions in WBEB's shape.
      c.eval.reasoning.update(wbeb_path="testdata/reasoning/wbeb_sample.jsonl",
                              max_new_tokens=24, batch_examples=4)
  return c
