"""The reproduction matrix (docs/reproduction.md) cannot rot: every config it names loads
(every key read, every setting valid, only model and data paths left to give), and every
differences-table row it cites exists."""
import os
import re

import pytest

import jobs
from jobs import ROOT
from pedrl.jobs import settings

PAGE = os.path.join(ROOT, "docs", "reproduction.md")
DIFFERENCES = os.path.join(ROOT, "docs", "paper-differences.md")
COMMAND = re.compile(r"`experiments/(\w+)\.py:([^`\s]+)`")


def _rows():
  """(paper section, row cells) of the page's tables."""
  section, out = None, []
  for line in open(PAGE, encoding="utf-8"):
    if line.startswith("## "):
      section = line[3:].strip()
    elif line.startswith("| ") and not line.startswith(("| table", "|---")):
      out.append((section, [c.strip() for c in line.strip().strip("|").split(" | ")]))
  return out


def _commands():
  return sorted({m for _, cells in _rows() for m in COMMAND.findall(" ".join(cells))})


def _read(job, variant):
  c = jobs.config(job, variant)
  if job == "evaluate" and "reasoning" in variant:  # Data paths are the user's to give.
    data = os.path.join(ROOT, "testdata", "reasoning")
    c.eval.reasoning.update(gsm8k_path=f"{data}/gsm8k_sample.jsonl",
                                    math500_path=f"{data}/math500_sample.jsonl",
                                    mmlu_path=f"{data}/mmlu")
  if job == "evaluate" and "wbeb" in variant:
    c.eval.reasoning.wbeb_path = os.path.join(ROOT, "testdata", "reasoning", "wbeb_sample.jsonl")
  if job == "analyze":
    from pedrl.experiments import analyze
    return analyze.read(c)
  if job == "baselines":  # The baseline data job's config.
    from pedrl.experiments import baseline_data
    return baseline_data.read(c)
  if job in ("sft", "mdpo"):  # The offline jobs' configs.
    from pedrl.rl import dpo, offline_data, sft
    return settings.read_offline_settings(c, *{"sft": (sft.SFTObjective,
                                                       offline_data.SequenceSettings),
                                               "mdpo": (dpo.DPOObjective,)}[job])
  if job in ("mathtutorbench", "cpa"):  # Their jobs read their own sections.
    from pedrl.experiments import cpa, mathtutorbench
    return {"mathtutorbench": mathtutorbench, "cpa": cpa}[job].read(c)
  return settings.read_settings(c, {"evaluate": settings.EvaluationSettings,
                                   "rollout": settings.DialogueSettings}.get(
                                       job, settings.TrainingSettings))


def test_the_page_covers_every_paper_and_names_commands():
  sections = {s for s, _ in _rows()}
  assert {"Paper 003: PedagogicalRL", "Paper 001: PedagogicalRL-Thinking", "Paper 000: UCO",
          "Paper 002: CPA"} <= sections
  for _, cells in _rows():
    assert len(cells) == 4 and cells[3].startswith(("faithful", "deviates", "cannot")), cells
  assert len(_commands()) > 30


@pytest.mark.parametrize("job, variant", _commands())
def test_every_config_the_matrix_names_loads(job, variant):
  _read(job, variant)  # UnreadKeys, an unknown variant or a refused value fail here.


def test_every_cited_difference_is_a_row_of_the_differences_table():
  rows = {line.split(" | ")[0].lstrip("| ").strip() for line in open(DIFFERENCES,
                                                                     encoding="utf-8")
          if line.startswith("| ")}
  cited = {name for _, cells in _rows() if cells[3].startswith("deviates")
           for name in re.findall(r'"([^"]+)"', cells[3])}
  assert cited and not cited - rows, sorted(cited - rows)
