r"""UCO (paper 000): per-turn r_t = r_progress + r_scaffold, turn-level GRPO advantages.

  python -m pedrl.experiments.uco --config=experiments/uco.py:tiny --workdir=/tmp/uco
  python -m pedrl.experiments.uco --config=experiments/uco.py:paper --workdir=/runs/uco \
    --config.tutor.path=... --config.student.path=... --config.problems.path=... \
    --config.rewards.uco.embedder=/models/bge-m3 \
    --config.rewards.uco.oracle_endpoint.model=gemini-2.5-pro \
    --config.rewards.uco.oracle_endpoint.base_url=... \
    --config.rewards.uco.oracle_endpoint.api_key_env=GEMINI_API_KEY

Paper 000 section IV: lr 5e-6, B 16, G 4, T = 10 tutor turns (eq. 1), γ 0.95,
λ 0.5, α 2.0, δ 0.7, c 0.2, KL 0.01, advantage normalisation ε 1e-8, AdamW weight
decay 1e-4, n = 5 candidates. Its oracle is an LLM (Gemini-2.5-Pro) on an OpenAI-compatible
endpoint, which `paper` requires (the run stops before loading models without
one); its embedder is BGE-M3 (ref. [37]), given by path. Dialogues open with the
tutor (the state starts with its a_0) and use table XII's teacher and student
prompts. Ablations as variants (comma-separated, they combine): `no_scaffold`,
`no_progress` (table III), `lam=0.1` … `lam=0.9` (table V), `alpha=1.0` …
`alpha=3.0` (table VI), `delta=0.5` … `delta=0.9` (table VII), `c=0.1` … `c=0.5`
(table VIII), `rollouts=2` … `rollouts=8` (fig. 3: G rollouts per problem on a
training set of 100 problems; `pedrl.experiments.analyze --config.views.sweep`
draws the figure from the runs); the older `lam0.3` still parses. `tiny`: the
testdata models, the offline reference oracle (`--config.rewards.uco.oracle=reference`,
fixed templates) and the testdata BERT embedder, 3 steps on a CPU.
"""
from pedrl.jobs import base_config, conditions, rl_config, variants

ENTRY_POINT = "pedrl.experiments.uco"  # The job it configures; others refuse it.
VARIANTS = dict(lam=float, alpha=float, delta=float, c=float, no_scaffold=bool,
                no_progress=bool, tiny=bool, rollouts=int)
# One line per variant, for `python -m pedrl.tools.configs`.
VARIANT_HELP = {
    "paper": "paper 000 section IV (lr 5e-6, B 16, G 4, 10 tutor turns); needs an oracle endpoint "
             "and the BGE-M3 embedder",
    "tiny": "the testdata models, the reference oracle and the testdata BERT embedder; 3 steps",
    "lam=<float>": "λ of eq. 5, the potential's share of r_progress (table V: 0.1 … 0.9)",
    "alpha=<float>": "α of eq. 3, the potential's scale (table VI: 1.0 … 3.0)",
    "delta=<float>": "δ of eq. 4, the semantic score's threshold (table VII: 0.5 … 0.9)",
    "c=<float>": "c of eq. 8, the scaffold reward's step penalty (table VIII: 0.1 … 0.5)",
    "no_scaffold": "table III: without r_scaffold",
    "no_progress": "table III: without r_progress",
    "rollouts=<int>": "fig. 3: G rollouts per problem on a 100-problem training set (2 … 8)",
}
ROLLOUT_SWEEP_PROBLEMS = 100  # Paper 000 section IV-D-3: "a smaller training set of 100 samples".
# What paper 000 leaves unstated, each value named here with where it comes from (config key
# -> (value, source)); every number of 000 depends on them. pedrl takes them from paper
# 003, whose environment, metrics and test set 000 reports beside 003's rows (table I), and
# its reference code (eth-lre/PedagogicalRL @ bae10cd config/train_rl_model.py); listed in
# docs/paper-differences.md ("UCO's unstated settings").
UNSTATED = {
    "rl.steps": (150, "003 A.1: about 300 policy updates at μ = 2 (the reference sets no "
                      "max_steps)"),
    "rl.passes": (2, "003 A.2: μ = 2 gradient steps per batch (reference mu)"),
    "rl.eps_low": (0.2, "003 reference: clip ε = 0.2 (epsilon)"),
    "rl.eps_high": (None, "003 reference: the same ε above (no separate upper clip)"),
    "rl.lr_schedule": ("constant", "003 reference: lr_scheduler_type constant"),
    "rl.warmup_steps": (0, "003 reference: no warm-up"),
    "rl.max_grad_norm": (1.0, "003 reference: TRL's default max_grad_norm 1.0"),
    "rl.aggregation": ("token_mean", "003 reference: the token mean of the micro-batch"),
    "tutor.temperature": (1.0, "003 A.2: sampling temperature T = 1.0"),
    "tutor.top_k": (50, "003 reference: vLLM top_k 50"),
    "tutor.top_p": (1.0, "003 reference: top_p 1.0"),
    "tutor.max_new_tokens": (1024, "003 reference: max_tokens_per_turn 1024"),
    "student.temperature": (0.6, "003 reference: the student samples at 0.6"),
    "student.max_new_tokens": (1024, "003 reference: max_tokens_per_turn 1024"),
    "rollout.max_conversation_tokens": (8192, "003 reference: max_tokens_in_conversation 8192"),
}


def evaluation_variant(arg: str = "paper") -> str:
  """The evaluation config's variant (experiments/evaluate.py) for a run of this one: UCO's
  dialogues (conditions.uco); the ablations change rewards only. `uco_003` evaluates the
  same tutor in paper 003's dialogues instead (000 table I's rows beside 003's baselines)."""
  v = variants.parse(arg, VARIANTS)
  return "uco" + (",tiny" if v.tiny else "")


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  c = base_config.dialogue_config("tiny" if v.tiny else "paper")
  c.batch_problems, c.group_size = 16, 4
  conditions.uco(c, v.tiny)  # Tutor first, table XII's prompts, T = 10 tutor turns (eq. 1).
  c.rewards.uco.update(oracle="openai", embedder="")  # Both required: see the docstring.
  c.rewards.components = "uco:1"
  # λ, α, δ, c (UCOSettings) and γ (RewardSettings.gamma) default to paper 000's values.
  base_config.released_training_split(c)
  c.rl = rl_config.rl_section(lr=5e-6, beta=0.01, weight_decay=1e-4, advantage="turn",
                              advantage_eps=1e-8)
  for key, (value, _) in UNSTATED.items() if not v.tiny else ():  # 000 states none of these.
    section, name = key.split(".")
    c[section][name] = value
  for name in ("lam", "alpha", "delta", "c"):  # Tables V, VI, VII, VIII.
    if getattr(v, name) is not None:
      c.rewards.uco[name] = getattr(v, name)
  if v.no_scaffold:  # Table III.
    c.rewards.uco.scaffold_weight = 0.0
  if v.no_progress:
    c.rewards.uco.progress_weight = 0.0
  if v.tiny:
    c.batch_problems, c.group_size = 2, 2
    c.rewards.uco.update(oracle="reference", embedder="testdata/models/bert")
    rl_config.tiny(c)
  if v.rollouts is not None:  # Fig. 3: G = 2 … 8 rollouts per problem on 100 problems (tiny too).
    if v.rollouts < 2:
      raise ValueError(f"rollouts={v.rollouts}: GRPO compares at least 2 rollouts per problem")
    c.group_size = v.rollouts
    if not v.tiny:  # The first 100 rows of the training file: the paper does not say which.
      c.problems.limit = ROLLOUT_SWEEP_PROBLEMS
  return c
