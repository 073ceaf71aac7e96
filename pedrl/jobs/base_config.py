"""The parts configs share: `dialogue_config`, the part of every config that runs
dialogues (models, problems, dialogue rules, solve attempts and rewards: the
rollout job's whole config; the training configs add their `rl` section; defaults
are paper 003's), `bench_config`, the part of every MathTutorBench job's, and
`offline_config`, the SFT and MDPO jobs' whole config.
"""
import dataclasses
from typing import Any

import ml_collections

from pedrl.clients.settings import EndpointSettings
from pedrl.env import settings as env
from pedrl.eval import settings as eval_settings
from pedrl.jobs import settings, variants
from pedrl.rewards import assemble, uco_turns
from pedrl.rewards.settings import RuleJudgeSettings
from pedrl.rl.settings import OptimizerSettings

VARIANTS = dict(tiny=bool, tiny_uco=bool)  # tiny_uco: tiny with UCO's rewards.


def dialogue_config(variant: str = "paper") -> ml_collections.ConfigDict:
  """Models, problems, dialogue rules, solve attempts and rewards; variants paper, tiny, tiny_uco."""
  v = variants.parse(variant, VARIANTS)
  # Every section is made from the settings type that reads it (pedrl.jobs.settings),
  # which holds the defaults; values written here are the papers' where a type has none or
  # a paper differs.
  c = settings.section(settings.JobSettings)
  c.mesh = settings.section(settings.MeshSettings)
  # Paper 003 / reference: Qwen2.5-7B-Instruct tutor at T=1.0, top-k 50; Llama-3.1-8B-Instruct
  # student at T=0.6; at most 1024 new tokens per turn.
  c.tutor = settings.section(env.PartySettings, path=None, temperature=1.0, top_k=50,
                             top_p=1.0, max_new_tokens=1024)
  c.student = settings.section(env.PartySettings, path=None, temperature=0.6, top_k=0,
                               top_p=1.0, max_new_tokens=1024)
  c.problems = settings.section(env.ProblemSettings)
  c.rollout = settings.section(env.RolloutSettings)
  c.solve = settings.section(env.SolveSettings)
  # Rewards: a weighted list of components (pedrl.rewards.assemble): r_sol, pedagogy,
  # thinking, template, uco. Paper 003: r_sol + pedagogy (λ) + template; paper 001 adds
  # thinking with judges=thinking; UCO: uco (+ anything else, to mix families).
  c.rewards = settings.section(assemble.RewardSettings, settings.JudgeSettings)
  # The judges' (and an LLM level classifier's) endpoint. Their replies are short (a JSON
  # verdict): a request hung for 60 s is asked again sooner than the type's 120 s wait.
  c.rewards.openai = settings.section(EndpointSettings, model="gpt-4o-mini", timeout=60.0)
  c.rewards.local_judge = settings.section(env.PartySettings, path=None, temperature=0.6,
                                           top_k=0, top_p=1.0, max_new_tokens=512)
  # judge_backend=rule: offline stand-ins (pedrl.rewards.backends.RuleBackend), these thresholds.
  c.rewards.rule_judges = settings.section(RuleJudgeSettings)
  c.rewards.uco = settings.section(uco_turns.UCOSettings, settings.OracleSettings)
  # UCO's oracle's endpoint (oracle=openai): each value left None is the judges' (the same
  # endpoint and key unless it names its own); the model is required (paper 000:
  # Gemini-2.5-Pro), never the judges'.
  c.rewards.uco.oracle_endpoint = settings.section(
      EndpointSettings, **{f.name: None for f in dataclasses.fields(EndpointSettings)})

  if v.tiny or v.tiny_uco:
    c.batch_problems, c.group_size, c.scan_layers = 2, 2, False
    c.tutor.path, c.student.path = "testdata/models/qwen2", "testdata/models/llama3"
    c.tutor.max_new_tokens = c.student.max_new_tokens = 24
    c.problems.update(path="testdata/problems/bigmath_sample.jsonl", filter=False, split="all",
                      limit=4)
    # No forced thinking: 24 tokens never close a <think>, and the tutor's visible text (what
    # the judges and the student read) would be empty, its reward independent of the policy.
    c.rollout.update(max_turns=4, max_conversation_tokens=700, force_thinking=False)
    c.solve.update(k=2, max_new_tokens=32)
    c.rewards.judge_backend = "rule"  # Offline; the paper uses LLM judges.
    # Near the random tutor's median word share: about half the dialogues pass the helpfulness
    # rule, so groups differ in reward and GRPO has a signal (a tutor that says less gains).
    c.rewards.rule_judges.max_tutor_share = 0.55
    c.rewards.uco.update(oracle="reference", embedder="testdata/models/bert")
  if v.tiny_uco:
    c.rewards.components = "uco:1,template:1"
  return c


def released_training_split(c: ml_collections.ConfigDict) -> None:
  """The training problems of the papers' runs: rd211/Big-Math-RL-Verified-Filtered's `train`
  split as released, all of it, in file order (--config.problems.path=its file or
  tfds:huggingface:rd211__big_math_rl_verified_filtered:train). Paper 003's reference trains
  on exactly that (config/train_rl_model.py: Dataset(split="train"), max_train_examples=-1;
  utils/data.py only shuffles it) and evaluates on the same dataset's `test`. Paper 001 takes
  003's data ("10,000 problems for training and 500 problems for evaluation", following
  003); paper 000 names none but reports on 003's test set beside 003's rows. pedrl's own
  seeded split of a raw pool stays an option: problems.split=train, filter=True,
  on_error=skip (its test set is then the pool's hold-out, problems.split=test)."""
  c.problems.update(split="published_train", filter=False, on_error="fatal")


def bench_config(tiny: bool, **tutor_sampling: Any) -> ml_collections.ConfigDict:
  """The part of a MathTutorBench job's config (the benchmark job's and CPA's): the job,
  the harness's settings, the model under test or backbone with `tutor_sampling`
  (temperature, top_p, max_new_tokens), shards and Ped-RM; `tiny` points them at the
  testdata tutor and classifier and pedrl's own tiny benchmark, prompts cut to the tiny
  context. A paper run names the official files (pedrl.eval.mathtutorbench_harness.tasks.SOURCES):
  --config.benchmark_dir, a MathTutorBench checkout; --config.data_dir, its data laid out
  as testdata/mathtutorbench."""
  c = settings.section(settings.JobSettings, eval_settings.BenchSettings)
  c.mesh = settings.section(settings.MeshSettings)
  c.tutor = settings.section(env.PartySettings, eval_settings.TutorRun, path=None, top_k=0,
                             **tutor_sampling)
  c.tutor.endpoint = settings.section(EndpointSettings, skip=EndpointSettings.SAMPLING)
  c.eval = settings.section(eval_settings.ShardSettings)
  # The benchmark's reward-model script runs the RM in bfloat16 (eth-lre/mathtutorbench @
  # 54b6213 reward_model/compute_scaffolding_score.py: torch_dtype=torch.bfloat16).
  c.pedrm = settings.section(eval_settings.PedRMSettings, format="mathtutorbench",
                             dtype="bfloat16")
  if tiny:
    c.scan_layers = False
    c.tutor.path = "testdata/models/qwen2"
    # Task files and data written for pedrl in the benchmark's format and layout
    # (testdata/make_mathtutorbench.py): the official files' fields, pedrl's problems.
    c.update(benchmark_dir="testdata/mathtutorbench/mathtutorbench",
             data_dir="testdata/mathtutorbench", truncate_prompts=True)
    # The testdata classifier, with a stand-in system prompt written for pedrl (the real
    # run's is the benchmark's, given by path).
    c.pedrm.update(path="testdata/models/qwen2_seqcls", truncate_inputs=True, dtype="float32",
                   system_prompt_file="testdata/pedrm_system_prompt.txt")
  return c


def offline_config(objective: type, options: type | None = None,
                   **train: Any) -> ml_collections.ConfigDict:
  """An offline job's config (pedrl.jobs.offline): the top level, mesh, tutor,
  data and the `train` section (OfflineSettings, OptimizerSettings, the objective's and
  the options' fields, then `train`'s values)."""
  c = settings.section(settings.JobSettings, skip=("batch_problems", "group_size"))
  c.mesh = settings.section(settings.MeshSettings)
  c.tutor = settings.section(settings.TrainedTutorSettings)
  c.data = settings.section(settings.DataSettings)
  sources = [settings.OfflineSettings, OptimizerSettings, objective]
  c.train = settings.section(*sources, *([options] if options else []), **train)
  return c

