"""The reproduction page (docs/reproduction.md) cannot rot: every command on it, with its
own flags and the page's shell setup, loads its config (every key read, every setting
valid), every row gives the paper's numbers and an estimated cost, and every
differences-table row it cites exists."""
import os
import re
import shlex

from absl import flags
from ml_collections import config_flags
import pytest

from tests.helpers.jobs import ROOT
from pedrl.jobs import settings

PAGE = os.path.join(ROOT, "docs", "reproduction.md")
DIFFERENCES = os.path.join(ROOT, "docs", "paper-differences.md")
HEADER = ["table / figure", "paper's numbers", "command", "estimated cost", "status"]
JOB = re.compile(r"python -m pedrl\.experiments\.\w+ [^&`]+")


def _text():
  with open(PAGE, encoding="utf-8") as f:
    return f.read()


def _rows():
  """(paper section, row cells) of the page's tables."""
  section, out = None, []
  for line in _text().splitlines():
    if line.startswith("## "):
      section = line[3:].strip()
    elif line.startswith("| ") and not line.startswith(("| table", "|---")):
      out.append((section, [c.strip() for c in line.strip().strip("|").split(" | ")]))
  return out


def _setup() -> dict:
  """The page's shell setup block: its exported names and its flag groups (NAME="...")."""
  block = re.search(r"```bash\n(.*?)```", _text(), re.S).group(1)
  names, groups = set(), {}
  for line in block.splitlines():
    line = line.split("  #")[0].strip()
    if line.startswith("export "):
      names.update(k.split("=")[0] for k in shlex.split(line[len("export "):]))
    elif m := re.fullmatch(r'(\w+)="(.*)"', line):
      groups[m.group(1)] = m.group(2)
  return {"names": names, "groups": groups}


def _commands():
  """Every job command of the rows' command cells, as written."""
  return sorted({m.strip() for _, cells in _rows() for span in re.findall(r"`([^`]+)`", cells[2])
                 for m in JOB.findall(span)})


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
  """Stand-ins for the setup's names: testdata models, and files where a setting checks
  that its file exists (the reference's prompt files, the reasoning data)."""
  tmp = tmp_path_factory.mktemp("repro")
  ref = tmp / "ref" / "prompt_templates"
  (ref / "socracticlm").mkdir(parents=True)
  (ref / "judges").mkdir()
  for name in ("student_attempt_prompt.txt", "student_initial_attempt_prompt.txt",
               "socracticlm/socracticlm_teacher_prompt.txt", "judges/does_not_leak_answer.txt",
               "judges/follows_pedagogical_values.txt"):
    (ref / name).write_text("{{ problem }}")
  data = os.path.join(ROOT, "testdata")
  (tmp / "data").mkdir()
  for name, source in (("gsm8k_test.jsonl", "reasoning/gsm8k_sample.jsonl"),
                       ("math500.jsonl", "reasoning/math500_sample.jsonl"),
                       ("mmlu", "reasoning/mmlu"), ("wbeb.jsonl", "reasoning/wbeb_sample.jsonl"),
                       ("train.jsonl", "problems/bigmath_sample.jsonl"),
                       ("test.jsonl", "problems/bigmath_sample.jsonl")):
    os.symlink(os.path.join(data, source), tmp / "data" / name)
  model = lambda name: os.path.join(data, "models", name)
  return {"TUTOR": model("qwen2"), "STUDENT": model("llama3"), "JUDGE": model("qwen2"),
          "THINK_TUTOR": model("qwen2_think"), "PEDRM": model("qwen2_seqcls"),
          "PEDRM_PROMPT": os.path.join(data, "pedrm_system_prompt.txt"),
          "EVAL_JUDGE": "http://127.0.0.1:1/v1", "REF": str(tmp / "ref"),
          "BGE": model("bert"), "ORACLE": "oracle", "ORACLE_URL": "http://127.0.0.1:1/v1",
          "MTB": os.path.join(data, "mathtutorbench", "mathtutorbench"),
          "MTB_DATA": os.path.join(data, "mathtutorbench"), "FRONTIER_URL": "http://127.0.0.1:1/v1",
          "DATA": str(tmp / "data"), "RUNS": str(tmp / "runs")}


def _expand(command: str, paths: dict) -> list[str]:
  """The command's argv after the shell would expand the setup's names and groups."""
  env = dict(paths)
  for name, value in _setup()["groups"].items():
    env[name] = os.path.expandvars(re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), m.group(0)),
                                          value))
  text = re.sub(r"\$(\w+)", lambda m: env[m.group(1)], command)
  return shlex.split(text)


def _override(c, key: str, text: str):
  """--config.KEY=TEXT as ml_collections' config flags apply it: a key the config does not
  have is an error; the text is parsed as the field's type."""
  *parents, name = key.split(".")
  for part in parents:
    c = c[part]
  if name not in c:
    raise KeyError(f"--config.{key}: the config has no such key")
  kind = c.get_ref(name).get_type()
  if kind is bool:
    value = {"true": True, "false": False}[text.lower()]
  elif kind in (int, float):
    value = kind(text)
  elif kind is tuple:
    value = tuple(text.split(","))
  else:
    value = text
  c[name] = value


def _read(argv: list[str]):
  """The job's settings from the command's --config flags, as the job reads them."""
  config = [a for a in argv if a.startswith("--config")]
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=fv)
  spec = config[0].split("=", 1)[1]
  fv(["test", f"--config={os.path.join(ROOT, spec)}"])
  c, job = fv.config, os.path.basename(spec.split(":")[0])[:-len(".py")]
  for flag in config[1:]:
    _override(c, *flag[len("--config."):].split("=", 1))
  if job == "analyze":
    from pedrl.experiments import analyze
    return analyze.read(c)
  if job == "baselines":  # The baseline data job's config.
    from pedrl.experiments import baseline_data
    return baseline_data.read(c)
  if job in ("sft", "mdpo"):  # The offline jobs' configs.
    from pedrl.rl import dpo, offline_data, sft
    return settings.read_offline_settings(c, *{"sft": (sft.SFTObjective,
                                                       offline_data.SequenceSettings),
                                               "mdpo": (dpo.DPOObjective,)}[job])
  if job in ("mathtutorbench", "cpa"):  # Their jobs read their own sections.
    from pedrl.experiments import cpa, mathtutorbench
    return {"mathtutorbench": mathtutorbench, "cpa": cpa}[job].read(c)
  return settings.read_settings(c, {"evaluate": settings.EvaluationSettings,
                                   "rollout": settings.DialogueSettings}.get(
                                       job, settings.TrainingSettings))


def test_every_row_has_the_papers_numbers_a_command_and_a_cost():
  assert [c.strip() for c in re.search(r"\n\| (table / figure.*)\|\n", _text()).group(
      1).split(" | ")] == HEADER
  sections = {s for s, _ in _rows()}
  assert {"Paper 003: PedagogicalRL", "Paper 001: PedagogicalRL-Thinking", "Paper 000: UCO",
          "Paper 002: CPA"} <= sections
  for _, cells in _rows():
    assert len(cells) == 5 and cells[4].startswith(("faithful", "deviates", "cannot")), cells
    if cells[4].startswith("cannot"):
      continue
    assert cells[1], cells  # The paper's numbers (or what the paper shows).
    if "python -m pedrl.experiments" in cells[2]:  # A run: its cost, marked as an estimate.
      assert "estimate" in cells[3] or cells[3].startswith(("as ", "with ")), cells
  # Every name a command uses is set once in the setup block.
  setup = _setup()
  used = {n for c in _commands() for n in re.findall(r"\$(\w+)", c)}
  assert used <= setup["names"] | set(setup["groups"]), used - setup["names"] - set(setup["groups"])
  assert {"TUTOR", "STUDENT", "DATA"} <= setup["names"]
  assert len(_commands()) > 40


@pytest.mark.parametrize("command", _commands())
def test_every_command_loads_its_config_with_its_flags(command, paths):
  _read(_expand(command, paths))  # UnreadKeys, an unknown variant or a refused value fail here.


def test_every_cited_difference_is_a_row_of_the_differences_table():
  rows = {line.split(" | ")[0].lstrip("| ").strip() for line in open(DIFFERENCES,
                                                                     encoding="utf-8")
          if line.startswith("| ")}
  cited = {name for _, cells in _rows() if cells[4].startswith("deviates")
           for name in re.findall(r'"([^"]+)"', cells[4])}
  assert cited and not cited - rows, sorted(cited - rows)
