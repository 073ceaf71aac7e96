r"""pedrl's OpenAI-compatible server: how soon it answers and is ready, and how it serves
mixed concurrent traffic.

  python -m pedrl.bench.serve                          # testdata Qwen2: both
  python -m pedrl.bench.serve --measure=startup        # start-up only
  python -m pedrl.bench.serve --model=/models/Qwen2.5-0.5B-Instruct --concurrency=16,64

Start-up (--measure=startup): `python -m pedrl.serve --model=MODEL` with its default
settings, started --starts times in a fresh compilation cache (the first start is
cold: every program compiles; the later ones warm: read from JAX's persistent cache
and pedrl's program store). Per start, seconds from launching the process to

  port    the first HTTP answer of GET /health (any status: the port answers)
  ready   GET /health answering 200 {"status": "ready"}: every program compiled

Traffic (--measure=traffic): the server (`pedrl.serve`, in this process, warmed up
first) gets --rounds rounds of N requests sent at once for each N in --concurrency,
from one asyncio client. The mix, one seeded draw per request: max_tokens 1-64,
temperature 0 or 1, n 1-4, no stop / a newline / "." and "?"; every prompt opens with
the same tutor system prompt (about 80 tokens) and ends with its own problem, so
prefix caching has a shared opening to reuse. Each row of the table is one round:

  clients     requests sent at once
  req/s tok/s requests and sampled tokens per second of wall time
  p50 p95 p99 request latency percentiles, seconds
  errors      requests that got no 200
  compiled    programs JAX compiled during the round (0: the warm-up covered them)
  cached      prompt tokens read from a row's cached opening, % of all prompt tokens

With --prefix_caching=both (the default) every round runs on a server with prefix
caching and on one without.
"""
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from absl import flags
import numpy as np

from pedrl import cli, paths
from pedrl.serve import prometheus, server

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "testdata/models/qwen2", "A checkpoint directory to serve.")
flags.DEFINE_list("concurrency", ["50", "200"], "Requests sent at once, one measurement each.")
flags.DEFINE_integer("rounds", 3, "Rounds per concurrency (each a new draw of the mix).")
flags.DEFINE_enum("prefix_caching", "both", ["on", "off", "both"], "Server setting(s) to run.")
flags.DEFINE_integer("max_num_seqs", 32, "The server's rows.")
flags.DEFINE_integer("max_model_len", None, "The server's sequence limit (default: the context).")
flags.DEFINE_list("measure", ["startup", "traffic"], "What to measure: startup, traffic.")
flags.DEFINE_integer("starts", 2, "Start-ups measured: the first cold, the rest warm.",
                     lower_bound=1)
flags.DEFINE_float("start_timeout_s", 900, "A start-up not ready after this long fails.")

SYSTEM = ("You are a patient math tutor. Guide the student with one question at a time, "
          "never give the final answer away, and check each step the student makes before "
          "moving on. Keep every reply short and kind.\n")
STOPS = [None, ["\n"], [".", "?"]]


def mix(rng: np.random.Generator, n: int, name: str) -> list[dict]:
  """n request bodies of the mix above."""
  return [{"model": name, "prompt": f"{SYSTEM}Problem {int(rng.integers(1e6))}: what is "
           f"{int(rng.integers(100))} + {int(rng.integers(100))}?\nTutor:",
           "max_tokens": int(rng.integers(1, 65)), "temperature": int(rng.integers(2)),
           "n": int(rng.integers(1, 5)), "stop": STOPS[int(rng.integers(3))],
           "seed": int(rng.integers(1 << 31))} for _ in range(n)]


async def send_all(url: str, bodies: list[dict]) -> list[tuple[float, int, bool]]:
  """(latency s, sampled tokens, ok) per request, all sent at once from one asyncio
  client (lighter on the CPU the server shares than a thread per request)."""
  import openai
  client = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0, timeout=600)

  async def one(body):
    start = time.perf_counter()
    try:
      r = await client.completions.create(**body)
    except openai.APIError:
      return time.perf_counter() - start, 0, False
    return time.perf_counter() - start, r.usage.completion_tokens, True

  try:
    return await asyncio.gather(*(one(b) for b in bodies))
  finally:
    await client.close()


def measure(model: str, prefix_caching: bool, rng: np.random.Generator) -> list[dict]:
  options = server.Options(max_num_seqs=FLAGS.max_num_seqs, max_model_len=FLAGS.max_model_len,
                           max_queue=4096, prefix_caching=prefix_caching)
  api, scheduler = server.build(model, served_name="bench", options=options, access_log=False)
  url, stop = server.start(api)
  rows = []
  try:
    for clients in map(int, FLAGS.concurrency):
      for _ in range(FLAGS.rounds):
        bodies = mix(rng, clients, "bench")
        sample = lambda name: scheduler.metrics.registry.get_sample_value(name) or 0.0
        before = (prometheus.programs_compiled(), sample("pedrl_prompt_tokens_total"),
                  sample("pedrl_prefix_cached_tokens_total"))
        start = time.perf_counter()
        results = asyncio.run(send_all(url, bodies))
        wall = time.perf_counter() - start
        latency = np.array([r[0] for r in results])
        prompt = sample("pedrl_prompt_tokens_total") - before[1]
        rows.append(dict(
            prefix="on" if prefix_caching else "off", clients=clients,
            req_s=clients / wall, tok_s=sum(r[1] for r in results) / wall,
            p50=np.percentile(latency, 50), p95=np.percentile(latency, 95),
            p99=np.percentile(latency, 99), errors=sum(not r[2] for r in results),
            compiled=prometheus.programs_compiled() - before[0],
            cached=100 * (sample("pedrl_prefix_cached_tokens_total") - before[2]) / max(prompt, 1)))
  finally:
    stop()
    scheduler.close()  # Its engine (weights, caches) goes with the thread.
  return rows


def _health(base: str) -> tuple[int, dict] | None:
  """GET /health's (status, body); None while nothing answers on the port."""
  try:
    with urllib.request.urlopen(base + "/health", timeout=10) as r:
      return r.status, json.loads(r.read())
  except urllib.error.HTTPError as e:
    return e.code, json.loads(e.read())
  except (urllib.error.URLError, ConnectionError, TimeoutError):
    return None


def start_up(model: str, cache: str) -> dict:
  """Seconds from launching `python -m pedrl.serve` (its default settings, `cache` its
  compilation cache and program store) to its port's first answer and to ready."""
  with socket.socket() as s:  # A free port (127.0.0.1 only).
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  env = {k: v for k, v in os.environ.items() if k != "PEDRL_PROGRAM_STORE"}  # In `cache`.
  base, answered = f"http://127.0.0.1:{port}", None
  start = time.perf_counter()
  proc = subprocess.Popen([sys.executable, "-m", "pedrl.serve", f"--model={model}",
                           f"--port={port}", f"--compilation_cache={cache}", "--noaccess_log"],
                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  try:
    while time.perf_counter() - start < FLAGS.start_timeout_s:
      if proc.poll() is not None:
        raise RuntimeError(f"the server exited ({proc.returncode}): {proc.stderr.read()[-2000:]}")
      health = _health(base)
      if health is None:
        time.sleep(0.02)
        continue
      answered = answered or time.perf_counter() - start
      if health[0] == 200:
        return dict(port=answered, ready=time.perf_counter() - start)
      if health[1].get("status") == "failed":
        raise RuntimeError(f"the server failed to load: {health[1].get('error')}")
      time.sleep(0.05)
    raise RuntimeError(f"the server was not ready after {FLAGS.start_timeout_s:.0f} s")
  finally:
    proc.send_signal(signal.SIGTERM)
    try:
      proc.wait(30)
    except subprocess.TimeoutExpired:
      proc.kill()


def main(argv: list[str]) -> None:
  del argv
  import jax
  model = paths.resolve(FLAGS.model, paths.repo_root())  # testdata/… from any directory.
  measures = set(FLAGS.measure)
  if measures - {"startup", "traffic"}:
    cli.fail(f"--measure={','.join(FLAGS.measure)}: give startup, traffic or both")
  print(f"model: {model}; {jax.default_backend()} ({os.cpu_count()} cores), jax "
        f"{jax.__version__}; load average {os.getloadavg()[0]:.1f} at the start")
  if "startup" in measures:
    with tempfile.TemporaryDirectory(prefix="pedrl-bench-serve-") as cache:
      starts = [start_up(model, cache) for _ in range(FLAGS.starts)]
    print(f"{'start':>6s} {'cache':>6s} {'port':>7s} {'ready':>7s}")
    for i, t in enumerate(starts):
      print(f"{i + 1:6d} {'cold' if i == 0 else 'warm':>6s} {t['port']:7.2f} {t['ready']:7.2f}")
    print(f"serve_port_open_s={max(t['port'] for t in starts):.2f}")
    print(f"serve_ready_cold_s={starts[0]['ready']:.2f}")
    if len(starts) > 1:
      print(f"serve_ready_warm_s={max(t['ready'] for t in starts[1:]):.2f}")
    print(f"load average {os.getloadavg()[0]:.1f} after the start-ups")
  if "traffic" not in measures:
    return
  settings = {"on": [True], "off": [False], "both": [True, False]}[FLAGS.prefix_caching]
  rng = np.random.default_rng(0)
  rows = [row for setting in settings for row in measure(model, setting, rng)]
  load = os.getloadavg()[0]
  print(f"traffic: {FLAGS.max_num_seqs} rows; load average {load:.1f} at the end")
  print(f"{'prefix':>6s} {'clients':>7s} {'req/s':>7s} {'tok/s':>7s} {'p50':>6s} {'p95':>6s} "
        f"{'p99':>6s} {'errors':>6s} {'compiled':>8s} {'cached':>6s}")
  for r in rows:
    print(f"{r['prefix']:>6s} {r['clients']:7d} {r['req_s']:7.1f} {r['tok_s']:7.0f} "
          f"{r['p50']:6.2f} {r['p95']:6.2f} {r['p99']:6.2f} {r['errors']:6d} "
          f"{r['compiled']:8d} {r['cached']:5.0f}%")
  print(f"serve_errors={sum(r['errors'] for r in rows)}")
  print(f"serve_programs_compiled_after_warmup={sum(r['compiled'] for r in rows)}")
  print(f"serve_worst_p95_over_p50={max(r['p95'] / r['p50'] for r in rows):.2f}")


if __name__ == "__main__":
  cli.run(main)
