"""What a workdir holds, in WORKDIR/run.json, so a run never silently resumes another's.

A rerun of the same command into the same workdir resumes it. A run whose job
(training or rollouts), rewards, advantage or models differ from the recorded
ones stops before any work, naming both; `--config.resume_mismatch=allow`
takes the workdir over anyway (the record is then rewritten).
"""
import json
import os

from absl import logging

RECORD = "run.json"
POLICIES = ("refuse", "allow")


class WorkdirError(ValueError):
  """The workdir belongs to a different run."""


def architecture(path: str) -> dict:
  """The fields of a checkpoint's config.json that say which model it is."""
  if not path:  # A side played by an endpoint.
    return {}
  try:
    with open(os.path.join(path, "config.json")) as f:
      cfg = json.load(f)
  except (OSError, ValueError):
    return {}
  keys = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "intermediate_size")
  return {k: cfg.get(k) for k in keys}


def identity(s, job: str) -> dict:
  """The parts of a run's settings (RunSettings) that make a workdir's contents one run's:
  resuming into a workdir where any of them differs would mix two runs' data."""
  out = {"job": job,
         "rewards": ",".join(f"{name}:{w:g}" for name, w in s.rewards.weights),
         "hard": s.rewards.hard,
         "judges": s.judging.judges if s.rewards.needs_judges else None,
         "tutor": architecture(s.tutor.path), "student": architecture(s.student.path)}
  if job == "train":
    out["advantage"] = s.train.advantage
  return out


def _inferred_job(workdir: str) -> str | None:
  """The job of a workdir written before run.json existed, from what it holds."""
  if os.path.isdir(os.path.join(workdir, "checkpoints")) and os.listdir(
      os.path.join(workdir, "checkpoints")):
    return "train"
  if os.path.exists(os.path.join(workdir, "dialogues.jsonl")):
    return "rollout"
  return None


def claim(workdir: str, s, job: str, config_name: str, main_process: bool = True) -> None:
  """Checks that `workdir` is empty or holds the run of settings `s`, then records it."""
  want = identity(s, job)
  path = os.path.join(workdir, RECORD)
  have = None
  if os.path.exists(path):
    try:
      with open(path) as f:
        have = json.load(f)
    except ValueError as e:
      raise WorkdirError(f"{path}: not a run record ({e}); use a new workdir") from None
  elif (job_there := _inferred_job(workdir)) is not None:
    have = {"identity": {"job": job_there}, "config": "an earlier run (no run.json)"}
  if have is not None:
    old = have.get("identity", {})
    diff = sorted(k for k in set(old) | set(want) if k in old and old.get(k) != want.get(k))
    if diff:
      describe = lambda ident: ", ".join(f"{k}={ident.get(k)}" for k in diff)
      message = (f"{workdir} holds a {old.get('job')} run of {have.get('config')} "
                 f"({describe(old)}); this is a {job} run of {config_name} ({describe(want)})")
      if s.job.resume_mismatch != "allow":
        raise WorkdirError(f"{message}. Use a new --workdir, or --config.resume_mismatch=allow "
                           "to take this one over")
      logging.warning("%s; taking it over (resume_mismatch=allow)", message)
  if main_process:
    os.makedirs(workdir, exist_ok=True)
    with open(path, "w") as f:
      json.dump({"config": config_name, "identity": want}, f, indent=2)


def config_name(argv) -> str:
  """The --config=FILE:VARIANT argument as given (for messages and the record)."""
  return next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), "?")
