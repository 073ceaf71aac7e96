"""What a workdir holds, in WORKDIR/run.json, so a run never silently resumes another's,
and where it came from.

A rerun of the same command into the same workdir resumes it. A run whose job
(training or rollouts), rewards, advantage or models differ from the recorded
ones stops before any work, naming both; `--config.resume_mismatch=allow`
takes the workdir over anyway (the record is then rewritten).

run.json also keeps, for every start of the run (`starts`, the latest also as
`provenance`): the time, command, directory, pedrl's git commit and whether the
clone had local changes (when pedrl runs from a clone), the versions of pedrl
and its key packages, and the devices and hosts. `config.json` holds the whole
config with every existing relative path made absolute, so tools that read the
workdir work from any directory.
"""
import datetime
import importlib.metadata
import json
import os
import subprocess
import sys

from absl import logging
import jax

from pedrl import distributed, files, paths

RECORD = "run.json"
PACKAGES = ("jax", "jaxlib", "flax", "optax", "orbax-checkpoint", "transformers", "numpy",
            "openai", "math-verify")
_SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POLICIES = ("refuse", "allow")


class WorkdirError(ValueError):
  """The workdir belongs to a different run."""


distributed.register_error(WorkdirError)


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
  """The parts of a dialogue job's settings (pedrl.jobs.settings.DialogueSettings; a
  "train" job's TrainingSettings) that make a workdir's contents one run's: resuming into
  a workdir where any of them differs would mix two runs' data."""
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


def refuse_checkpoint(workdir: str) -> None:
  """A model checkpoint directory is no workdir: its config.json would be overwritten."""
  if architecture(workdir).get("model_type"):
    raise WorkdirError(f"{workdir} holds a model checkpoint (its config.json names a "
                       "model_type); give the run its own --workdir")


def recorded_job(workdir: str) -> str | None:
  """The job a workdir holds ("train", "rollout", …): as its run.json says, else inferred
  from its files (a workdir written before run.json existed); None if neither tells."""
  try:
    with open(os.path.join(workdir, RECORD)) as f:
      return json.load(f)["identity"]["job"]
  except (OSError, ValueError, KeyError, TypeError):
    return _inferred_job(workdir)


def claim(workdir: str, s, job: str, config_name: str, main_process: bool = True,
          want: dict | None = None) -> None:
  """Checks that `workdir` is empty or holds the run of settings `s`, then records it.
  `want`: the run's identity when it is not a dialogue job's (`identity(s, job)`).

  With several processes, process 0 checks and writes the record and every process
  raises its refusal: each reading run.json while process 0 rewrites it could take
  another branch. (`main_process` is kept for callers; process 0 is the one that writes.)"""
  del main_process
  distributed.on_main_process(_claim, workdir, s, job, config_name, want)


def _claim(workdir: str, s, job: str, config_name: str, want: dict | None) -> None:
  refuse_checkpoint(workdir)
  want = identity(s, job) if want is None else want
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
  os.makedirs(workdir, exist_ok=True)
  start = provenance()
  starts = (have or {}).get("starts", []) + [start]
  files.write_json(path, {"config": config_name, "identity": want, "provenance": start,
                          "starts": starts})


def _git(*args) -> str | None:
  try:
    out = subprocess.run(["git", "-C", _SOURCE, *args], capture_output=True, text=True,
                         timeout=10)
  except (OSError, subprocess.SubprocessError):
    return None
  return out.stdout.strip() if out.returncode == 0 else None


def _version(package: str) -> str | None:
  try:
    return importlib.metadata.version(package)
  except importlib.metadata.PackageNotFoundError:
    return None


def provenance() -> dict:
  """Where this start of a run came from: time, command, code, packages, devices."""
  # .git is a folder in a clone and a file in a git worktree or submodule checkout.
  commit = _git("rev-parse", "HEAD") if os.path.exists(os.path.join(_SOURCE, ".git")) else None
  devices = jax.devices()
  return {
      "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "command": [sys.executable, *sys.argv], "cwd": os.getcwd(),
      "git_commit": commit,
      "git_dirty": None if commit is None else bool(_git("status", "--porcelain")),
      "versions": {"python": sys.version.split()[0], "pedrl": _version("pedrl"),
                   **{p: _version(p) for p in PACKAGES}},
      "devices": {"platform": devices[0].platform, "kind": devices[0].device_kind,
                  "count": len(devices), "processes": jax.process_count()}}


def _absolute(tree, key: str = ""):
  """The config tree with each path-named value that exists relative to here made absolute."""
  if isinstance(tree, dict):
    return {k: _absolute(v, k) for k, v in tree.items()}
  if (isinstance(tree, str) and key.endswith(paths.PATH_KEYS) and tree and not os.path.isabs(tree)
      and os.path.exists(tree)):
    return os.path.abspath(tree)
  return tree


def write_config(workdir: str, config) -> None:
  """WORKDIR/config.json: the config (an ml_collections ConfigDict), paths absolute;
  through a renamed temporary file, since shards of an evaluation write it together."""
  refuse_checkpoint(workdir)
  files.write_json(os.path.join(workdir, "config.json"),
                   _absolute(json.loads(config.to_json_best_effort())))


def config_name(argv) -> str:
  """The --config=FILE:VARIANT argument as given (for messages and the record)."""
  return next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), "?")
