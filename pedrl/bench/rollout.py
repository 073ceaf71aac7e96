r"""pedrl's vectorized rollout against transformers dialogue loops, same models and prompts.

  python -m pedrl.bench.rollout                  # 8 dialogues of 6 and 12 messages, ~26M models
  python -m pedrl.bench.rollout --size=tiny --messages=4 --repeats=1

Two random Qwen2 models (tutor and student, fp32) are built with transformers and
saved as safetensors beside testdata's ChatML tokenizer; every engine loads them.
Guided dialogues on testdata's BigMath problems with paper 003's prompts, each
turn sampling --tokens_per_turn (48) tokens at temperature 1, top-k 50, through:

- pedrl: `pedrl.env.rollout.run`, one KV cache per side over the batch;
- transformers: each turn every dialogue's whole view rendered with the chat
  template and passed to `generate` (the reference code's pattern);
- transformers_kv: a `DynamicCache` per side carried across turns, each turn
  feeding only the tokens new to that model (`ChatFormat.next_ids`, as pedrl).

The workload is fixed: no stop tokens anywhere, and the models' output rows of
`<end_of_conversation>` and of the ids past the tokenizer are zero, so top-k 50
never keeps them and no dialogue ends early. Messages and sampled tokens are
asserted equal between engines. Warm-up (each length's first rollout after
clearing jax's caches, compiling included) is timed apart from steady state
(best of --repeats, engines alternated). The last line is
`rollout_speedup_vs_transformers_kv=`: the smallest over lengths of pedrl's
tokens per second over transformers_kv's.
"""
import dataclasses
import os
import tempfile
import time

from absl import flags
import jax

from pedrl import cli
from pedrl.bench import timing
from pedrl.engine import SamplingParams, compiler, shapes
from pedrl.env import chat, party as party_lib, prompts, rollout
from pedrl.env.dialogue import GUIDED, STUDENT, TUTOR
from pedrl.env.problems import load_bigmath
from pedrl.models.decoder import KVCache
from pedrl.tokenizer import load_tokenizer

FLAGS = flags.FLAGS
flags.DEFINE_enum("size", "bench", ["bench", "tiny"], "Model size (tiny: smoke runs).")
flags.DEFINE_integer("dialogues", 8, "Dialogues per rollout (the batch).")
flags.DEFINE_list("messages", ["6", "12"], "Messages per dialogue, one measurement each.")
flags.DEFINE_integer("tokens_per_turn", 48, "Tokens sampled per turn.")
flags.DEFINE_integer("max_conversation_tokens", rollout.RolloutSettings.max_conversation_tokens,
                     "pedrl's dialogue token limit, which sizes its KV caches (never reached).")
timing.define_repeats("engine and length")
flags.DEFINE_string("torch_device", "cpu", "Where transformers runs (cuda: beside jax on a GPU).")

_TESTDATA = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "testdata")
TOKENIZER = os.path.join(_TESTDATA, "tokenizers", "chatml")
PROBLEMS = os.path.join(_TESTDATA, "problems", "bigmath_sample.jsonl")
VOCAB = 1024  # Padded past the tokenizer's 903, as real checkpoints pad theirs.
TOP_K = 50
SIZES = {  # Qwen2 architecture, fp32; Qwen2.5's context, so pedrl's caches get their default size.
    "bench": dict(num_hidden_layers=8, hidden_size=512, intermediate_size=1536,
                  num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=32768),
    "tiny": dict(num_hidden_layers=2, hidden_size=64, intermediate_size=176,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32768),
}
ENGINES = ("transformers", "transformers_kv", "pedrl")


@dataclasses.dataclass(frozen=True)
class Workload:
  """What one rollout did: messages, sampled tokens, prompt tokens fed (real ones, no
  padding), and the most KV slots one side's cache held per row."""
  messages: int
  sampled: int
  fed: int
  cache_slots: int


def save_models(path: str, shape: dict) -> tuple[dict, int]:
  """Random tutor and student checkpoints (seeds 0 and 1) under `path`: their
  directories by side, and the parameters of one."""
  import torch
  import transformers
  tok = load_tokenizer(TOKENIZER, require_chat_template=True)
  # Zero output rows give logit 0, far below top-k 50's threshold among ~900 random
  # logits: the end marker and undecodable ids are never sampled.
  never = [tok.convert_tokens_to_ids(chat.END_OF_CONVERSATION)] + list(range(len(tok), VOCAB))
  paths = {}
  for seed, side in enumerate((TUTOR, STUDENT)):
    cfg = transformers.Qwen2Config(vocab_size=VOCAB, tie_word_embeddings=False,
                                   eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                   **shape)
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(cfg)
    with torch.no_grad():
      model.lm_head.weight[never] = 0.0
    paths[side] = os.path.join(path, side)
    model.save_pretrained(paths[side])
    tok.save_pretrained(paths[side])
  return paths, sum(p.numel() for p in model.parameters())


def system_views(problems, settings: rollout.RolloutSettings):
  """Each side's opening view of every dialogue, as `rollout.run` builds it (no personas)."""
  view = lambda name: [[{"role": "system", "content": prompts.render(name, problem=p.problem)}]
                       for p in problems]
  return view(settings.tutor_prompt), view(settings.student_prompt)


class _TransformersSide:
  """One side of a transformers loop: its model, every dialogue's view (roles as in
  `rollout.run`) and, when carrying KV, all tokens fed so far and their cache."""

  def __init__(self, model, fmt: chat.ChatFormat, views, carry_kv: bool):
    import transformers
    self.model, self.fmt, self.views, self.carry_kv = model, fmt, views, carry_kv
    self.fed = [0] * len(views)  # Messages of each view already in the cache.
    self.cache = transformers.DynamicCache() if carry_kv else None
    self.ids = self.mask = None  # Left-padded chunks one after another: masked gaps between.
    self.messages = self.sampled = self.prompt_tokens = self.slots = 0

  def new_tokens(self, d: int) -> list[int]:
    view, fed = self.views[d], self.fed[d]
    if fed == 0 or not self.carry_kv:
      return self.fmt.prompt_ids(view)
    # No stops: the model's last message was cut, so its whole closing is new (stop_text None).
    return self.fmt.next_ids([m["role"] for m in view[:fed]], view[fed:], None)

  def speak(self, config) -> list[str]:
    """One batched turn for every dialogue; the raw texts."""
    import torch
    rows = [self.new_tokens(d) for d in range(len(self.views))]
    padded = shapes.left_padded(rows, len(rows), max(map(len, rows)), config.pad_token_id)
    ids, mask = (torch.from_numpy(x).long().to(self.model.device) for x in padded)
    if self.ids is not None:  # Generate feeds only what follows the cache's tokens.
      ids, mask = torch.cat([self.ids, ids], 1), torch.cat([self.mask, mask], 1)
    kwargs = dict(cache=self.cache) if self.carry_kv else {}
    with torch.no_grad():
      out = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                **kwargs)
    new = out[:, ids.shape[1]:]
    assert new.shape[1] == config.max_new_tokens, new.shape  # No row stopped.
    if self.carry_kv:
      self.ids, self.mask = out, torch.cat([mask, torch.ones_like(new)], 1)
    self.prompt_tokens += sum(map(len, rows))
    self.sampled += new.numel()
    self.messages += len(rows)
    self.slots = max(self.slots, out.shape[1])
    texts = [self.fmt.tokenizer.decode(r) for r in new.tolist()]
    for d, text in enumerate(texts):
      self.views[d].append({"role": "assistant", "content": text})
      self.fed[d] = len(self.views[d])
    return texts


def transformers_runner(paths, problems, settings, new_tokens: int, carry_kv: bool,
                        device: str = "cpu"):
  """run(n) rolling out n-message dialogues with transformers' generate (torch, float32)."""
  import torch
  import transformers
  sides = {}
  for side, path in paths.items():
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model = model.to(device).eval()
    # transformers 5 fills a call's unset eos_token_id from here: None stops nothing.
    model.generation_config.eos_token_id = None
    kwargs = {"enable_thinking": settings.thinking} if side == TUTOR else {}
    sides[side] = model, chat.ChatFormat(load_tokenizer(path), kwargs)
  pad = sides[TUTOR][1].tokenizer.pad_token_id
  config = transformers.GenerationConfig(do_sample=True, temperature=1.0, top_k=TOP_K,
                                         top_p=1.0, max_new_tokens=new_tokens,
                                         eos_token_id=None, pad_token_id=pad)

  def run(n):
    torch.manual_seed(0)
    tutor_views, student_views = system_views(problems, settings)
    tutor = _TransformersSide(*sides[TUTOR], tutor_views, carry_kv)
    student = _TransformersSide(*sides[STUDENT], student_views, carry_kv)
    for i in range(n):  # Guided: the tutor speaks first.
      speaker, listener = (tutor, student) if i % 2 == 0 else (student, tutor)
      for view, raw in zip(listener.views, speaker.speak(config)):
        view.append({"role": "user", "content": chat.visible_text(raw)})
    return Workload(tutor.messages + student.messages, tutor.sampled + student.sampled,
                    tutor.prompt_tokens + student.prompt_tokens, max(tutor.slots, student.slots))
  return run


def pedrl_runner(paths, problems, settings, new_tokens: int):
  """run(n) rolling out n-message dialogues with `pedrl.env.rollout.run`; and the parties."""
  # No stops (a logged warning): every turn samples new_tokens.
  sampling = SamplingParams(new_tokens, temperature=1.0, top_k=TOP_K, stop_token_ids=())
  parties = {side: party_lib.load(path, sampling, scan_layers=False) for side, path in paths.items()}

  def run(n):
    stats = rollout.RolloutStats()
    out = rollout.run(problems, 1, parties[TUTOR], parties[STUDENT],
                      dataclasses.replace(settings, max_turns=n, turn_limit="message"), stats=stats)
    assert all(d.end_reason == "max_turns" for d in out), [d.end_reason for d in out]
    sampled = sum(m.num_tokens for d in out for m in d.messages)
    # Both sides' tokens, fed and sampled: the tutor's ids and the student's cache length.
    total = sum(len(d.tutor_ids) + d.student_tokens for d in out)
    return Workload(sum(len(d.messages) for d in out), sampled, total - sampled,
                    max(stats.cache_slots.values()))
  return run, parties


def compilations():
  """Seconds of each XLA compilation in the block (jax's backend-compile events)."""
  return compiler.compilations(("/jax/core/compile/backend_compile_duration",))


def measure(runs: dict, n: int, repeats: int) -> dict:
  """Per engine: workload, warm-up seconds (first rollout after clearing jax's caches),
  best steady seconds; and pedrl's compilations in the warm-up and in the timed runs."""
  jax.clear_caches()  # Each length's warm-up starts cold, as a job's first rollout does.
  out = {}
  for name, run in runs.items():
    with compilations() as compiled:
      t = time.perf_counter()
      work = run(n)
      out[name] = dict(work=work, warmup=time.perf_counter() - t, compiled=compiled)
  first = out["pedrl"]["work"]
  for name, r in out.items():  # Loud, not a silent unfair comparison.
    w = r["work"]
    assert (w.messages, w.sampled) == (first.messages, first.sampled), (name, w, first)
  with compilations() as compiled:
    best = timing.interleaved_best(runs, n, repeats)
  for name, r in out.items():
    r.update(seconds=best[name], tok_s=r["work"].sampled / best[name])
  out["pedrl"]["steady_compiled"] = compiled
  return out


def cache_megabytes(party, slots: int, rows: int) -> float:
  """Bytes of one pedrl KV cache of `slots` slots per row, in MB."""
  shapes = jax.eval_shape(lambda: KVCache.zeros(party.sampler.cfg, rows, slots))
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes)) / 1e6


def report(shape: dict, dialogues: int, lengths, new_tokens: int, repeats: int,
           max_conversation_tokens: int = rollout.RolloutSettings.max_conversation_tokens,
           torch_device: str = "cpu") -> dict:
  """Runs every engine at every length and prints the table; results by length."""
  import torch
  problems = load_bigmath(PROBLEMS)[0][:dialogues]
  assert len(problems) == dialogues, f"{PROBLEMS} has {len(problems)} problems"
  settings = rollout.RolloutSettings(scenario=GUIDED,
                                     max_conversation_tokens=max_conversation_tokens)
  results = {}
  with tempfile.TemporaryDirectory() as path:
    paths, n_params = save_models(path, shape)
    pedrl_run, parties = pedrl_runner(paths, problems, settings, new_tokens)
    runs = {name: transformers_runner(paths, problems, settings, new_tokens, carry_kv,
                                      torch_device)
            for name, carry_kv in (("transformers", False), ("transformers_kv", True))}
    runs["pedrl"] = pedrl_run
    for n in lengths:
      results[n] = measure(runs, n, repeats)
  limit = rollout.cache_slots(parties[TUTOR], settings, new_tokens)  # Each side's, as run sets it.
  where = (torch.cuda.get_device_name() if torch_device.startswith("cuda")
           else f"{torch.get_num_threads()} torch threads")
  print(f"machine: {jax.devices()[0].device_kind}, {os.cpu_count()} cores; transformers on "
        f"{where}")
  print(f"tutor and student: random Qwen2, {shape['num_hidden_layers']} layers, hidden "
        f"{shape['hidden_size']}, vocab {VOCAB}, {n_params / 1e6:.1f}M parameters each, fp32")
  print(f"{dialogues} guided dialogues, {new_tokens} sampled tokens per turn (no stops), "
        f"temperature 1, top-k {TOP_K}; best of {repeats} interleaved runs")
  print(f"pedrl KV cache per side: grows to at most {limit} slots x {dialogues} rows = "
        f"{cache_megabytes(parties[TUTOR], limit, dialogues):.0f} MB (max_conversation_tokens "
        f"{settings.max_conversation_tokens} + two turns + 256, bucketed); cache_slots: the "
        f"largest it reached")
  print(f"{'engine':<17}{'messages':>9}{'tok/s':>9}{'seconds':>9}{'tokens_fed':>12}"
        f"{'cache_slots':>13}{'warmup_s':>10}")
  for n, by_engine in results.items():
    for name in ENGINES:
      r = by_engine[name]
      print(f"{name:<17}{n:>9}{r['tok_s']:>9.1f}{r['seconds']:>9.2f}{r['work'].fed:>12}"
            f"{r['work'].cache_slots:>13}{r['warmup']:>10.2f}")
  for n, by_engine in results.items():
    r = by_engine["pedrl"]
    print(f"pedrl programs compiled, {n} messages: {len(r['compiled'])} in the warm-up rollout "
          f"({sum(r['compiled']):.1f} s), {len(r['steady_compiled'])} in {repeats} timed rollouts")
  speedup = min(r["pedrl"]["tok_s"] / r["transformers_kv"]["tok_s"] for r in results.values())
  print(f"rollout_speedup_vs_transformers_kv={speedup:.2f}")
  return results


def main(argv):
  del argv
  report(SIZES[FLAGS.size], FLAGS.dialogues, [int(n) for n in FLAGS.messages],
         FLAGS.tokens_per_turn, FLAGS.repeats, FLAGS.max_conversation_tokens, FLAGS.torch_device)


if __name__ == "__main__":
  cli.run(main)
