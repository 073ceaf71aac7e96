r"""pedrl's vectorized rollout against transformers dialogue loops, same models and prompts.

  python -m pedrl.bench.rollout                  # 8 dialogues of 6 and 12 messages, ~26M models
  python -m pedrl.bench.rollout --size=tiny --messages=4 --repeats=1
  python -m pedrl.bench.rollout --size=7b+8b --layers=4 --torch_device=cuda   # a GPU
  python -m pedrl.bench.rollout --size=tiny --group_size=8 --dialogues=16 \
      --stop_rate=0.05 --max_conversation_tokens=900 --messages=16   # ragged: pedrl only
  python -m pedrl.bench.rollout --model=PATH --dialogues=2 --group_size=2 --messages=4 \
      --repeats=1 --engines=pedrl   # a real checkpoint as tutor and student

Two random models (tutor and student) are built with transformers and saved as
safetensors beside testdata's ChatML tokenizer; every engine loads them. Sizes:
`bench` and `tiny` are small Qwen2 models in float32; `qwen2.5-0.5b` (both sides)
and `7b+8b` (paper 003's Qwen2.5-7B tutor and Llama-3.1-8B student) have the real
architectures' shapes (`pedrl.models.architectures`) in bfloat16, --layers trimming
their stacks (their vocabularies past the tokenizer are never sampled, below).
--model runs a real checkpoint directory (config, safetensors, tokenizer with a chat
template) as both tutor and student instead, in its own dtype and with its own
tokenizer; it may end a dialogue early (its stop tokens are kept off, but not the
dialogue's end marker), so the engines' workloads are not checked equal then.
Guided dialogues on testdata's BigMath problems with paper 003's prompts, each
turn sampling --tokens_per_turn (48) tokens at temperature 1, top-k 50, through:

- pedrl: `pedrl.env.rollout.run`, one KV cache per side over the batch;
- transformers: each turn every dialogue's whole view rendered with the chat
  template and passed to `generate` (the reference code's pattern);
- transformers_kv: a `DynamicCache` per side carried across turns, each turn
  feeding only the tokens new to that model (`ChatFormat.next_ids`, as pedrl).

pedrl's layers are unrolled (faster decoding; --scan_layers: the jobs' scanned
layout, one compiled layer body, shorter compiles); --engines leaves engines out.
On a CPU, pedrl's models are split tensor-parallel over --cpu_devices JAX devices, one
per core (default: the most that divide both models' KV heads, `sharding.host_devices`,
which says why); the header says which.
Each length's rows print as soon as it is measured, so a run cut short by a time
limit keeps the lengths it finished.

The workload is fixed: no stop tokens anywhere, and the models' output rows of
`<end_of_conversation>` and of the ids past the tokenizer are zero, so top-k 50
never keeps them and no dialogue ends early. Messages and sampled tokens are
asserted equal between engines. Warm-up (each length's first rollout after
clearing jax's in-memory caches, compiling or loading from the persistent
compilation cache included) is timed apart from steady state (best of --repeats,
engines alternated); pedrl's warm-up reports the seconds it spent compiling its
programs or reading them from a cache (`compile_s`), the programs it made, how many
came from the persistent cache or the program store (`--compilation_cache`; a second
run of the same command finds them all there), and the seconds jax spent tracing
and lowering its functions first, which a program read from the store
(`pedrl.engine.programs`) skips. The last lines are `rollout_warmup_s=` and
`rollout_compile_s=` (pedrl's warm-up at the longest length, and its part spent
getting programs) and `rollout_speedup_vs_transformers_kv=`: the smallest over
lengths of pedrl's tokens per second over transformers_kv's.

Idle shares (pedrl): of the rows its sampling calls computed, the share that held
no live dialogue (batch filler: dialogues that ended leave the batch, which is
bucketed), and of the decode row-steps, the share that sampled nothing for a
live dialogue (filler, and rows whose turn ended while the call's longest went
on). The fixed workload has neither. --stop_rate > 0 makes a ragged one, as
dialogues at the papers' group sizes are: that share of the tokenizer's ids
stop a turn (turns of random lengths), and dialogues end at different turns on
--max_conversation_tokens; its draws differ between engines, so it runs pedrl
alone and prints no speedup.
"""
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any
import os
import tempfile
import time

from absl import app, flags, logging
import jax

from pedrl import cli, models, sharding
from pedrl.bench import compiles, timing
from pedrl.engine import SamplingParams, programs, shapes
from pedrl.env import chat, party as party_lib, prompts, rollout
from pedrl.env.dialogue import GUIDED, STUDENT, TUTOR
from pedrl.env.problems import Problem, load_bigmath
from pedrl.models import architectures
from pedrl.models.decoder import KVCache
from pedrl.tokenizer import load_tokenizer

# Paired real shapes: (tutor, student) architectures, in bfloat16.
REAL_SIZES = {"qwen2.5-0.5b": ("qwen2.5-0.5b", "qwen2.5-0.5b"),
              "7b+8b": ("qwen2.5-7b", "llama-3.1-8b")}  # Paper 003's tutor and student.

FLAGS = flags.FLAGS
flags.DEFINE_enum("size", "bench", ["bench", "tiny", *REAL_SIZES],
                  "Model sizes (tiny: smoke runs).")
flags.DEFINE_integer("layers", 0, "Decoder layers of a real size's models (0: all).")
# allow_override: pedrl.bench.learning defines --model too, and the tests import both.
flags.DEFINE_string("model", None, "A checkpoint directory run as tutor and student in "
                    "place of --size's random models.", allow_override=True)
flags.DEFINE_integer("dialogues", 8, "Problems per rollout.")
flags.DEFINE_integer("group_size", 1, "Dialogues per problem (the batch: dialogues x this).")
flags.DEFINE_float("stop_rate", 0.0, "Share of the tokenizer's ids that end a turn (0: none).")
flags.DEFINE_list("messages", ["6", "12"], "Messages per dialogue, one measurement each.")
flags.DEFINE_integer("tokens_per_turn", 48, "Tokens sampled per turn.")
flags.DEFINE_integer("max_conversation_tokens", rollout.RolloutSettings.max_conversation_tokens,
                     "pedrl's dialogue token limit, which sizes its KV caches (never reached).")
timing.define_repeats("engine and length")
timing.define_scan_layers(False)
flags.DEFINE_string("torch_device", "cpu", "Where transformers runs (cuda: beside jax on a GPU).")
flags.DEFINE_integer("cpu_devices", 0,
                     "Where jax runs on a CPU: pedrl's models are split tensor-parallel over "
                     "this many host devices, one per core (0: the most that the cores and "
                     "both models' KV heads allow, `sharding.host_devices`; 1: one device, "
                     "as a job runs unless its mesh says otherwise).")
flags.DEFINE_list("engines", ["transformers", "transformers_kv", "pedrl"],
                  "Engines to run (pedrl always; at real shapes the transformers loop without "
                  "a cache mostly costs time).")

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
  padding), the most KV slots one side's cache held per row, and (pedrl) the idle
  shares of its computed rows and decode row-steps (module docstring)."""
  messages: int
  sampled: int
  fed: int
  cache_slots: int
  idle_rows: float | None = None
  idle_steps: float | None = None


def hf_configs(size: str, layers: int = 0) -> dict:
  """The transformers configs of a size's tutor and student, by side."""
  import transformers
  if size in REAL_SIZES:
    return {side: architectures.get(name).hf_config(layers or None)
            for side, name in zip((TUTOR, STUDENT), REAL_SIZES[size])}
  cfg = lambda: transformers.Qwen2Config(vocab_size=VOCAB, tie_word_embeddings=False,
                                         **SIZES[size])
  return {TUTOR: cfg(), STUDENT: cfg()}


def kv_heads(size: str, layers: int = 0) -> list[int]:
  """The KV heads of a size's tutor and student."""
  return [c.num_key_value_heads for c in hf_configs(size, layers).values()]


def model_kv_heads(path: str) -> list[int]:
  """The KV heads of a checkpoint run as both sides."""
  return [models.from_hf(path).num_kv_heads] * 2


def cpu_mesh(devices: int) -> jax.sharding.Mesh | None:
  """A `tensor` mesh over the first `devices` CPU devices; None for one device, or where
  jax runs on an accelerator (--cpu_devices is a CPU's setting)."""
  if devices <= 1 or jax.default_backend() != "cpu":
    return None
  if jax.device_count() < devices:
    raise ValueError(f"cpu_devices={devices}, but jax has {jax.device_count()} CPU devices "
                     "(jax_num_cpu_devices is set before jax starts: the command does)")
  return sharding.make_mesh(1, 1, devices, devices=jax.local_devices()[:devices])


def save_models(path: str, shape: dict | None = None, configs: dict | None = None,
                dtype: str = "float32", device: str = "cpu") -> tuple[dict, int]:
  """Random tutor and student checkpoints (seeds 0 and 1) under `path`, made on
  `device` in `dtype`: their directories by side, and the tutor's parameter count.
  `configs` (transformers configs by side) or `shape` (Qwen2 fields, both sides)."""
  import torch
  import transformers
  tok = load_tokenizer(TOKENIZER, require_chat_template=True)
  if configs is None:
    configs = {side: transformers.Qwen2Config(vocab_size=VOCAB, tie_word_embeddings=False,
                                              **shape) for side in (TUTOR, STUDENT)}
  paths, sizes = {}, {}
  for seed, (side, cfg) in enumerate(configs.items()):
    cfg.eos_token_id, cfg.pad_token_id = tok.eos_token_id, tok.pad_token_id
    # Zero output rows give logit 0, far below top-k 50's threshold among ~900 random
    # logits: the end marker and undecodable ids are never sampled.
    never = [tok.convert_tokens_to_ids(chat.END_OF_CONVERSATION)] + list(range(len(tok),
                                                                               cfg.vocab_size))
    torch.manual_seed(seed)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, dtype))
    try:
      with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    finally:
      torch.set_default_dtype(previous)
    with torch.no_grad():
      model.get_output_embeddings().weight[never] = 0.0
    paths[side] = os.path.join(path, side)
    model.save_pretrained(paths[side])
    tok.save_pretrained(paths[side])
    sizes[side] = sum(p.numel() for p in model.parameters())
    del model
  return paths, sizes[TUTOR]


def system_views(problems: Sequence[Problem],
                 settings: rollout.RolloutSettings) -> tuple[list[list[dict]], list[list[dict]]]:
  """Each side's opening view of every dialogue, as `rollout.run` builds it (no personas)."""
  view = lambda name: [[{"role": "system", "content": prompts.render(name, problem=p.problem)}]
                       for p in problems]
  return view(settings.tutor_prompt), view(settings.student_prompt)


# transformers' `generate` takes a cache carried across calls as `past_key_values` in every
# version setup.py allows (5.0 on), deprecated in 5.24 (for removal in 6) for `cache`, which
# 5.17 refused ("model_kwargs are not used by the model: ['cache']") and 5.24 takes.
CACHE_KEYWORD_SINCE = (5, 24)


def cache_kwargs(cache: Any) -> dict:
  """`generate`'s keyword for a cache carried across calls, in this transformers' spelling."""
  import transformers
  version = tuple(int(x) for x in transformers.__version__.split(".")[:2])
  return {"cache" if version >= CACHE_KEYWORD_SINCE else "past_key_values": cache}


class _TransformersSide:
  """One side of a transformers loop: its model, every dialogue's view (roles as in
  `rollout.run`) and, when carrying KV, all tokens fed so far and their cache."""

  def __init__(self, model, fmt: chat.ChatFormat, views, carry_kv: bool) -> None:
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
    kwargs = cache_kwargs(self.cache) if self.carry_kv else {}
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


def transformers_runner(paths: tuple[str, str], problems: Sequence[Problem],
                        settings: rollout.RolloutSettings, new_tokens: int, carry_kv: bool,
                        device: str = "cpu", dtype: str = "float32") -> Callable[..., Workload]:
  """run(n) rolling out n-message dialogues with transformers' generate (torch)."""
  import torch
  import transformers
  sides = {}
  for side, path in paths.items():
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    model = model.to(device).eval()
    # transformers 5 fills a call's unset fields from here (the checkpoint's EOS ids,
    # repetition penalty, ...): a neutral config leaves the sampling the call names.
    model.generation_config = transformers.GenerationConfig()
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


def stop_ids(tokenizer: Any, rate: float) -> tuple:
  """Every round(1 / rate)-th id of the tokenizer, the end marker left out: about that
  share of the sampled tokens ends a turn (the models sample ids near uniformly)."""
  if not rate:
    return ()
  never = tokenizer.convert_tokens_to_ids(chat.END_OF_CONVERSATION)
  return tuple(i for i in range(0, len(tokenizer), max(1, round(1 / rate))) if i != never)


def pedrl_runner(paths: tuple[str, str], problems: Sequence[Problem],
                 settings: rollout.RolloutSettings, new_tokens: int, group_size: int = 1,
                 stop_rate: float = 0.0, scan_layers: bool = False,
                 mesh: jax.sharding.Mesh | None = None,
                 fixed: bool = True) -> tuple[Callable[..., Workload], list[party_lib.Party]]:
  """run(n) rolling out n-message dialogues with `pedrl.env.rollout.run`; and the parties
  (on `mesh`, None: one device). `fixed`: the random models' workload, where no dialogue
  ends before its last message (checked)."""
  stops = stop_ids(load_tokenizer(paths[TUTOR]), stop_rate)
  # No stops: a logged warning, and every turn samples new_tokens.
  sampling = SamplingParams(new_tokens, temperature=1.0, top_k=TOP_K, stop_token_ids=stops)
  parties = {side: party_lib.load(path, sampling, scan_layers=scan_layers, mesh=mesh)
             for side, path in paths.items()}

  def run(n):
    stats = rollout.RolloutStats()
    out = rollout.run(problems, group_size, parties[TUTOR], parties[STUDENT],
                      dataclasses.replace(settings, max_turns=n, turn_limit="message"), seed=0,
                      stats=stats)
    if fixed and not stops:
      assert all(d.end_reason == "max_turns" for d in out), [d.end_reason for d in out]
    sampled = sum(m.num_tokens for d in out for m in d.messages)
    # Both sides' tokens, fed and sampled: the tutor's ids and the student's cache length.
    total = sum(len(d.tutor_ids) + d.student_tokens for d in out)
    return Workload(sum(len(d.messages) for d in out), sampled, total - sampled,
                    max(stats.cache_slots.values()), stats.idle_rows(), stats.idle_steps())
  return run, parties


def measure(runs: dict, n: int, repeats: int, fixed: bool = True) -> dict:
  """Per engine: workload, warm-up seconds (first rollout after clearing jax's in-memory
  caches), best steady seconds; and pedrl's programs in the warm-up and the timed runs.
  `fixed`: the engines' workloads are checked equal (a real model's dialogues may end
  early, differently in each engine)."""
  jax.clear_caches()  # Each length's warm-up starts cold, as a job's first rollout does.
  programs.forget()
  out = {}
  for name, run in runs.items():
    with compiles.compilations() as compiled:
      t = time.perf_counter()
      work = run(n)
      out[name] = dict(work=work, warmup=time.perf_counter() - t, compiled=compiled)
    print(f"warm-up: {name}, {n} messages, {out[name]['warmup']:.1f} s", flush=True)
  first = out["pedrl"]["work"]
  for name, r in out.items():  # Loud, not a silent unfair comparison.
    w = r["work"]
    if fixed:
      assert (w.messages, w.sampled) == (first.messages, first.sampled), (name, w, first)
  with compiles.compilations() as compiled:
    best = timing.interleaved_best(runs, n, repeats)
  for name, r in out.items():
    r.update(seconds=best[name], tok_s=r["work"].sampled / best[name])
  out["pedrl"]["steady_compiled"] = compiled
  return out


def cache_megabytes(party: party_lib.Party, slots: int, rows: int) -> float:
  """Bytes of one pedrl KV cache of `slots` slots per row, in MB."""
  shapes = jax.eval_shape(lambda: KVCache.zeros(party.sampler.cfg, rows, slots))
  return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes)) / 1e6


def _described(side: str, party, n_params: int | None, model: str | None = None) -> str:
  cfg = party.sampler.cfg
  count = "" if n_params is None else f", {n_params / 1e6:.1f}M parameters"
  what = f"{os.path.basename(os.path.normpath(model))} ({cfg.model_type})" if model else (
      f"random {cfg.model_type}")
  return (f"{side}: {what}, {cfg.num_layers} layers, hidden {cfg.hidden_size}, "
          f"vocab {cfg.vocab_size}{count}, {cfg.dtype}, "
          f"{'scanned' if cfg.scan_layers else 'unrolled'} layers")


def _print_header(parties, n_params, torch_device: str, batch: int, dialogues: int,
                  group_size: int, new_tokens: int, stop_rate: float, repeats: int, settings,
                  mesh, model: str | None = None) -> None:
  import torch
  limit = rollout.cache_slots(parties[TUTOR], settings, new_tokens)  # Each side's, as run sets it.
  where = (torch.cuda.get_device_name() if torch_device.startswith("cuda")
           else f"{torch.get_num_threads()} torch threads")
  device = jax.local_devices()[0]
  print(f"machine: {device.device_kind} ({device.platform}), {os.cpu_count()} cores; jax "
        f"{jax.__version__}; transformers {__import__('transformers').__version__} on {where}")
  print(_described(TUTOR, parties[TUTOR], n_params, model) + "; " +
        _described(STUDENT, parties[STUDENT], None, model))
  print("pedrl on one device" if mesh is None else
        f"pedrl tensor-parallel over {mesh.size} CPU devices, one per core (--cpu_devices)")
  print(f"{batch} guided dialogues ({dialogues} problems x {group_size}), {new_tokens} sampled "
        f"tokens per turn ({f'stop rate {stop_rate}' if stop_rate else 'no stops'}), "
        f"temperature 1, top-k {TOP_K}; best of {repeats} interleaved runs")
  print(f"pedrl KV cache per side: grows to at most {limit} slots x {batch} rows = "
        f"{cache_megabytes(parties[TUTOR], limit, batch):.0f} MB (max_conversation_tokens "
        f"{settings.max_conversation_tokens} + two turns + 256, bucketed); cache_slots: the "
        f"largest it reached")
  print(f"{'engine':<17}{'messages':>9}{'tok/s':>9}{'seconds':>9}{'tokens_fed':>12}"
        f"{'cache_slots':>13}{'warmup_s':>10}{'compile_s':>11}{'programs':>10}{'cached':>8}"
        f"{'idle_rows':>11}{'idle_steps':>12}", flush=True)


def _print_rows(n: int, by_engine: dict) -> None:
  share = lambda x: "-" if x is None else f"{x:.1%}"
  for name in ENGINES:
    if name not in by_engine:
      continue
    r, w = by_engine[name], by_engine[name]["work"]
    c = r["compiled"]
    made = (f"{sum(c.seconds):>11.2f}{len(c):>10}{c.cache_hits + c.stored:>8}"
            if name == "pedrl" else f"{'-':>11}{'-':>10}{'-':>8}")
    print(f"{name:<17}{n:>9}{r['tok_s']:>9.1f}{r['seconds']:>9.2f}{w.fed:>12}"
          f"{w.cache_slots:>13}{r['warmup']:>10.2f}{made}{share(w.idle_rows):>11}"
          f"{share(w.idle_steps):>12}", flush=True)


def report(shape: str, dialogues: int, lengths: Sequence[int], new_tokens: int, repeats: int,
           max_conversation_tokens: int = rollout.RolloutSettings.max_conversation_tokens,
           torch_device: str = "cpu", group_size: int = 1, stop_rate: float = 0.0,
           layers: int = 0, engines: Sequence[str] = ENGINES, scan_layers: bool = False,
           cpu_devices: int = 1, model: str | None = None) -> dict:
  """Runs `engines` (pedrl always) at every length and prints the table; results by
  length. `shape`: a size's name (SIZES, REAL_SIZES) or Qwen2 fields for both sides;
  `model`: a checkpoint directory both sides run instead (`shape` is then unused).
  On a CPU, pedrl runs tensor-parallel over `cpu_devices` of jax's devices (`cpu_mesh`)."""
  mesh = cpu_mesh(cpu_devices)
  problems = load_bigmath(PROBLEMS)[0][:dialogues]
  assert len(problems) == dialogues, f"{PROBLEMS} has {len(problems)} problems"
  settings = rollout.RolloutSettings(scenario=GUIDED,
                                     max_conversation_tokens=max_conversation_tokens)
  dtype = "bfloat16" if isinstance(shape, str) and shape in REAL_SIZES else "float32"
  configs = hf_configs(shape, layers) if isinstance(shape, str) and not model else None
  rows = [p for p in problems for _ in range(group_size)]  # transformers' dialogues, in order.
  results = {}
  start = time.perf_counter()

  def setup(what) -> None:  # At real shapes the setup takes minutes: a run cut short says where.
    print(f"setup: {what} at {time.perf_counter() - start:.1f} s", flush=True)

  with tempfile.TemporaryDirectory() as path:
    if model:
      paths, n_params = {TUTOR: model, STUDENT: model}, None
      dtype = models.from_hf(model).dtype  # The checkpoint's own, as pedrl loads it.
    else:
      paths, n_params = save_models(path, None if configs else shape, configs, dtype,
                                    torch_device)
      setup("random checkpoints written")
    pedrl_run, parties = pedrl_runner(paths, problems, settings, new_tokens, group_size,
                                      stop_rate, scan_layers, mesh, fixed=not model)
    setup("pedrl's parties loaded")
    runs = {}
    if not stop_rate:  # A ragged workload's draws differ between engines: pedrl alone.
      runs = {name: transformers_runner(paths, rows, settings, new_tokens, carry_kv,
                                        torch_device, dtype)
              for name, carry_kv in (("transformers", False), ("transformers_kv", True))
              if name in engines}
      setup("transformers' models loaded")
    runs["pedrl"] = pedrl_run
    _print_header(parties, n_params, torch_device, len(rows), dialogues, group_size, new_tokens,
                  stop_rate, repeats, settings, mesh, model)
    for n in lengths:  # Each length's rows as soon as measured: a run cut short keeps them.
      results[n] = measure(runs, n, repeats, fixed=not model)
      _print_rows(n, results[n])
  for n, by_engine in results.items():
    r = by_engine["pedrl"]
    c = r["compiled"]
    print(f"pedrl programs, {n} messages: {len(c)} in the warm-up rollout "
          f"({sum(c.seconds):.1f} s getting them; {c.cache_hits} from the persistent cache and "
          f"{c.stored} from the program store; {c.traced:.1f} s tracing and {c.lowered:.1f} s "
          f"lowering the functions first), {len(r['steady_compiled'])} in {repeats} timed "
          "rollouts")
  last = results[max(results)]["pedrl"]  # The longest rollout's warm-up, for gpu_summary.
  print(f"rollout_warmup_s={last['warmup']:.2f}")
  print(f"rollout_compile_s={sum(last['compiled'].seconds):.2f}")
  if "transformers_kv" in runs:
    speedup = min(r["pedrl"]["tok_s"] / r["transformers_kv"]["tok_s"] for r in results.values())
    print(f"rollout_speedup_vs_transformers_kv={speedup:.2f}")
  return results


def main(argv: list[str]) -> None:
  del argv
  cli.require("bench.rollout (transformers on PyTorch beside pedrl)", "torch")
  size = FLAGS.size
  if FLAGS.model and not os.path.isfile(os.path.join(FLAGS.model, "config.json")):
    raise app.UsageError(f"--model={FLAGS.model}: no config.json there (a checkpoint "
                         "directory with safetensors and a tokenizer)")
  if FLAGS.layers and size not in REAL_SIZES:
    raise app.UsageError(f"--layers trims a real size's models ({', '.join(REAL_SIZES)}), "
                         f"not --size={size}")
  if unknown := set(FLAGS.engines) - set(ENGINES):
    raise app.UsageError(f"--engines: {sorted(unknown)} are not among {list(ENGINES)}")
  if FLAGS.cpu_devices < 0:
    raise app.UsageError(f"--cpu_devices={FLAGS.cpu_devices}: a count of devices, or 0 for "
                         "the most the cores allow")
  report(size, FLAGS.dialogues, [int(n) for n in FLAGS.messages], FLAGS.tokens_per_turn,
         FLAGS.repeats, FLAGS.max_conversation_tokens, FLAGS.torch_device, FLAGS.group_size,
         FLAGS.stop_rate, FLAGS.layers, FLAGS.engines, FLAGS.scan_layers,
         _cpu_devices(FLAGS.cpu_devices, model_kv_heads(FLAGS.model) if FLAGS.model else
                      kv_heads(size, FLAGS.layers), FLAGS.torch_device), FLAGS.model)


def _cpu_devices(wanted: int, heads: list[int], torch_device: str) -> int:
  """--cpu_devices resolved, and jax's CPU device count set to it before jax starts: not
  where a count is already set (JAX_NUM_CPU_DEVICES, XLA_FLAGS' forced count: kept, the
  mesh takes its first devices) or for an accelerator's run (--torch_device other than
  cpu, or JAX_PLATFORMS without cpu: the count would only change the program store's
  keys)."""
  # The logical CPUs this process may run on (a container's CPU quota is not read).
  cpus = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
          else os.cpu_count()) or 1
  already = (jax.config.jax_num_cpu_devices != -1 or
             "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""))
  if already:
    cpus = min(cpus, len(jax.devices("cpu")))
  devices = wanted or sharding.host_devices(cpus, heads)
  if any(h % devices for h in heads):
    logging.warning("--cpu_devices=%d does not divide the models' KV heads %s: caches stay "
                    "whole on every device", devices, heads)
  platforms = jax.config.jax_platforms or ""
  on_accelerator = torch_device != "cpu" or (platforms and "cpu" not in platforms.split(","))
  if devices > 1 and not on_accelerator and not already:
    jax.config.update("jax_num_cpu_devices", devices)
  return devices


if __name__ == "__main__":
  cli.run(main)
