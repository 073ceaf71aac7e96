"""Builds the tiny checkpoints and tokenizers in testdata/ (the embedded default).

  python testdata/make_testdata.py          # rewrites testdata/models and testdata/tokenizers

Everything is random (fixed seeds) and tiny: the models exist to exercise the
code paths of each architecture, not to say anything sensible. The tokenizers
are trained here on a synthetic corpus of tutoring-style text generated below.
Needs the `test` extra (torch, as transformers builds the checkpoints).
"""
import collections
import json
import os
import random
import re
import shutil

import torch
import transformers
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
MARKERS = ["<think>", "</think>", "<end_of_conversation>"]
BPE_VOCAB = 900
MODEL_VOCAB = 1024  # Padded past the tokenizer, as real checkpoints pad theirs.
INIT_RANGE = 0.2  # Larger than HF's 0.02 so greedy argmaxes are far from ties.

# Newlines live inside string literals so Jinja's whitespace trimming cannot eat them.
CHATML_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% for m in messages %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' + m['content'] | trim }}"
    "{{ '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")


def corpus(n_lines: int = 4000, seed: int = 0):
  """Synthetic tutoring dialogue and arithmetic text."""
  rng = random.Random(seed)
  nouns = ["apples", "marbles", "pencils", "cookies", "books", "coins", "stickers", "tickets"]
  names = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana"]
  asks = ["What do you notice about", "How could you check", "Can you explain why",
          "What happens if we change", "Which step gives", "Why do you think"]
  praise = ["Good thinking.", "Nice work!", "Let's look again.", "Almost there.", "Exactly."]
  for _ in range(n_lines):
    a, b, c = rng.randint(1, 99), rng.randint(1, 99), rng.randint(2, 12)
    name, noun = rng.choice(names), rng.choice(nouns)
    yield rng.choice([
        f"{name} has {a} {noun} and buys {b} more. How many {noun} does {name} have now?",
        f"Student: I think {a} + {b} = {a + b}, so the answer is \\boxed{{{a + b}}}.",
        f"Teacher: {rng.choice(asks)} the {noun} in step {c}? {rng.choice(praise)}",
        f"<think>The student wrote {a} * {c}. The product is {a * c}.</think> {rng.choice(asks)} it?",
        f"If $x + {a} = {a + b}$, then $x = {b}$. Also $\\frac{{{a}}}{{{c}}}$ is a fraction.",
        f"{name} shares {a * c} {noun} among {c} friends, so each gets {a}. <end_of_conversation>",
        f"Let's solve it step by step. First, {a} - {b if b < a else 1} leaves some {noun}.",
    ])


def train_bpe(special: list[str]) -> Tokenizer:
  tok = Tokenizer(models.BPE())
  tok.normalizer = normalizers.NFC()
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
      vocab_size=BPE_VOCAB, special_tokens=special, show_progress=False,
      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(corpus(), trainer)
  # The markers are plain (non-special) tokens: they survive decoding.
  tok.add_tokens([AddedToken(m, special=False, normalized=False) for m in MARKERS])
  return tok


def chatml_tokenizer():
  tok = train_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
  return transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
      chat_template=CHATML_TEMPLATE, model_max_length=2048)


def llama3_tokenizer():
  tok = train_bpe(["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|eot_id|>"])
  return transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
      pad_token="<|end_of_text|>", chat_template=LLAMA3_TEMPLATE, model_max_length=2048)


def bert_tokenizer(vocab_size: int = 600):
  """WordPiece over a vocabulary counted here (the library's trainer is not deterministic)."""
  special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  words = collections.Counter(
      w for line in corpus() for w in re.findall(r"\w+|[^\w\s]", line.lower()))
  chars = sorted({c for w in words for c in w})
  vocab = special + chars + ["##" + c for c in chars]
  frequent = sorted((w for w in words if len(w) > 1), key=lambda w: (-words[w], w))
  vocab += frequent[:vocab_size - len(vocab)]
  tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
  tok.normalizer = normalizers.BertNormalizer(lowercase=True)
  tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
  tok.decoder = decoders.WordPiece()
  cls, sep = vocab.index("[CLS]"), vocab.index("[SEP]")
  tok.post_processor = processors.TemplateProcessing(
      single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
      special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
  return transformers.PreTrainedTokenizerFast(
      tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
      sep_token="[SEP]", mask_token="[MASK]", model_max_length=128)


def decoder_kwargs(tok, **kw):
  base = dict(vocab_size=MODEL_VOCAB, hidden_size=64, intermediate_size=176,
              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              max_position_embeddings=1024, initializer_range=INIT_RANGE,
              bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
              pad_token_id=tok.pad_token_id)
  base.update(kw)
  return base


def save(name, model_cls, config, tok, seed):
  out = os.path.join(HERE, "models", name)
  shutil.rmtree(out, ignore_errors=True)
  torch.manual_seed(seed)
  model = model_cls(config).eval()
  model.save_pretrained(out)
  tok.save_pretrained(out)
  n = sum(p.numel() for p in model.parameters())
  print(f"{name:14s} {type(model).__name__:36s} {n / 1e3:7.1f}k params -> {out}")


def main():
  chatml, llama3, bert = chatml_tokenizer(), llama3_tokenizer(), bert_tokenizer()
  for name, tok in (("chatml", chatml), ("llama3", llama3), ("bert", bert)):
    out = os.path.join(HERE, "tokenizers", name)
    shutil.rmtree(out, ignore_errors=True)
    tok.save_pretrained(out)
  assert len(chatml) <= MODEL_VOCAB and len(llama3) <= MODEL_VOCAB
  t = transformers
  save("qwen2", t.Qwen2ForCausalLM, t.Qwen2Config(**decoder_kwargs(chatml)), chatml, 1)
  save("qwen2_tied", t.Qwen2ForCausalLM, t.Qwen2Config(**decoder_kwargs(
      chatml, tie_word_embeddings=True, num_key_value_heads=1)), chatml, 2)
  save("qwen3", t.Qwen3ForCausalLM, t.Qwen3Config(**decoder_kwargs(
      chatml, head_dim=32, rope_theta=1e6)), chatml, 3)
  save("llama3", t.LlamaForCausalLM, t.LlamaConfig(**decoder_kwargs(
      llama3, rope_theta=5e5, rope_scaling={
          "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 64})), llama3, 4)
  save("qwen2_seqcls", t.Qwen2ForSequenceClassification, t.Qwen2Config(**decoder_kwargs(
      chatml, num_labels=1)), chatml, 5)
  save("bert", t.BertModel, t.BertConfig(
      vocab_size=len(bert), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
      intermediate_size=128, max_position_embeddings=128, initializer_range=INIT_RANGE,
      pad_token_id=bert.pad_token_id), bert, 6)
  with open(os.path.join(HERE, "models", "README.json"), "w") as f:
    json.dump({"made_by": "testdata/make_testdata.py", "transformers": t.__version__,
               "torch": torch.__version__}, f, indent=2)


if __name__ == "__main__":
  main()
