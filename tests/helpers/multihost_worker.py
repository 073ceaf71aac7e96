"""One process of a 2-process CPU "pod" (2 devices each), run by tests/project/test_multihost.py
from the repository's root:

  python -m tests.helpers.multihost_worker PROCESS_ID PORT OUT.json

Samples, scores and takes one GRPO step on a (data=2, fsdp=2) mesh whose data
axis spans the two processes, and exchanges an API reply from process 0;
writes what it saw to OUT.json for the test to compare across processes and
with a single-process run (`compute`).
"""
import json
import os
import sys

import numpy as np

from tests.helpers import jobs  # Nothing heavy.


def inputs():
  rng = np.random.default_rng(0)
  prompts = [list(rng.integers(3, 900, size=n)) for n in (5, 9, 3, 7)]
  tokens = rng.integers(3, 900, size=(4, 16)).astype(np.int32)
  attn = np.ones((4, 16), bool)
  loss_mask = np.zeros((4, 16), bool)
  loss_mask[:, 6:] = True
  adv = np.where(loss_mask, np.asarray([1.0, -1.0, 0.5, -0.5])[:, None], 0.0).astype(np.float32)
  return prompts, {"tokens": tokens, "attn_mask": attn, "loss_mask": loss_mask, "advantages": adv}


def compute(ckpt: str, mesh) -> dict:
  """Sampled tokens, reference log-probs, and one GRPO step's metrics and a param row."""
  from pedrl import models, sharding
  from pedrl.engine import Sampler, SamplingParams
  from pedrl.rl import update
  from pedrl.rl.batch import TrainBatch
  from pedrl.streams import sequence_keys
  cfg, model, params = models.load(ckpt, shardings=mesh)
  prompts, batch = inputs()
  sp = SamplingParams(max_new_tokens=6, temperature=1.0, top_p=0.9)
  gen, _ = Sampler(model, mesh=mesh).generate(params, prompts, sequence_keys(0, range(4)), sp)
  logp = update.logprobs_in_chunks(model, params, batch["tokens"], batch["attn_mask"], 1.0, 2, mesh)
  batch = TrainBatch(**batch, old_logp=logp, ref_logp=logp - 0.05)
  opt = update.make_optimizer(1e-3, eps=1.0)
  settings = update.GRPOObjective(update.GRPOSettings(micro_batch=2), temperature=1.0)
  params, _, metrics = update.train_step(model, params, update.init_optimizer(opt, params), opt,
                                         batch, settings, mesh)
  row = sharding.to_host(params["embed"]["embedding"])[7]
  return {"tokens": np.asarray(gen.tokens).tolist(), "logp": logp.tolist(),
          "metrics": metrics.to_row(), "embedding_row": row.tolist()}


def main(process_id: int, port: int, out: str):
  os.environ["XLA_FLAGS"] = jobs.xla_flags(2)
  os.environ["JAX_PLATFORMS"] = "cpu"
  import jax
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=process_id)
  from pedrl import distributed, sharding
  from pedrl.rewards import backends

  class Echo:  # An "API" client, built on process 0 only (as the entry points do).
    stats = {"calls": 1}

    def complete(self, requests, round_=0):
      if requests == ["crash"]:
        raise RuntimeError("unexpected reply type")
      return [f"{r} from {process_id}" for r in requests] + [TimeoutError("gave up")]

  root = jobs.ROOT
  mesh = sharding.make_mesh(data=2, fsdp=2)
  result = compute(os.path.join(root, "testdata", "models", "qwen2"), mesh)
  api = backends.MainProcessCalls(Echo() if distributed.is_main_process() else None)
  replies = api.complete(["a", "b"])
  result["replies"] = [r if isinstance(r, str) else f"error: {type(r).__name__}: {r}"
                       for r in replies]
  try:  # Any exception of process 0's client is raised on every process (none may hang).
    api.complete(["crash"])
  except backends.JudgeError as e:
    result["crash"] = str(e)
  result["stats"] = dict(api.stats)
  result["batch_spans_processes"] = not sharding.put_rows(np.zeros((4, 2)), mesh).is_fully_addressable
  result["main"] = distributed.is_main_process()
  result["stop"] = distributed.any_process(process_id == 1)  # A SIGTERM seen by host 1 only.
  with open(out, "w") as f:
    json.dump(result, f)


if __name__ == "__main__":
  main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
