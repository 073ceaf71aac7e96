"""Writes testdata/models/qwen2_think: the testdata Qwen2 tutor taught to think in tags.

  python testdata/make_thinking_tutor.py

The tiny thinking runs need a tutor whose turns are what a reasoning model's are:
after the `<think>` that opens the turn (forced, as an R1-style template does), a
few words of thought, `</think>`, then a short visible reply. A random model never
closes the block, so every turn would be thinking cut at its token limit, nothing
visible. This model is testdata/models/qwen2 fine-tuned on such turns written here
(random words in the template's layout) after conversations of any length, half of
them opening with the tiny config's tutor prompt (thinking/tutor_general) on a
testdata problem: the words mean nothing; the tags' path runs as in a real run
(thinking split from the visible text, scored by the thinking judge, hidden from
the student).

Fixed seeds (the data, the base model's weights); 600 AdamW steps take a few minutes
on a CPU. Needs only pedrl (JAX).
"""
import os
import random
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax

from pedrl import models
from pedrl.env import problems, prompts
from pedrl.models.decoder import Decoder
from pedrl.tokenizer import load_tokenizer

HERE = os.path.dirname(os.path.abspath(__file__))
BASE = os.path.join(HERE, "models", "qwen2")
OUT = os.path.join(HERE, "models", "qwen2_think")
WORDS = ("what do you know about the problem first step count add take away how many left "
         "try again check your answer numbers each group total share equal more less we "
         "can start with picture it look at this part why does that work good idea next "
         "student seems close hint ask them").split()
PROBLEMS = os.path.join(HERE, "problems", "bigmath_sample.jsonl")
TUTOR_PROMPT = "thinking/tutor_general"  # experiments/thinking.py's tiny tutor prompt.
SEQ, BATCH, STEPS, LR = 256, 16, 600, 3e-3


def words(rng: random.Random, lo: int, hi: int) -> str:
  return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def turn(rng: random.Random) -> str:
  """A tutor turn after the forced opening tag: thought, the closing tag, the reply."""
  return f"{words(rng, 2, 5)}\n</think>\n\n{words(rng, 3, 8)}"


def example(rng: random.Random, tok, tasks: list) -> tuple[list, list]:
  """(tokens, loss mask): a conversation of random length, then a tutor turn to learn."""
  system = rng.choice(tasks) if rng.random() < 0.5 else words(rng, 5, 60)
  text = f"<|im_start|>system\n{system}<|im_end|>\n"
  # The tutor opens (guided dialogues) or answers the student's attempt; earlier turns
  # keep their thinking in view, as the tutor's side of a dialogue does.
  user = lambda: f"<|im_start|>user\n{words(rng, 2, 30)}<|im_end|>\n"
  first = rng.random() < 0.5
  for k in range(rng.randint(0, 4)):
    text += ("" if first and k == 0 else user()) + (
        f"<|im_start|>assistant\n<think>\n{turn(rng)}<|im_end|>\n")
  if not (first and text.count("assistant") == 0):
    text += user()
  text += "<|im_start|>assistant\n<think>\n"
  context = tok(text, add_special_tokens=False)["input_ids"]
  target = tok(turn(rng) + "<|im_end|>", add_special_tokens=False)["input_ids"]
  ids = (context + target)[-SEQ:]
  mask = ([0] * len(context) + [1] * len(target))[-SEQ:]
  return ids, mask


def batches(tok, seed: int = 0):
  rng = random.Random(seed)
  rows, _ = problems.load_bigmath(PROBLEMS)
  tasks = [prompts.render(TUTOR_PROMPT, problem=p.problem) for p in rows]
  while True:
    rows = [example(rng, tok, tasks) for _ in range(BATCH)]
    tokens = np.zeros((BATCH, SEQ), np.int32)
    weights = np.zeros((BATCH, SEQ), np.float32)
    attn = np.zeros((BATCH, SEQ), bool)
    for i, (ids, mask) in enumerate(rows):  # Left-padded, as the engine feeds prompts.
      tokens[i, SEQ - len(ids):], weights[i, SEQ - len(ids):] = ids, mask
      attn[i, SEQ - len(ids):] = True
    yield tokens, attn, weights


def main():
  cfg, model, params = models.load(BASE)
  tok = load_tokenizer(BASE)
  optimizer = optax.adamw(optax.cosine_decay_schedule(LR, STEPS), weight_decay=0.0)
  state = optimizer.init(params)

  def loss_fn(p, tokens, attn, weights):
    logits, _ = model.apply({"params": p}, tokens, attn, method=Decoder.forward)
    logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32))
    nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
    w = weights[:, 1:]
    return (nll * w).sum() / w.sum()

  @jax.jit
  def step(p, s, tokens, attn, weights):
    loss, grads = jax.value_and_grad(loss_fn)(p, tokens, attn, weights)
    updates, s = optimizer.update(grads, s, p)
    return optax.apply_updates(p, updates), s, loss

  data = batches(tok)
  for n in range(1, STEPS + 1):
    params, state, loss = step(params, state, *next(data))
    if n % 100 == 0:
      print(f"step {n}: loss {float(loss):.3f}")
  shutil.rmtree(OUT, ignore_errors=True)
  models.save_params(params, cfg, OUT)
  for name in os.listdir(BASE):  # Tokenizer, chat template, generation config: the base's.
    if name not in ("config.json", "model.safetensors"):
      shutil.copy(os.path.join(BASE, name), os.path.join(OUT, name))
  print(f"wrote {OUT}")


if __name__ == "__main__":
  main()
