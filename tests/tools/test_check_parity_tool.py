"""`python -m pedrl.tools.check_parity` on checkpoints built here and on the testdata models."""
import json
import os
import shutil
import subprocess
import sys

import pytest
import transformers

from tests.helpers import reference
from pedrl.models import bert
from pedrl.models import config as model_config
from pedrl.tools import check_parity


def run_tool(*args):
  proc = subprocess.run([sys.executable, "-m", "pedrl.tools.check_parity", *args],
                        capture_output=True, text=True, timeout=300)
  lines = proc.stdout.strip().splitlines()
  return proc.returncode, lines, proc.stderr


@pytest.mark.job
def test_passes_on_a_fresh_checkpoint_and_fails_when_tolerance_is_impossible(tmp_path):
  config = transformers.Qwen3Config(
      vocab_size=500, hidden_size=96, intermediate_size=120, num_hidden_layers=3,
      num_attention_heads=6, num_key_value_heads=2, head_dim=24, tie_word_embeddings=True,
      initializer_range=0.2, max_position_embeddings=256)
  reference.build(config, transformers.Qwen3ForCausalLM, str(tmp_path), seed=11)
  rc, lines, err = run_tool(f"--hf_dir={tmp_path}", "--generate=8")
  assert rc == 0, err[-2000:]
  assert lines[-1].startswith("max_abs_logit_diff=")
  assert float(lines[-1].split("=")[1]) <= 1e-4
  assert "greedy_tokens_equal=true" in lines

  rc, lines, _ = run_tool(f"--hf_dir={tmp_path}", "--rtol=1e-12")
  assert rc == 1 and "verdict=FAIL" in lines


@pytest.mark.job
def test_sequence_classifier_and_clear_error_for_generate(tmp_path):
  config = transformers.LlamaConfig(
      vocab_size=300, hidden_size=64, intermediate_size=100, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=1, num_labels=3, pad_token_id=0,
      initializer_range=0.2)
  reference.build(config, transformers.LlamaForSequenceClassification, str(tmp_path), seed=12)
  rc, lines, err = run_tool(f"--hf_dir={tmp_path}")
  assert rc == 0, err[-2000:]
  assert "task=seq_cls" in lines[0]
  rc, _, err = run_tool(f"--hf_dir={tmp_path}", "--generate=4")
  assert rc != 0 and "--generate needs a causal_lm checkpoint" in err


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_embed_also_compares_vectors_pooled_as_the_embedder_pools(testdata, tmp_path, monkeypatch,
                                                                  pooling):
  path = testdata("bert")
  if pooling == "mean":  # A sentence-transformers pooling config asks for the mean.
    path = str(tmp_path / "bert")
    shutil.copytree(testdata("bert"), path)
    os.makedirs(os.path.join(path, "1_Pooling"))
    with open(os.path.join(path, "1_Pooling", "config.json"), "w") as f:
      f.write('{"pooling_mode_mean_tokens": true}')
  modes = []
  monkeypatch.setattr(bert, "pool", lambda h, m, mode, pool=bert.pool: modes.append(mode) or
                      pool(h, m, mode))
  result = check_parity.compare(path)
  assert modes == [pooling] and result["task"] == "embed"
  assert result["max_abs_logit_diff"] <= 1e-4 and result["max_abs_pooled_diff"] <= 1e-4


@pytest.mark.parametrize("name", ["qwen2", "qwen2_tied", "qwen3", "llama3"])
def test_greedy_tokens_match_up_to_eos_on_every_testdata_decoder(testdata, name):
  # 16 rows x 24 tokens from seed 0: in every family some reference row ends at an EOS.
  result = check_parity.compare(testdata(name), generate=24, batch=16)
  assert result["greedy_tokens_equal"], result.get("first_token_mismatch")
  assert result["rows_ending_at_eos"] >= 1
  assert result["max_abs_logit_diff"] <= 1e-4


def test_the_checkpoints_own_sampling_settings_do_not_reach_the_greedy_reference(testdata, tmp_path):
  # Qwen2.5-Instruct's generation_config.json: transformers' generate would merge its
  # repetition penalty into a greedy reference and fail a correct port.
  hf_dir = tmp_path / "qwen2"
  shutil.copytree(testdata("qwen2"), hf_dir)
  gen = json.loads((hf_dir / "generation_config.json").read_text())
  gen.update(do_sample=True, repetition_penalty=1.05, temperature=0.7, top_p=0.8, top_k=20)
  (hf_dir / "generation_config.json").write_text(json.dumps(gen))
  result = check_parity.compare(str(hf_dir), generate=32)
  assert result["greedy_tokens_equal"], result.get("first_token_mismatch")


@pytest.mark.job
def test_cli_passes_on_testdata_qwen3_whose_reference_stops_at_eos(testdata):
  rc, lines, err = run_tool(f"--hf_dir={testdata('qwen3')}", "--generate=16")
  assert rc == 0, "\n".join(lines) + "\n" + err[-2000:]  # A string: shown whole, not cut.
  assert int(lines[0].split("rows_ending_at_eos=")[1].split("/")[0]) >= 1
  assert lines[1:3] == ["verdict=PASS", "greedy_tokens_equal=true"]


def test_an_early_eos_or_a_difference_up_to_the_eos_is_still_a_mismatch(testdata, monkeypatch):
  hf_dir = testdata("qwen3")
  seen = {}
  def record(fn, key):
    def wrapped(*args):
      seen[key] = fn(*args)
      return seen[key]
    return wrapped
  monkeypatch.setattr(check_parity, "reference_outputs",
                      record(check_parity.reference_outputs, "ref"))
  monkeypatch.setattr(check_parity, "pedrl_outputs", record(check_parity.pedrl_outputs, "ours"))
  assert check_parity.compare(hf_dir, generate=16)["greedy_tokens_equal"]
  ref, (logits, ours) = seen["ref"][1], seen["ours"]
  (eos,) = model_config.from_hf(hf_dir).eos_token_ids
  ends = [(r, list(ref[r]).index(eos)) for r in range(len(ref)) if eos in ref[r]]
  assert ends and len(ends) < len(ref), ref  # Needs a row that ends and one that does not.
  (r, k), s = ends[0], next(s for s in range(len(ref)) if eos not in ref[s])
  assert 0 < k < ref.shape[1] - 1
  other = int(ref.max()) + 1  # Differs from every reference token, EOS included.

  # Replay both sides' recorded outputs, pedrl's with one token changed.
  monkeypatch.setattr(check_parity, "reference_outputs", lambda *args: seen["ref"])
  def tampered(row, step, token):
    changed = ours.copy()
    changed[row, step] = token
    monkeypatch.setattr(check_parity, "pedrl_outputs", lambda *args: (logits, changed))
    return check_parity.compare(hf_dir, generate=16)

  assert tampered(r, k + 1, other)["greedy_tokens_equal"]  # After the reference's EOS: ignored.
  for row, step, token in [(s, 1, eos),        # pedrl stops in a row the reference does not end.
                           (r, k - 1, eos),    # pedrl stops one step early.
                           (r, k, other),      # pedrl does not stop where the reference does.
                           (r, 0, other)]:     # an ordinary token before the EOS.
    result = tampered(row, step, token)
    assert not result["greedy_tokens_equal"]
    assert result["first_token_mismatch"] == (row, step, token, int(ref[row, step]))


def test_a_port_that_drops_qwen2s_attention_biases_fails(tmp_path, monkeypatch):
  # SmolLM2 (the real tier's model) has no biases, and transformers initialises Qwen2's
  # q/k/v biases (testdata's too) to zero: this checkpoint's are drawn like its weights.
  import torch
  from pedrl import models
  config = transformers.Qwen2Config(
      vocab_size=300, hidden_size=64, intermediate_size=100, num_hidden_layers=2,
      num_attention_heads=4, num_key_value_heads=2, initializer_range=0.2)
  torch.manual_seed(13)
  model = transformers.Qwen2ForCausalLM(config).eval()
  with torch.no_grad():
    for layer in model.model.layers:
      for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
        proj.bias.normal_(0.0, 0.2)
  model.save_pretrained(tmp_path)
  assert check_parity.verdict(check_parity.compare(str(tmp_path)), check_parity.RTOL["float32"])

  load = models.load
  def without_biases(*args, **kwargs):
    cfg, module, params = load(*args, **kwargs)
    attn = params["layers"]["attn"]
    for name in ("q", "k", "v"):
      attn[name]["bias"] = attn[name]["bias"] * 0
    return cfg, module, params
  monkeypatch.setattr(models, "load", without_biases)
  result = check_parity.compare(str(tmp_path))
  assert not check_parity.verdict(result, check_parity.RTOL["float32"]), result
  assert result["max_rel_logit_diff"] > 100 * check_parity.RTOL["float32"]
