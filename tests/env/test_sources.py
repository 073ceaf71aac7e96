"""Data through tensorflow-datasets: a TFDS split gives the records its file gives.

A tiny TFDS dataset is built here from testdata files (a GeneratorBasedBuilder per
layout, prepared into a temporary TFDS data directory; no network), then read through
pedrl's one loader as `tfds:NAME[/CONFIG]:SPLIT`, beside the same rows from the files.
"""
import csv
import json
import os

import numpy as np
import pytest

from pedrl.env import problems as P, sources
from pedrl.eval import reasoning

tfds = pytest.importorskip("tensorflow_datasets",
                           reason="tensorflow-datasets is not installed (pip install pedrl[data])")

TESTDATA = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "testdata"))
PUBLISHED = os.path.join(TESTDATA, "problems", "bigmath_published_sample.jsonl")
REASONING = os.path.join(TESTDATA, "reasoning")
Text = tfds.features.Text


def _jsonl(path):
  return [json.loads(line) for line in open(path) if line.strip()]


def _mmlu_csv(kind):
  """{subject: rows} of the testdata MMLU directory, in the Hugging Face layout."""
  folder = os.path.join(REASONING, "mmlu", kind)
  out = []
  for name in sorted(os.listdir(folder)):
    subject = name[:-len(f"_{kind}.csv")]
    for r in csv.reader(open(os.path.join(folder, name), newline="")):
      out.append({"question": r[0], "subject": subject, "choices": r[1:5],
                  "answer": "ABCD".index(r[5].strip())})
  return out


def _builder(name, features, splits):
  """A GeneratorBasedBuilder class named `name` whose splits are lists of dicts, kept in order
  (TFDS's writer would shuffle them; its Hugging Face builder does)."""
  def _info(self):
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(features),
                                 disable_shuffling=True)

  def _split_generators(self, dl_manager):
    del dl_manager
    return {split: self._generate_examples(rows) for split, rows in splits.items()}

  def _generate_examples(self, rows):
    for i, row in enumerate(rows):
      yield i, row

  return type(name, (tfds.core.GeneratorBasedBuilder,), dict(
      VERSION=tfds.core.Version("1.0.0"), _info=_info, _split_generators=_split_generators,
      _generate_examples=_generate_examples, __module__=__name__,
      # No code folder, so no checksums file to look for: TFDS finds a builder's folder
      # through its top package (here `tests`), which needs the importlib_resources
      # backport it does not install.
      code_path=None))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
  """Three tiny TFDS datasets prepared as array_record files, the way pedrl reads them."""
  root = str(tmp_path_factory.mktemp("tfds"))
  builders = [
      _builder("PedrlBigmath", dict(problem=Text(), answer=Text(), source=Text(),
                                    domain=tfds.features.Sequence(Text()),
                                    llama8b_solve_rate=np.float64),
               {"test": _jsonl(PUBLISHED)}),
      _builder("PedrlGsm8k", dict(question=Text(), answer=Text()),
               {"test": _jsonl(os.path.join(REASONING, "gsm8k_sample.jsonl"))}),
      _builder("PedrlMath500", dict(problem=Text(), answer=Text(), subject=Text(),
                                    unique_id=Text()),
               {"test": _jsonl(os.path.join(REASONING, "math500_sample.jsonl"))}),
      _builder("PedrlMmlu", dict(question=Text(), subject=Text(),
                                 choices=tfds.features.Sequence(Text()), answer=np.int32),
               {"test": _mmlu_csv("test"), "dev": _mmlu_csv("dev")}),
  ]
  for cls in builders:
    cls(data_dir=root, file_format="array_record").download_and_prepare()
  return root


@pytest.fixture
def tfds_dir(data_dir, monkeypatch):
  monkeypatch.setenv("TFDS_DATA_DIR", data_dir)  # TFDS's own setting, read at each call.
  return data_dir


def test_sources_name_a_tfds_split_or_a_path():
  assert sources.tfds_split("data/x.jsonl") is None
  assert sources.tfds_split("tfds:gsm8k/main:test") == sources.TfdsSplit("gsm8k/main", "test")
  hf = sources.tfds_split("tfds:huggingface:rd211__big_math_rl_verified_filtered:test")
  assert hf == sources.TfdsSplit("huggingface:rd211__big_math_rl_verified_filtered", "test")
  with pytest.raises(sources.DataError, match="tfds:NAME"):
    sources.tfds_split("tfds:gsm8k")


def test_the_published_split_from_tfds_equals_the_file(tfds_dir):
  del tfds_dir
  n = len(_jsonl(PUBLISHED))
  settings = dict(split="published", filter=False, on_error="fatal", n_test=n)
  want, _ = P.load(P.ProblemSettings(path=PUBLISHED, **settings))
  got, report = P.load(P.ProblemSettings(path="tfds:pedrl_bigmath:test", **settings))
  assert report.rows == n and not report.skipped
  # The same records in the same order: texts, answers, sources, domains as tuples of str,
  # and the rates (float64 kept).
  assert got == want
  # A pool split the same way gives the same problems: the split does not depend on order.
  pool = dict(split="test", filter=True, n_test=5, n_train=3)
  assert (P.load(P.ProblemSettings(path="tfds:pedrl_bigmath:test", **pool))[0]
          == P.load(P.ProblemSettings(path=PUBLISHED, **pool))[0])
  with pytest.raises(P.DataError, match="tfds:pedrl_bigmath:test: .* published test split"):
    P.load(P.ProblemSettings(path="tfds:pedrl_bigmath:test", **dict(settings, n_test=n + 1)))


def test_reasoning_benchmarks_from_tfds_equal_the_files(tfds_dir):
  del tfds_dir
  shots = dict(gsm8k_shots_path="tfds:pedrl_gsm8k:test", gsm8k_shots=2)
  files = reasoning.ReasoningSettings(
      benchmarks="gsm8k,math500,mmlu", gsm8k_path=f"{REASONING}/gsm8k_sample.jsonl",
      math500_path=f"{REASONING}/math500_sample.jsonl", mmlu_path=f"{REASONING}/mmlu",
      **dict(shots, gsm8k_shots_path=f"{REASONING}/gsm8k_sample.jsonl"))
  via = reasoning.ReasoningSettings(
      benchmarks="gsm8k,math500,mmlu", gsm8k_path="tfds:pedrl_gsm8k:test",
      math500_path="tfds:pedrl_math500:test", mmlu_path="tfds:pedrl_mmlu:test", **shots)
  # The same examples: ids, prompts (shots included; MMLU's 5 dev rows of each subject from
  # the dataset's dev split) and targets.
  assert reasoning.examples(via) == reasoning.examples(files)


def test_a_missing_tfds_dataset_is_one_clear_error(tfds_dir):
  del tfds_dir
  with pytest.raises(sources.DataError, match="tfds:no_such_set:test: TFDS cannot read it"):
    sources.json_rows("tfds:no_such_set:test")
