r"""What tutors say and think (paper 001 section 4, appendices D-E), and the data views of
papers 003 (table 1, fig. 3) and 000 (fig. 3).

  python -m pedrl.experiments.analyze --config=experiments/analyze.py:tiny --workdir=/tmp/analysis \
      --config.runs='NoThink=/tmp/eval_a,Think=/tmp/eval_b'
  python -m pedrl.experiments.analyze --config=experiments/analyze.py:paper --workdir=/runs/analysis \
      --config.runs='NoThink=/e/0,Think NoReward=/e/1,Think Reward=/e/2,Ped. Think NoReward=/e/3,Ped. Think Reward=/e/4'

Over the conditions' evaluation (or rollout) workdirs: every tutor turn's
statistics (pedrl.eval.analysis.text), then each labeller labels the units of
its schemes (pedrl.eval.analysis.labelling: codebook codes of the visible
sentences, Schoenfeld phases of the thinking), caching labels per text in
WORKDIR/labels/; then shares, χ² tests, reliability, tables and figures
(pedrl.eval.analysis.report) in WORKDIR/tables/, WORKDIR/figures/,
WORKDIR/analysis.md and WORKDIR/analysis.json. Sharded: with
`--config.eval.shard=I --config.eval.num_shards=N` each shard labels its part
of the texts; a shard that finds every label there writes the report (rerun
any shard once all have finished). A rerun, or a run with another condition
added, labels only texts the cache lacks. `--config.sample=N` labels a seeded
subset of N units per condition and scheme. `--config.views.problems_path=FILE`
adds paper 003's table 1 and fig. 3, `--config.views.sweep='2=W2,4=W4,…'` paper
000's fig. 3; either runs without `runs`.
"""
import sys

from pedrl import cli

if __name__ == "__main__":  # First, before the imports below load JAX (pedrl.cli.check_job).
  cli.check_job(__spec__.name, sys.argv[1:])

import collections
import dataclasses
import os
import time

import jax
import ml_collections
from absl import app, logging

from pedrl import files, stopping
from pedrl.clients import openai_compat
from pedrl.clients.settings import EndpointSettings
from pedrl.env import party as party_lib
from pedrl.eval.analysis import (AnalysisError, codebook as codebook_lib, data_views,
                                 labelling, report, responses as responses_lib,
                                 significance, summary as summary_lib, text as text_lib)
from pedrl.eval.protocol import ShardSettings
from pedrl.jobs import settings as settings_lib, workdir as workdir_lib
from pedrl.jobs.exits import define_flags, exit_on_signal, job_main
from pedrl.jobs.loading import load_party
from pedrl.rewards import asking, backends

define_flags("experiments/analyze.py:tiny", "Analysis directory (labels, tables, figures).")


@dataclasses.dataclass(frozen=True)
class Labeller:
  """A labeller's settings and backend settings (the `label` / `label2` sections)."""
  role: str
  label: labelling.LabelSettings
  openai: EndpointSettings
  local: party_lib.PartySettings

  def identity(self, seed: int) -> dict:
    """The backend's part of what decides a label (labelling.identity adds the prompt)."""
    b = self.label.backend
    if b == "openai":
      return {"backend": b, **{k: getattr(self.openai, k) for k in
                               ("model", "base_url", "temperature", "top_p", "max_tokens")}}
    if b == "local":
      return {"backend": b, "seed": seed, **dataclasses.asdict(self.local)}
    return {"backend": b, "rules": repr((labelling.CODE_RULES, labelling.PHASE_RULES))}

  def describe(self) -> str:
    b = self.label.backend
    return {"openai": f"{self.openai.model} (OpenAI-compatible API)",
            "local": f"local model {self.local.path}", "rule": "pedrl's keyword rules"}[b]


@dataclasses.dataclass(frozen=True)
class Settings:
  analysis: summary_lib.AnalysisSettings
  mesh: settings_lib.MeshSettings
  shard: ShardSettings
  views: data_views.ViewSettings
  labellers: tuple  # (Labeller, ...): the first, then the second if its backend is set.


def read(config: ml_collections.ConfigDict) -> Settings:
  """The config's settings; every key must be read."""
  r = settings_lib.Reader(config)
  try:
    labellers = tuple(Labeller(role, r.read(labelling.LabelSettings, role),
                               r.read(EndpointSettings, f"{role}.openai"),
                               r.read(party_lib.PartySettings, f"{role}.local"))
                      for role in labelling.ROLES)
    out = Settings(r.read(summary_lib.AnalysisSettings), r.read(settings_lib.MeshSettings, "mesh"),
                   r.read(ShardSettings, "eval"), r.read(data_views.ViewSettings, "views"),
                   tuple(x for x in labellers if x.label.backend))
    r.check_all_read()
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  if not out.labellers or out.labellers[0].role != "label":
    raise app.UsageError("--config.label.backend: the first labeller needs a backend (openai, "
                         "local or rule)")
  for x in out.labellers:
    if x.label.backend == "local" and not (
        x.local.path and os.path.isfile(os.path.join(x.local.path, "config.json"))):
      raise app.UsageError(f"--config.{x.role}.local.path={x.local.path!r} is not a checkpoint "
                           "directory (no config.json)")
    if x.label.backend == "openai" and not x.openai.model:
      raise app.UsageError(f"--config.{x.role}.openai.model: give the labeller's model")
  return out


# -- Labelling -----------------------------------------------------------------------------

@dataclasses.dataclass
class Job:
  """One labeller's work on one scheme: its cache, the texts of the analysis, this shard's
  texts to ask."""
  labeller: Labeller
  scheme: str
  store: labelling.LabelStore
  texts: list  # Every distinct text of the analysis, in order.
  todo: list  # This shard's texts without a label row (or, retrying, with a failure).
  stats: asking.AskStats = dataclasses.field(default_factory=asking.AskStats)


def plan(s: Settings, workdir: str, units: dict, codebook: codebook_lib.Codebook) -> list:
  jobs = []
  shard = s.shard
  for labeller in s.labellers:
    for scheme in labeller.label.names:
      if scheme not in units:
        continue
      ident = labelling.identity(scheme, labeller.label, labeller.identity(s.analysis.seed),
                                 codebook)
      store = labelling.LabelStore(labelling.store_folder(workdir, labeller.role, scheme, ident))
      cache = store.read()
      texts = list(dict.fromkeys(u.text for us in units[scheme].values() for u in us))
      todo = labelling.pending(texts, cache, shard.shard, shard.num_shards,
                               labeller.label.retry_failures)
      jobs.append(Job(labeller, scheme, store, texts, todo))
  return jobs


def make_backend(labeller: Labeller, s: Settings,
                 codebook: codebook_lib.Codebook) -> asking.TextBackend:
  b = labeller.label.backend
  if b == "openai":
    if jax.process_count() > 1:
      raise app.UsageError("an API labeller on a multi-host run is not supported: run the "
                           "analysis on one host (its shards may run on many)")
    client = openai_compat.OpenAIBackend(labeller.openai, f"{labeller.role} labeller")
    client.preflight()
    return client
  if b == "local":
    return backends.LocalBackend(load_party(labeller.local, s.mesh.make(), s.analysis.scan_layers),
                                 temperature=labeller.local.temperature, seed=s.analysis.seed)
  return labelling.RuleLabeller(codebook)


def label(jobs: list, s: Settings, codebook: codebook_lib.Codebook) -> str | None:
  """Asks every job's texts in batches, appending each batch's rows; the signal that
  stopped it, if one did."""
  made, shard = {}, s.shard
  for job in jobs:  # API labellers are checked before any local model loads.
    if job.todo and job.labeller.role not in made and job.labeller.label.backend == "openai":
      made[job.labeller.role] = make_backend(job.labeller, s, codebook)
  with stopping.StopRequest("the current batch of labels") as signals:
    for job in jobs:
      if not job.todo:
        continue
      if job.labeller.role not in made:
        made[job.labeller.role] = make_backend(job.labeller, s, codebook)
      size = job.labeller.label.batch_units
      logging.info("%s: %d %s texts to label", job.labeller.role, len(job.todo), job.scheme)
      for start in range(0, len(job.todo), size):
        rows = labelling.label_texts(job.todo[start:start + size], job.scheme,
                                     job.labeller.label.prompt(job.scheme),
                                     made[job.labeller.role], job.labeller.label.rounds,
                                     codebook, job.stats)
        job.store.append(rows, shard.shard, shard.num_shards)
        if signals.requested:
          return signals.requested
  return None


# -- The report ----------------------------------------------------------------------------

def scheme_units(s: Settings, responses: dict) -> dict:
  """{scheme: {condition: [Unit]}} of every scheme some labeller labels (sampled)."""
  schemes = [x for x in labelling.SCHEMES if any(x in lab.label.names for lab in s.labellers)]
  a = s.analysis
  return {scheme: {c: labelling.sample(labelling.units(c, rs, scheme, a.thinking_unit),
                                       a.sample, a.seed, scheme) for c, rs in responses.items()}
          for scheme in schemes}


def results_of(job: Job, units: dict, cache: dict) -> summary_lib.SchemeResult:
  labels, causes = {}, {}
  for c, us in units.items():
    rows = [cache[labelling.key(u.text)] for u in us]
    labels[c] = [r.label for r in rows]
    causes[c] = collections.Counter(r.cause or "unknown" for r in rows if r.label is None)
  return summary_lib.SchemeResult(job.scheme, labels, causes)


def reliability(jobs: list, caches: dict, results: dict) -> list:
  """A row per labeller and scheme (reliability.md), κ of the second against the first."""
  rows = []
  for job in jobs:
    r = results[job.labeller.role, job.scheme]
    n = sum(len(v) for v in r.labels.values())
    labelled = sum(len(r.labelled(c)) for c in r.labels)
    row = {"role": job.labeller.role, "labeller": job.labeller.describe(), "scheme": job.scheme,
           "units": n, "texts": len(job.texts), "labelled": labelled, "failures": n - labelled,
           "causes": dict(sum(r.causes.values(), collections.Counter())),
           "asked_this_run": dict(job.stats)}
    first = caches.get(("label", job.scheme))
    if job.labeller.role != "label" and first is not None:
      keys = {labelling.key(t) for t in job.texts}
      mine = caches[job.labeller.role, job.scheme]
      row["kappa"], row["kappa_texts"] = significance.kappa(
          {k: first[k].label for k in keys if k in first},
          {k: mine[k].label for k in keys if k in mine})
    rows.append(row)
  return rows


def write_report(s: Settings, workdir: str, conditions: dict, responses: dict, per_response: dict,
                 jobs: list, units: dict, codebook: codebook_lib.Codebook) -> list:
  """Tables, figures, analysis.md and analysis.json; the paths written."""
  a = s.analysis
  caches = {(j.labeller.role, j.scheme): j.store.read() for j in jobs}
  results = {(j.labeller.role, j.scheme): results_of(j, units[j.scheme],
                                                    caches[j.labeller.role, j.scheme])
             for j in jobs}
  first = {scheme: r for (role, scheme), r in results.items() if role == "label"}
  groups = significance.parse_groups(a.groups)
  stats = summary_lib.response_summary(per_response, a.total)
  tables = {"response_statistics": ("Tables 3 and 9: words per response", report.response_table(
      stats))}
  cols, top = [], []
  if "codebook" in first:
    cols = summary_lib.columns(a.columns, list(conditions), groups)
    skipped = [c.strip() for c in a.columns.split(",") if c.strip()
               and c.strip() not in [x.name for x in cols]]
    if skipped:
      logging.warning("columns %s left out: not all of their conditions are analysed; "
                      "columns: %s", skipped, [x.name for x in cols])
    top = summary_lib.top_codes(first["codebook"], cols, codebook, a.top_codes, a.confidence,
                                a.top_codes_rank)
    tables["major_categories"] = ("Table 4: major categories (sentence level, %)",
                                  report.category_table(first["codebook"], cols, codebook,
                                                        a.confidence))
    tables["top_codes"] = (f"Table 11: the {a.top_codes} most frequent codes (%)",
                           report.codes_table(top, cols))
  phases = {}
  if "schoenfeld" in first:
    phases = summary_lib.phase_shares(first["schoenfeld"], a.confidence)
    tables["schoenfeld_phases"] = ("Table 10: Schoenfeld phases of the thinking (%)",
                                   report.phase_table(phases, first["schoenfeld"]))
  tests = summary_lib.run_tests(significance.parse_comparisons(a.comparisons), first, groups,
                                codebook)
  tables["chi_square"] = ("Table 8: χ² tests between conditions", report.chi_square_table(tests))
  tables["shares"] = (f"Every share with its {a.confidence:.0%} Wilson interval",
                      report.shares_table(first, codebook, a.confidence))
  rel = reliability(jobs, caches, results)
  tables["reliability"] = ("Labeller reliability: failures (never filled in) and Cohen's κ",
                           report.reliability_table(rel))
  paths = _write_tables(workdir, tables, "Transcript analysis (paper 001 section 4)",
                        conditions, s)
  if a.figures:
    plt = report.pyplot()
    footer = report.footer_text(s.labellers[0].describe(),
                                sum(len(v) for v in per_response.values()))
    colors = report.condition_colors(plt, list(conditions))
    figs = report.response_figures(plt, per_response, stats, colors, a.confidence, footer)
    if phases:
      figs["schoenfeld_phases"] = report.phase_figure(plt, phases, footer, a.confidence)
    if "codebook" in first and cols:
      figs.update(report.codebook_figures(plt, first["codebook"], cols, codebook, top, footer,
                                          a.confidence))
    paths += report.save(figs, os.path.join(workdir, "figures"))
  summary = {
      "conditions": conditions, "settings": dataclasses.asdict(a),
      "labellers": [{"role": x.role, "describe": x.describe(), **dataclasses.asdict(x.label)}
                    for x in s.labellers],
      "responses": {c: dataclasses.asdict(v) for c, v in stats.items()},
      "shares": _shares_json(first, codebook, a.confidence),
      "tests": [{"comparison": dataclasses.asdict(t.comparison), "table": t.table,
                 "levels": t.levels, "skipped": t.skipped,
                 **(dataclasses.asdict(t.result) if t.result else {})} for t in tests],
      "reliability": rel}
  files.write_json(os.path.join(workdir, "analysis.json"), _finite(summary))
  files.append_rows([{"condition": c, "dialogue": r.dialogue, "turn": r.turn,
                      **dataclasses.asdict(st)}
                     for c, rs in per_response.items() for r, st in zip(responses[c], rs)],
                    os.path.join(workdir, "response_stats.jsonl"), mode="w")
  return paths + [os.path.join(workdir, "analysis.json")]


def _finite(value):
  """NaN as null (strict JSON)."""
  if isinstance(value, float) and value != value:
    return None
  if isinstance(value, dict):
    return {str(k): _finite(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [_finite(v) for v in value]
  return value


def _shares_json(first: dict, codebook, confidence: float) -> dict:
  out = {}
  for scheme, r in first.items():
    levels = ({"categories": (codebook.categories, codebook.category_of),
               "codes": ([c.id for c in codebook.codes], lambda x: x)} if scheme == "codebook"
              else {"phases": (labelling.PHASES, lambda x: x)})
    out[scheme] = {name: {c: {str(k): dataclasses.asdict(v) for k, v in
                              r.shares(c, ks, by, confidence).items()
                              if v.count or name != "codes"}
                          for c in r.labels} for name, (ks, by) in levels.items()}
    out[scheme]["failures"] = {c: dict(v) for c, v in r.causes.items()}
  return out


def _write_tables(workdir: str, tables: dict, title: str, conditions: dict, s) -> list:
  folder = os.path.join(workdir, "tables")
  os.makedirs(folder, exist_ok=True)
  paths = []
  for stem, (caption, body) in tables.items():
    paths.append(os.path.join(folder, f"{stem}.md"))
    with open(paths[-1], "w") as f:
      f.write(f"### {caption}\n\n{body}\n")
  head = [f"# {title}", ""]
  if conditions:
    head += ["Conditions: " + ", ".join(f"{c} ({w})" for c, w in conditions.items()), "",
             "Labellers: " + "; ".join(f"{x.role}: {x.describe()}" for x in s.labellers), ""]
  name = "analysis.md" if conditions else "views.md"
  with open(os.path.join(workdir, name), "w") as f:
    f.write("\n".join(head) + "\n" + "\n\n".join(f"## {c}\n\n{b}" for c, b in tables.values())
            + "\n")
  return paths + [os.path.join(workdir, name)]


def transcripts(s: Settings, workdir: str) -> list:
  """Labels this shard's texts; the report's paths once every label is there, else []."""
  conditions = responses_lib.parse_runs(s.analysis.runs)
  responses = {c: responses_lib.load(c, w) for c, w in conditions.items()}
  codebook = codebook_lib.load(s.analysis.codebook_file or codebook_lib.PAPER_CODEBOOK)
  significance.parse_groups(s.analysis.groups)  # Malformed settings fail before labelling.
  significance.parse_comparisons(s.analysis.comparisons)
  per_response = {c: [text_lib.response_stats(r.visible, r.thinking) for r in rs]
                  for c, rs in responses.items()}
  units = scheme_units(s, responses)
  jobs = plan(s, workdir, units, codebook)
  for job in jobs:
    logging.info("%s %s: %d distinct texts, %d to label in shard %d of %d", job.labeller.role,
                 job.scheme, len(job.texts), len(job.todo), s.shard.shard, s.shard.num_shards)
  stopped = label(jobs, s, codebook)
  exit_on_signal(stopped, "a batch boundary (labels so far written)")
  missing = {(j.labeller.role, j.scheme): sum(labelling.key(t) not in cache for t in j.texts)
             for j in jobs for cache in [j.store.read()]}
  if any(missing.values()):
    left = ", ".join(f"{r} {sch}: {n}" for (r, sch), n in missing.items() if n)
    logging.warning("texts other shards still have to label (%s); run any shard again once "
                    "they have finished to write the report", left)
    print(f"labelled shard {s.shard.shard} of {s.shard.num_shards}; waiting for: {left}")
    return []
  return write_report(s, workdir, conditions, responses, per_response, jobs, units, codebook)


# -- Data views ----------------------------------------------------------------------------

def views(s: Settings, workdir: str) -> list:
  v, tables, figs = s.views, {}, {}
  plt = report.pyplot() if s.analysis.figures else None
  footer = f"pedrl data views, {time.strftime('%Y-%m-%d')}"
  if v.problems_path:
    train, test = data_views.split_problems(v)
    tables["dataset"] = ("Paper 003 table 1: the problems by source, with the student's "
                         "pre-dialogue solve rate", data_views.dataset_table(train, test))
    if v.solve_rates_workdir:
      rates, what = {"measured": list(data_views.measured_rates(v.solve_rates_workdir).values())}, (
          f"measured in {v.solve_rates_workdir}")
    else:
      rates = {"train": [p.solve_rate for p in train if p.solve_rate is not None],
               "test": [p.solve_rate for p in test if p.solve_rate is not None]}
      what = "the file's llama8b_solve_rate"
    if not any(rates.values()):
      raise AnalysisError(f"{v.problems_path}: no solve rates for fig. 3 (no llama8b_solve_rate "
                          "field; give --config.views.solve_rates_workdir=EVAL_WORKDIR)")
    if plt:
      figs["solve_rates"] = data_views.solve_rate_figure(plt, rates, v.edges, what, footer)
  if v.sweep:
    runs = data_views.read_sweep(v)
    tables["rollouts"] = ("Paper 000 fig. 3: rollouts per problem", data_views.sweep_table(runs))
    if plt:
      figs["rollouts"] = data_views.sweep_figure(plt, runs, footer)
  paths = _write_tables(workdir, tables, "Data views (papers 003 and 000)", {}, s)
  return paths + (report.save(figs, os.path.join(workdir, "figures")) if figs else [])


@job_main(single_process="analyze labels transcripts through its judge and draws figures on "
                          "the host; several processes would each repeat the work")
def main(config: ml_collections.ConfigDict, workdir: str) -> None:
  s = read(config)
  if not (s.analysis.runs or s.views.problems_path or s.views.sweep):
    raise app.UsageError("nothing to analyse: give --config.runs='NAME=WORKDIR,…' (evaluation or "
                         "rollout workdirs), --config.views.problems_path=FILE or "
                         "--config.views.sweep='G=WORKDIR,…'")
  if s.analysis.figures:  # Before any labelling: the figures come last.
    cli.require("analyze's figures (--config.figures=False: the tables only)", "matplotlib")
  name = workdir_lib.config_name(sys.argv)
  changed = workdir_lib.guard(workdir, "analyze", config, name)
  workdir_lib.record_start(workdir, "analyze", config, name, changed)
  workdir_lib.write_config(workdir, config)
  start, paths = time.perf_counter(), []
  try:
    if s.analysis.runs:
      paths += transcripts(s, workdir)
    if s.views.problems_path or s.views.sweep:
      paths += views(s, workdir)
  except (AnalysisError, labelling.LabelError, ImportError) as e:  # One line, no traceback.
    raise app.UsageError(str(e)) from None
  for path in paths:
    print(path)
  print(f"seconds={time.perf_counter() - start:.1f}")
  if paths:
    workdir_lib.print_results(workdir, "analysis.md", "views.md", "tables", "figures",
                              "analysis.json")


if __name__ == "__main__":
  cli.run(main)
