"""`python -m pedrl.tools.check_parity` on checkpoints built here, not in testdata."""
import subprocess
import sys

import transformers

import reference


def run_tool(*args):
  proc = subprocess.run([sys.executable, "-m", "pedrl.tools.check_parity", *args],
                        capture_output=True, text=True, timeout=300)
  lines = proc.stdout.strip().splitlines()
  return proc.returncode, lines, proc.stderr


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

  rc, lines, _ = run_tool(f"--hf_dir={tmp_path}", "--atol=1e-12")
  assert rc == 1 and "verdict=FAIL" in lines


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
