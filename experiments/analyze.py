r"""Analysing tutors' transcripts: paper 001's tables 3, 4, 8-11 and figs. 2-3; the data views
of papers 003 (table 1, fig. 3) and 000 (fig. 3).

  python -m pedrl.experiments.analyze --config=experiments/analyze.py:tiny --workdir=/tmp/analysis \
      --config.runs='A=/tmp/eval_a,B=/tmp/eval_b'
  python -m pedrl.experiments.analyze --config=experiments/analyze.py:paper --workdir=/runs/analysis \
      --config.runs='NoThink=/e/0,Think NoReward=/e/1,Think Reward=/e/2,Ped. Think NoReward=/e/3,Ped. Think Reward=/e/4'

Variants: `paper` (paper 001 section 4.2: GPT-5-mini labels every visible
sentence with table 5's codes and every thinking sentence with a Schoenfeld
phase, through an OpenAI-compatible endpoint, key in OPENAI_API_KEY; tables 4
and 11 in the columns NoThink, Think*, Ped.*; table 8's comparisons; name the
five conditions as the paper does, or change `groups`, `columns` and
`comparisons`) and `tiny` (pedrl's keyword rules as the labeller and the testdata
Qwen2 as a second labeller of the codebook, whose noise the reliability table
counts; two conditions A and B; 003's views of the testdata problems; under 2
minutes on a CPU). A second labeller: --config.label2.backend=openai|local and its model;
Cohen's κ against the first goes in reliability.md. A seeded subset:
--config.sample=N units per condition and scheme.
"""
from pedrl.clients.settings import EndpointSettings
from pedrl.env.settings import PartySettings
from pedrl.eval.settings import (ROLES, AnalysisSettings, LabelSettings, ShardSettings,
                                 ViewSettings)
from pedrl.jobs import settings, variants

ENTRY_POINT = "pedrl.experiments.analyze"  # The job it configures; others refuse it.
VARIANTS = dict(tiny=bool)
# One line per variant, for `python -m pedrl.tools.configs`.
VARIANT_HELP = {
    "paper": "paper 001 section 4.2: GPT-5-mini labels sentences (codebook, Schoenfeld phases); tables 4, 8, 11",
    "tiny": "keyword rules and the testdata Qwen2 as labellers, two conditions A and B",
}


def get_config(arg: str = "paper"):
  v = variants.parse(arg, VARIANTS)
  c = settings.section(AnalysisSettings)
  c.mesh = settings.section(settings.MeshSettings)
  c.eval = settings.section(ShardSettings)
  c.views = settings.section(ViewSettings)
  for role in ROLES:
    c[role] = settings.section(LabelSettings, backend="openai" if role == "label" else "")
    # Paper 001 section 4.2: GPT-5-mini. OpenAI's reasoning models take only temperature 1 and
    # max_completion_tokens, in which their reasoning counts.
    # A label's reply is short: a request hung for 60 s is asked again (the type waits 120 s).
    c[role].openai = settings.section(EndpointSettings, model="gpt-5-mini", temperature=1.0,
                                      max_tokens=4096, max_tokens_field="max_completion_tokens",
                                      timeout=60.0)
    c[role].local = settings.section(PartySettings, path=None, temperature=0.0, top_k=0,
                                     top_p=1.0, max_new_tokens=64)
  if v.tiny:
    c.columns, c.groups = "A,B", ""
    c.comparisons = ("Major Categories: A vs B: categories; Praise: A vs B: code=Praise; "
                     "Phases: A vs B: phases")
    c.label.backend = "rule"
    # The tiny model's context (1024 tokens) does not hold the 82 codes: a prompt file of its
    # own asks for a number alone. Its replies are noise: most are counted as failures.
    c.label2.update(backend="local", schemes="codebook", rounds=2, batch_units=64,
                    codebook_prompt="testdata/analysis/codebook_tiny.jinja")
    c.label2.local.update(path="testdata/models/qwen2", temperature=1.0, max_new_tokens=12)
    c.views.update(problems_path="testdata/problems/bigmath_sample.jsonl", filter=False, n_train=20,
                   n_test=5)
  return c
