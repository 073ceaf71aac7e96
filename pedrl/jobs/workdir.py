"""What a workdir holds, in WORKDIR/run.json, so a run never silently resumes another's,
and where it came from.

Every job records in run.json which job it is and the settings it ran with
(`settings`: the config's values by dotted key, paths absolute). A job
refuses, before it loads or writes anything, a workdir holding another job's
run (an evaluation into a training run, training into an evaluation: `guard`),
and a resume whose settings differ from the recorded ones, listing the keys
that differ; `--config.resume_mismatch=allow` resumes anyway and records what
changed in that start's entry of `starts` (`changed`: key -> [before, now]).

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
from collections.abc import Sequence
import datetime
import fcntl
import importlib.metadata
import json
import os
import socket
import subprocess
import sys

from absl import logging
import jax
import ml_collections

from pedrl import distributed, fields, files, paths
from pedrl.eval import shards
from pedrl.jobs.settings import DialogueSettings, OfflineRunSettings

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


def identity(s: DialogueSettings, job: str) -> dict:
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


def claim(workdir: str, s: DialogueSettings | OfflineRunSettings, job: str, config_name: str,
          main_process: bool = True, want: dict | None = None) -> None:
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
  _hold(workdir)  # A new folder: held from now.
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
  """Where this start of a run came from: time, host, command, code, packages, devices."""
  # .git is a folder in a clone and a file in a git worktree or submodule checkout.
  commit = _git("rev-parse", "HEAD") if os.path.exists(os.path.join(_SOURCE, ".git")) else None
  devices = jax.devices()
  return {
      "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "host": socket.gethostname(), "pid": os.getpid(),
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


def write_config(workdir: str, config: ml_collections.ConfigDict) -> None:
  """WORKDIR/config.json: the config (an ml_collections ConfigDict), paths absolute;
  through a renamed temporary file, since shards of an evaluation write it together."""
  refuse_checkpoint(workdir)
  files.write_json(os.path.join(workdir, "config.json"),
                   _absolute(json.loads(config.to_json_best_effort())))


def config_name(argv: Sequence[str]) -> str:
  """The --config=FILE:VARIANT argument as given (for messages and the record)."""
  return next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), "?")


# -- Every job's record: which job a workdir holds, and with which settings ----------------

# The training entry points share one job: a run of either resumes only with its own
# config's settings (`guard`).
TRAINING_ENTRY_POINTS = ("uco", "pedagogical_rl", "thinking")
# Settings a resume may change without changing the run: the policy itself, which shard a
# process runs, the device mesh (checkpoints restore onto any), how often and how many
# checkpoints and samples are written, memory-for-time trades; and a training run's length
# (a GRPO run at a constant learning rate may be extended; the checkpoint's metadata refuses
# a length that shapes the learning-rate schedule or an offline run's data order,
# pedrl.rl.loop).
RESUMABLE_KEYS = frozenset(
    ["resume_mismatch", "eval.shard", "baselines.shard", "rl.steps", "train.steps", "train.epochs",
     "rl.samples_every", "rl.samples_dialogues", "rl.dialogues_every"]
    + [f"{section}.{key}" for section in ("rl", "train")
       for key in ("save_every", "keep", "remat", "logits_chunk")])
RESUMABLE_PREFIXES = ("mesh.",)
# Jobs whose rerun with other settings is a documented way to extend the run, not a
# mismatch: analyze caches labels per text and labeller and may add conditions.
EXTENDABLE_JOBS = ("analyze",)
SHOWN_CHANGES = 6  # Differing settings named in the refusal's one line.
# The jobs sharded evaluations record in their shards' protocols (pedrl.eval.protocol).
_SHARD_JOBS = {"tutoring": "evaluate", "reasoning": "evaluate",
               "mathtutorbench": "mathtutorbench", "baselines": "baseline_data"}
# What to do with a workdir of each job instead (an evaluation reads a training run).
_WAY_OUT = {"train": "--config.tutor.workdir={workdir} evaluates it",
            "sft": "--config.tutor.workdir={workdir} evaluates it",
            "mdpo": "--config.tutor.workdir={workdir} evaluates it",
            "baseline_data": "--config.data.workdir={workdir} trains SFT or MDPO on it"}


def job_of(entry_point: str) -> str:
  """The job a `pedrl.experiments.NAME` entry point runs, as run.json records it."""
  return "train" if entry_point in TRAINING_ENTRY_POINTS else entry_point


def _record(workdir: str) -> dict:
  path = os.path.join(workdir, RECORD)
  if not os.path.exists(path):
    return {}
  try:
    with open(path) as f:
      out = json.load(f)
  except (OSError, ValueError) as e:
    raise WorkdirError(f"{path}: not a run record ({e}); use a new workdir") from None
  if not isinstance(out, dict):
    raise WorkdirError(f"{path}: not a run record (not an object); use a new workdir")
  return out


def held_job(workdir: str) -> tuple[str, str] | None:
  """(job, config) of the run a workdir holds, None when empty or unknown: run.json says,
  else (written before every job recorded itself) its files do: shards of an evaluation
  or of the baseline data, CPA's tables, an analysis, checkpoints, dialogues."""
  record = _record(workdir)
  job = (record.get("identity") or {}).get("job") if isinstance(record.get("identity"), dict) \
      else None
  if job:
    return job, record.get("config", "?")
  earlier = "an earlier run (no run.json)"
  try:
    kind = shards.recorded_kind(workdir)
  except shards.ShardError:
    kind = None
  if kind in _SHARD_JOBS:
    return _SHARD_JOBS[kind], earlier
  if os.path.exists(os.path.join(workdir, "tables.md")):
    return "cpa", earlier
  if os.path.isdir(os.path.join(workdir, "labels")) or any(
      os.path.exists(os.path.join(workdir, f)) for f in ("analysis.md", "views.md")):
    return "analyze", earlier
  job = _inferred_job(workdir)
  return (job, earlier) if job else None


def settings_of(config: ml_collections.ConfigDict) -> dict:
  """A config's values by dotted key (paths absolute, as config.json has them), without
  those a resume may change (RESUMABLE_KEYS, RESUMABLE_PREFIXES)."""
  values = fields.dotted(_absolute(json.loads(config.to_json_best_effort())))
  return {k: v for k, v in values.items()
          if k not in RESUMABLE_KEYS and not k.startswith(RESUMABLE_PREFIXES)}


def _a(job: str) -> str:
  return f"{'an' if job[0] in 'aeiou' else 'a'} {job}"


def _shown(value) -> str:
  return json.dumps(value) if not isinstance(value, str) else repr(value)


def guard(workdir: str, job: str, config: ml_collections.ConfigDict, config_name: str) -> dict:
  """`_check`, decided by process 0 for all (its reading races no writer of run.json); a
  start that passes holds the workdir until its process ends (`_hold`), except a shard of
  several, whose starts share it."""
  return distributed.on_main_process(_guard, workdir, job, config, config_name)


def _guard(workdir: str, job: str, config, config_name: str) -> dict:
  changed = _check(workdir, job, config, config_name)
  if not _concurrent_shards(config):
    _hold(workdir)
  return changed


def _check(workdir: str, job: str, config, config_name: str) -> dict:
  """Checks, reading only, that `workdir` may take this start of job `job` (config
  `config`, an ml_collections ConfigDict): it holds no model checkpoint, no other job's
  run, and, when it holds this job's, one of the same settings. Returns the settings that
  differ ({key: [recorded, now]}), which `--config.resume_mismatch=allow` lets through;
  otherwise a WorkdirError names the workdir's job and the way out."""
  refuse_checkpoint(workdir)
  held = held_job(workdir)
  if held is None:
    return {}
  have, made_by = held
  if have != job:
    way_out = _WAY_OUT.get(have, "").format(workdir=workdir)
    raise WorkdirError(
        f"{workdir} holds {_a(have)} run of {made_by}; this {job} run of {config_name} does not "
        "write into another job's workdir: give it its own --workdir"
        + (f" ({way_out})" if way_out else ""))
  recorded = _record(workdir).get("settings")
  if recorded is None or job in EXTENDABLE_JOBS:
    return {}
  recorded, now = fields.under_current_keys(recorded), settings_of(config)
  changed = {k: [recorded.get(k), now.get(k)] for k in sorted(set(recorded) | set(now))
             if recorded.get(k) != now.get(k)}
  if changed and config.get("resume_mismatch", "refuse") != "allow":
    listed = "; ".join(f"{k}: {_shown(a)} -> {_shown(b)}" for k, (a, b) in
                       list(changed.items())[:SHOWN_CHANGES])
    if len(changed) > SHOWN_CHANGES:
      listed += f"; and {len(changed) - SHOWN_CHANGES} more"
    raise WorkdirError(
        f"{workdir} holds {_a(job)} run of {made_by} with other settings ({listed}); resume it "
        "with its own settings, give a new --workdir, or --config.resume_mismatch=allow to "
        "resume it with these (run.json records what changed)")
  if changed:
    logging.warning("%s: resuming with other settings (%s), as resume_mismatch=allow lets it",
                    workdir, ", ".join(changed))
  return changed


# -- One start at a time ---------------------------------------------------------------------

_HELD: dict[str, int] = {}  # Workdir -> the descriptor whose lock this process holds.


def _concurrent_shards(config) -> bool:
  """Whether the config runs one shard of several, whose starts share the workdir at once."""
  return any(config.get(section) is not None and config[section].get("num_shards", 1) > 1
             for section in ("eval", "baselines"))


def _hold(workdir: str) -> None:
  """Holds the workdir's exclusive lock (flock on the folder itself: no file is added) until
  this process ends, however it ends: a second start of a run while the first runs would
  save over its checkpoints and write its records twice. A WorkdirError names the start
  that holds it. Where the file system has no locks (some network mounts), a warning. A
  folder that does not exist yet is held when the start makes it (a start stopped by a
  bad input before then leaves no folder)."""
  path = os.path.realpath(workdir)
  if path in _HELD:  # Started again in this process (a notebook, a test): its own lock.
    return
  if not os.path.isdir(path):  # Held once the start makes it (`claim`, `record_start`).
    return
  fd = os.open(path, os.O_RDONLY)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    os.close(fd)
    last = (_record(workdir).get("starts") or [{}])[-1]
    holder = (f"the start of {last['started']} (pid {last.get('pid', '?')} on "
              f"{last.get('host', '?')})" if "started" in last else "another process")
    raise WorkdirError(f"{workdir} is in use by {holder}: wait for it to end, or give this "
                       "start its own --workdir") from None
  except OSError as e:
    os.close(fd)
    logging.warning("%s cannot be locked (%s): a second start while this one runs would not "
                    "be refused", workdir, e)
    return
  _HELD[path] = fd


def release(workdir: str) -> None:
  """Lets go of the workdir's lock before this process ends (a notebook or a test that
  started a run in its own process and is done with it)."""
  fd = _HELD.pop(os.path.realpath(workdir), None)
  if fd is not None:
    os.close(fd)  # Closing the descriptor lets go of its flock.


def record_start(workdir: str, job: str, config: ml_collections.ConfigDict, config_name: str,
                 changed: dict, claimed: bool = False) -> None:
  """Writes this start into WORKDIR/run.json (after `guard`; called on every process,
  written by process 0, whose refusal, a folder made meanwhile by another start, is
  raised on all): the job (for jobs that do not `claim`), the settings, and in this
  start's entry what changed. `claimed`: `claim` has just recorded the start (its
  identity, provenance, starts)."""
  distributed.on_main_process(_record_start, workdir, job, config, config_name, changed,
                              claimed)


def _record_start(workdir: str, job: str, config, config_name: str, changed: dict,
                  claimed: bool) -> None:
  os.makedirs(workdir, exist_ok=True)
  if not _concurrent_shards(config):
    _hold(workdir)
  record = _record(workdir)
  if not claimed:
    start = provenance()
    record.update(config=config_name, provenance=start,
                  starts=record.get("starts", []) + [start])
    if not isinstance(record.get("identity"), dict):
      record["identity"] = {}
    record["identity"].setdefault("job", job)
  if changed and record.get("starts"):
    record["starts"][-1]["changed"] = changed
    record["provenance"] = record["starts"][-1]
  record["settings"] = settings_of(config)
  files.write_json(os.path.join(workdir, RECORD), record)


# -- How a job ends: where its results are ---------------------------------------------------

def print_results(workdir: str, *names: str) -> None:
  """A job's last line: `results: ` and the files and folders of `names` it wrote into
  `workdir` (those that exist), so the user need not look for them."""
  found = [os.path.join(workdir, n) for n in names if os.path.exists(os.path.join(workdir, n))]
  print("results: " + ", ".join(found or [workdir]))


def print_finished(what: str) -> None:
  """Said by a rerun of a run that had finished: nothing ran, the figures are the run's."""
  print(f"finished: {what}; nothing left to run (its final figures follow)")
