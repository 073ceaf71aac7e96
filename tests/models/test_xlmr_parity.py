"""XLM-RoBERTa (BGE-M3's architecture) equals transformers' XLMRobertaModel, pooled vectors too."""
import json
import string
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from tests.helpers import reference
from pedrl import models
from pedrl.models.bert import pool
from pedrl.rewards import embedding

PAD = 1  # XLM-R's <pad>: positions of real tokens start at PAD + 1.
MAX_POSITIONS = 41  # Odd, and 39 usable tokens after the offset of 2.


def tiny_tokenizer():
  """A Unigram XLM-R tokenizer (<s>=0, <pad>=1, </s>=2, <unk>=3, <mask> last), built offline."""
  words = "the answer is we add two numbers and get four in end I think Hm".split()
  pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
  pieces += [("▁" + w, -2.0) for w in words] + [("▁", -3.0)]
  pieces += [(c, -5.0) for c in string.ascii_letters + string.digits + ".?,!"] + [("<mask>", 0.0)]
  return transformers.XLMRobertaTokenizer(vocab=pieces)


def xlmr_config(vocab_size, **kw):
  return transformers.XLMRobertaConfig(
      vocab_size=vocab_size, hidden_size=36, num_hidden_layers=3, num_attention_heads=3,
      intermediate_size=52, max_position_embeddings=MAX_POSITIONS, type_vocab_size=1,
      layer_norm_eps=1e-5, pad_token_id=PAD, initializer_range=0.2, **kw)


@pytest.fixture(scope="module")
def xlmr(tmp_path_factory):
  """A BGE-M3-shaped sentence-transformers directory: XLMRobertaModel, tokenizer, CLS pooling."""
  path = tmp_path_factory.mktemp("xlmr")
  tok = tiny_tokenizer()
  hf = reference.build(xlmr_config(len(tok)), transformers.XLMRobertaModel, str(path), seed=5)
  tok.save_pretrained(str(path))
  (path / "1_Pooling").mkdir()
  (path / "1_Pooling" / "config.json").write_text(json.dumps(
      {"word_embedding_dimension": 36, "pooling_mode_cls_token": True,
       "pooling_mode_mean_tokens": False}))
  return str(path), hf, models.load(str(path))


def right_padded(rng, vocab, lengths, width):
  tokens = rng.integers(PAD + 1, vocab, (len(lengths), width))  # Real tokens are never <pad>.
  mask = np.arange(width)[None, :] < np.asarray(lengths)[:, None]
  return np.where(mask, tokens, PAD).astype(np.int32), mask


def normalised(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_config_counts_positions_past_the_pad_id(xlmr):
  cfg = xlmr[2][0]
  assert (cfg.model_type, cfg.task, cfg.type_vocab_size) == ("xlm-roberta", "embed", 1)
  assert (cfg.position_offset, cfg.max_tokens, cfg.norm_eps) == (PAD + 1, MAX_POSITIONS - 2, 1e-5)


def test_hidden_states_and_cls_vectors_match_transformers(xlmr):
  _, hf, (cfg, model, params) = xlmr
  # Row 0 fills all usable positions, so the table's last row is read.
  tokens, mask = right_padded(np.random.default_rng(0), cfg.vocab_size, [cfg.max_tokens, 22, 5],
                              cfg.max_tokens)
  hidden = model.apply({"params": params}, jnp.asarray(tokens), jnp.asarray(mask))
  ref = reference.forward(hf, tokens, mask)  # transformers derives positions from the pad ids.
  np.testing.assert_allclose(np.asarray(hidden)[mask], ref[mask], atol=1e-4, rtol=0)
  ours = np.asarray(pool(hidden, jnp.asarray(mask), "cls"))
  np.testing.assert_allclose(ours, normalised(ref[:, 0]), atol=1e-4, rtol=0)
  # BERT's positions (0, 1, ...) give other vectors: the offset is doing something.
  bert_positions = reference.forward(hf, tokens, mask, positions=np.cumsum(mask, 1) - 1)
  assert np.abs(bert_positions[mask] - ref[mask]).max() > 1e-2


def test_embedder_uses_cls_pooling_and_the_usable_length(xlmr):
  path, hf, _ = xlmr
  emb = embedding.Embedder(path, batch_size=2)  # Two batches, padded rows.
  assert (emb.pooling, emb.max_length) == ("cls", MAX_POSITIONS - 2)
  texts = ["The answer is 4.", "I think we add the two numbers and get four in the end. " * 3, "Hm?"]
  enc = emb.tokenizer(texts, padding=True, truncation=True, max_length=emb.max_length,
                      return_tensors="pt")
  assert enc["input_ids"].shape[1] == emb.max_length  # The long text was cut to fit.
  with torch.no_grad():
    ref = hf(**enc).last_hidden_state[:, 0].numpy()
  np.testing.assert_allclose(emb(texts), normalised(ref), atol=1e-4, rtol=0)


def test_too_long_inputs_name_the_usable_length(xlmr):
  path, _, (cfg, model, params) = xlmr
  tokens = np.full((1, MAX_POSITIONS - 1), 5, np.int32)
  with pytest.raises(ValueError, match=f"{MAX_POSITIONS - 1} tokens exceed the encoder's "
                                       f"{MAX_POSITIONS - 2} positions .*offset 2"):
    model.apply({"params": params}, jnp.asarray(tokens), jnp.ones_like(tokens))
  with pytest.raises(ValueError, match=f"at most {MAX_POSITIONS - 2}"):
    embedding.Embedder(path, max_length=MAX_POSITIONS)


@pytest.mark.job
def test_check_parity_tool_compares_hidden_states_and_pooled_vectors(xlmr):
  # 64 columns asked for: the tool must keep to the 39 usable positions (41 overflow the table).
  proc = subprocess.run([sys.executable, "-m", "pedrl.tools.check_parity", f"--hf_dir={xlmr[0]}",
                         "--task=embed", "--batch=4", "--seq_len=64"],
                        capture_output=True, text=True, timeout=300)
  lines = proc.stdout.strip().splitlines()
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "model_type=xlm-roberta task=embed" in lines[0]
  assert lines[1] == "verdict=PASS"
  measures = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
  assert float(measures["max_abs_pooled_diff"]) <= 1e-4
  assert float(measures["max_abs_logit_diff"]) <= 1e-4
  assert float(measures["max_rel_logit_diff"]) <= 1e-4


def test_checkpoint_under_a_task_head_loads_from_its_roberta_prefix(tmp_path):
  hf = reference.build(xlmr_config(90), transformers.XLMRobertaForMaskedLM, str(tmp_path), seed=6)
  cfg, model, params = models.load(str(tmp_path), task="embed")
  tokens, mask = right_padded(np.random.default_rng(1), 90, [17, 9], 17)
  ours = np.asarray(model.apply({"params": params}, jnp.asarray(tokens), jnp.asarray(mask)))
  np.testing.assert_allclose(ours[mask], reference.forward(hf.roberta, tokens, mask)[mask],
                             atol=1e-4, rtol=0)
