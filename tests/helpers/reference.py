"""transformers (PyTorch, float32) as the reference the ports are checked against."""
import numpy as np
import torch
import transformers

AUTO = {"causal_lm": transformers.AutoModelForCausalLM,
        "seq_cls": transformers.AutoModelForSequenceClassification,
        "embed": transformers.AutoModel}


def _t(x):
  return torch.tensor(np.asarray(x, dtype=np.int64))


def load(path, task="causal_lm"):
  return AUTO[task].from_pretrained(path, dtype=torch.float32).eval()


def build(config, model_cls, path, seed=0):
  """Saves a random transformers model of `config` to `path` and returns it."""
  torch.manual_seed(seed)
  model = model_cls(config).eval()
  model.save_pretrained(path)
  return model


@torch.no_grad()
def forward(model, tokens, mask, positions=None):
  """Logits (or BERT hidden states) as numpy float32."""
  kwargs = dict(input_ids=_t(tokens), attention_mask=_t(mask))
  if positions is not None:
    kwargs["position_ids"] = _t(positions)
  out = model(**kwargs)
  return (out.logits if hasattr(out, "logits") else out.last_hidden_state).numpy()


@torch.no_grad()
def greedy(model, tokens, mask, n):
  # Greedy up to the checkpoint's EOS ids, with none of its other settings (a repetition
  # penalty would be merged into the call's unset fields).
  model.generation_config = transformers.GenerationConfig(
      eos_token_id=model.generation_config.eos_token_id)
  cfg = transformers.GenerationConfig(do_sample=False, max_new_tokens=n, eos_token_id=None,
                                      pad_token_id=0)
  out = model.generate(input_ids=_t(tokens), attention_mask=_t(mask), generation_config=cfg)
  return out[:, np.asarray(tokens).shape[1]:].numpy()


def left_padded(rng, vocab, pad_counts, length, avoid=0):
  """Random ids [B, length] with row r padded on the left by pad_counts[r]."""
  tokens = rng.integers(0, vocab, (len(pad_counts), length))
  tokens = np.where(tokens == avoid, avoid + 1, tokens)
  mask = np.arange(length)[None, :] >= np.asarray(pad_counts)[:, None]
  return np.where(mask, tokens, avoid).astype(np.int32), mask


def mask_positions(mask):
  """Positions as transformers' generate derives them from an attention mask."""
  return np.maximum(np.cumsum(mask, axis=1) - 1, 0)
