"""The BERT encoder equals transformers' BertModel; pooling matches its definition."""
import jax.numpy as jnp
import numpy as np
import pytest
import transformers

from tests.helpers import reference
from pedrl import models
from pedrl.models.bert import pool


def right_padded(rng, vocab, lengths, width):
  tokens = rng.integers(5, vocab, (len(lengths), width))
  mask = np.arange(width)[None, :] < np.asarray(lengths)[:, None]
  return np.where(mask, tokens, 0).astype(np.int32), mask


@pytest.fixture(scope="module")
def bert(testdata):
  path = testdata("bert")
  cfg, model, params = models.load(path)
  return cfg, model, params, reference.load(path, "embed")


def test_hidden_states_match_transformers(bert):
  cfg, model, params, hf = bert
  tokens, mask = right_padded(np.random.default_rng(0), cfg.vocab_size, [20, 13, 4], 20)
  ours = np.asarray(model.apply({"params": params}, jnp.asarray(tokens), jnp.asarray(mask)))
  ref = reference.forward(hf, tokens, mask)
  np.testing.assert_allclose(ours[mask], ref[mask], atol=1e-4, rtol=0)


def test_cls_and_mean_pooling_are_normalised_and_match_reference_hidden_states(bert):
  cfg, model, params, hf = bert
  tokens, mask = right_padded(np.random.default_rng(1), cfg.vocab_size, [9, 5], 9)
  hidden = model.apply({"params": params}, jnp.asarray(tokens), jnp.asarray(mask))
  ref = reference.forward(hf, tokens, mask)
  cls = ref[:, 0] / np.linalg.norm(ref[:, 0], axis=-1, keepdims=True)
  mean = np.stack([ref[r, mask[r]].mean(0) for r in range(2)])
  mean /= np.linalg.norm(mean, axis=-1, keepdims=True)
  np.testing.assert_allclose(np.asarray(pool(hidden, jnp.asarray(mask), "cls")), cls, atol=1e-5)
  np.testing.assert_allclose(np.asarray(pool(hidden, jnp.asarray(mask), "mean")), mean, atol=1e-5)
  with pytest.raises(ValueError, match="pooling"):
    pool(hidden, jnp.asarray(mask), "max")


def test_bert_variant_with_tanh_gelu(tmp_path):
  config = transformers.BertConfig(vocab_size=200, hidden_size=48, num_hidden_layers=3,
                                   num_attention_heads=3, intermediate_size=80,
                                   hidden_act="gelu_new", max_position_embeddings=64)
  hf = reference.build(config, transformers.BertModel, str(tmp_path), seed=3)
  cfg, model, params = models.load(str(tmp_path))
  tokens, mask = right_padded(np.random.default_rng(2), 200, [30, 17], 30)
  ours = np.asarray(model.apply({"params": params}, jnp.asarray(tokens), jnp.asarray(mask)))
  np.testing.assert_allclose(ours[mask], reference.forward(hf, tokens, mask)[mask], atol=1e-4)


def test_input_longer_than_position_table_is_an_error(bert):
  cfg, model, params, _ = bert
  tokens = np.ones((1, cfg.max_position_embeddings + 4), np.int32)
  with pytest.raises(ValueError, match="exceed the encoder's 128 positions"):
    model.apply({"params": params}, jnp.asarray(tokens), jnp.ones_like(tokens))
