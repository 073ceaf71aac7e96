r"""MathTutorBench's nine numbers for a tutor, on pedrl's engine (papers 003, 000, 002).

  python -m pedrl.experiments.mathtutorbench --config=experiments/mathtutorbench.py:tiny --workdir=/tmp/mtb

Per task: the harness's examples from local data, prompts rendered from the
benchmark's own task files, replies from the model (batched, greedy, the task's
stop strings), parsed and scored as the harness does; the pedagogical tasks
also get the Ped-RM win rate over the human teacher. Writes
WORKDIR/responses-<task>.jsonl, generations-<model>-<task>.json (the four
pedagogical tasks, in the benchmark's format), results.json and results.md.
A rerun continues each task after its last complete batch.
"""
import json
import os
import time

from absl import app, flags, logging
from tqdm import tqdm

from pedrl.env import party as party_lib
from pedrl.eval import pedrm as pedrm_lib
from pedrl.eval.mathtutorbench import runner, tasks, win_rate
from pedrl.eval.shards import TutorRun
from pedrl.experiments import settings as settings_lib
from pedrl.experiments.common import define_flags, exits_cleanly, load_party
from pedrl.rl import checkpoint

define_flags("experiments/mathtutorbench.py:tiny", "Output directory (responses, results).")
FLAGS = flags.FLAGS

# The leaderboard's nine columns: (task, metric, title).
COLUMNS = (("problem_solving", "accuracy_strict-match", "Problem solving"),
           ("socratic_questioning", "bleu", "Socratic questioning"),
           ("solution_correctness", "f1", "Solution correctness"),
           ("mistake_location", "f1_micro", "Mistake location"),
           ("mistake_correction", "accuracy", "Mistake correction"),
           ("scaffolding_generation", "win_rate", "Scaffolding (win rate)"),
           ("pedagogy_following", "win_rate", "Pedagogy following (win rate)"),
           ("scaffolding_generation_hard", "win_rate", "Scaffolding, hard"),
           ("pedagogy_following_hard", "win_rate", "Pedagogy following, hard"))


def read(config):
  """(job, mesh, tutor, tutor run, bench, pedrm) settings; every key must be read."""
  r = settings_lib.Reader(config)
  try:
    out = (r.read(settings_lib.JobSettings), r.read(settings_lib.MeshSettings, "mesh"),
           r.read(party_lib.PartySettings, "tutor"), r.read(TutorRun, "tutor"),
           r.read(runner.BenchSettings), r.read(pedrm_lib.PedRMSettings, "pedrm"))
    r.check_all_read()
  except ValueError as e:
    raise app.UsageError(str(e)) from None
  return out


def load_tasks(bench, rm_settings) -> dict:
  """{task: (its task file, its examples)}, every file and row checked, and the reward
  model's config: all before any model loads."""
  for name in ("benchmark_dir", "data_dir"):
    if not getattr(bench, name) or not os.path.isdir(getattr(bench, name)):
      raise app.UsageError(f"--config.{name}={getattr(bench, name)!r} is not a directory")
  out = {}
  for task in bench.names:
    examples = tasks.examples(task, bench.data_dir)
    out[task] = (tasks.read_task(bench.benchmark_dir, task),
                 examples[:bench.limit] if bench.limit > 0 else examples)
  if rm_settings.path:
    pedrm_lib.check(rm_settings)
    if any(t in tasks.PEDAGOGICAL for t in bench.names) and not rm_settings.system_prompt_file:
      raise app.UsageError("the win rate needs --config.pedrm.system_prompt_file: the reward "
                           "model's system prompt, from the benchmark's reward_model/ script")
  return out


def table(results: dict) -> str:
  head = [title for _, _, title in COLUMNS]
  cells = []
  for task, metric, _ in COLUMNS:
    value = results.get(task, {}).get(metric)
    cells.append("–" if value is None else f"{100 * value:.1f}")
  return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
                    "| " + " | ".join(cells) + " |"])


@exits_cleanly
def main(argv):
  del argv
  job, mesh_s, tutor_s, run, bench, rm_s = read(FLAGS.config)
  loaded = load_tasks(bench, rm_s)
  workdir = FLAGS.workdir
  os.makedirs(workdir, exist_ok=True)
  mesh = mesh_s.make()
  params = None
  if run.workdir:
    base, _, params, step = checkpoint.trained_tutor(run.workdir, run.step, job.scan_layers, mesh)
    tutor_s = party_lib.PartySettings(base, tutor_s.temperature, tutor_s.top_k, tutor_s.top_p,
                                      tutor_s.max_new_tokens)
    logging.info("the model under test: %s step %d", run.workdir, step)
  party = load_party(tutor_s, mesh, job.scan_layers, params=params)
  policy = runner.ModelPolicy(party, bench, job.seed)
  rm = pedrm_lib.PedRM(rm_s) if rm_s.path else None
  results, start = {}, time.perf_counter()
  for task, (task_file, examples) in loaded.items():
    clock = time.perf_counter()
    with tqdm(total=len(examples), unit="example", desc=task) as bar:
      result = runner.run_task(task, task_file, examples, bench, policy, workdir, bar.update)
    out = result.metrics
    if task in tasks.PEDAGOGICAL:
      runner.write_generations(workdir, bench.model_name, task,
                               win_rate.generations(examples, result.replies))
      if rm is not None:
        cut = rm.cut
        out.update(win_rate.win_rate(rm, examples, result.replies, rm.system_prompt))
        out["pedrm_inputs_cut"] = rm.cut - cut
    seconds = time.perf_counter() - clock
    out.update(seconds=round(seconds, 2), examples_per_s=round(out["examples"] / seconds, 3))
    results[task] = out
    logging.info("%s: %s", task, out)
  with open(os.path.join(workdir, "results.json"), "w") as f:
    json.dump(results, f, indent=2)
  text = table(results)
  with open(os.path.join(workdir, "results.md"), "w") as f:
    f.write(text + "\n")
  print(text)
  print(f"seconds={time.perf_counter() - start:.1f}")


if __name__ == "__main__":
  app.run(main)
