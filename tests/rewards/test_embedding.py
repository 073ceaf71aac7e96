"""Sentence embeddings against transformers (tiny BERT; MiniLM when its package is installed)."""
import os

import numpy as np
import pytest

from pedrl.rewards import embedding

from tests.helpers import reference

TEXTS = ["The answer is 4.", "I think we add the two numbers and get four in the end.", "Hm?"]


def _reference_vectors(path, texts, pooling):
  import torch
  model = reference.load(path, "embed")
  tok = embedding.load_tokenizer(path)
  enc = tok(texts, padding=True, return_tensors="pt")
  with torch.no_grad():
    hidden = model(**enc).last_hidden_state
  if pooling == "cls":
    vec = hidden[:, 0]
  else:
    m = enc["attention_mask"][..., None].float()
    vec = (hidden * m).sum(1) / m.sum(1)
  return torch.nn.functional.normalize(vec, dim=-1).numpy()


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_embedder_equals_transformers(testdata, pooling):
  path = testdata("bert")
  emb = embedding.Embedder(path, pooling=pooling, batch_size=2)  # Two batches, padded rows.
  got = emb(TEXTS)
  assert got.shape == (3, emb.cfg.hidden_size)
  np.testing.assert_allclose(got, _reference_vectors(path, TEXTS, pooling), atol=1e-5)
  np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
  assert emb([]).shape == (0, emb.cfg.hidden_size)


def test_pooling_comes_from_the_sentence_transformers_config(testdata, tmp_path):
  assert embedding.pooling_of(testdata("bert")) == "cls"
  (tmp_path / "1_Pooling").mkdir()
  (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
  assert embedding.pooling_of(str(tmp_path)) == "mean"


def test_minilm_from_its_pypi_package(tmp_path):
  pytest.importorskip("all_minilm_l6_v2")
  path = embedding.minilm_path(str(tmp_path))
  assert os.path.isfile(os.path.join(path, "model.safetensors"))
  assert embedding.minilm_path(str(tmp_path)) == path  # Extracted once.
  emb = embedding.Embedder(path)
  assert emb.pooling == "mean" and emb.cfg.hidden_size == 384
  np.testing.assert_allclose(emb(TEXTS), _reference_vectors(path, TEXTS, "mean"), atol=1e-4)
