"""Stage boundaries pass types, not string-keyed dicts; the interfaces are written down.

Grep-level checks over pedrl/'s source: results read back by key path or by
a name built at run time are what the typed results replaced, and a field typed
`object` says nothing. The Protocols each stage is written against must exist
and appear in the signatures that take or return them.
"""
import pathlib
import re
import typing

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2] / "pedrl"

# (what, pattern): each must match nowhere in pedrl/.
FORBIDDEN = [
    ("a reward pipeline's side attribute", r"\bbatch_stats\b"),
    ("judge answers by a name built at run time", r"getattr\([^)]*_decisions"),
    ("a protocol read by key path", r"\bprotocol\["),
    ("a protocol's kind read with a default", r"""\.get\(\s*["']kind["']\s*,"""),
    ("a field or result typed object", r"(?::|->)\s*object\b(?!\()"),
    ("models cached under string keys", r"""\bmodels\[\s*["'](?:client|party|rm)["']"""),
    # A sharded job's counts are an eval.counts.Counts; the flat GROUP/KEY form is its
    # to_json's and from_json's only.
    ("a job's counts under keys built as strings",
     r"""\bcounts(?:\[f?["']|\.update\(\{f["']|\.get\(f?["'])|\btick\(counts,"""),
]


def _code_lines():
  for path in sorted(ROOT.rglob("*.py")):
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
      code = line.split("#", 1)[0]
      if code.strip():
        yield f"{path.relative_to(ROOT.parent)}:{n}", code


@pytest.mark.parametrize("what,pattern", FORBIDDEN, ids=[w for w, _ in FORBIDDEN])
def test_no_stage_boundary_passes_an_untyped_result(what, pattern):
  found = [where for where, code in _code_lines() if re.search(pattern, code)]
  assert not found, f"{what}: {found}"


def test_the_patterns_catch_what_they_forbid():
  """Each pattern matches the line it was written against (a check that cannot fail
  would pass whatever the code says)."""
  old = ['  stats = self.rewards.batch_stats',
         '  samples = [d for r in records for d in getattr(r, f"{judge}_decisions")]',
         '    e = protocol["eval"]',
         '  kind = protocol.get("kind", "tutoring")',
         '  target: object  # The task\'s formatted ground truth.',
         '    self.client = self.models["client"]']
  for (what, pattern), line in zip(FORBIDDEN, old):
    assert re.search(pattern, line), what
  assert not re.search(FORBIDDEN[4][1], "  sentinel = object()")


def _hints(fn) -> str:
  return " ".join(map(str, typing.get_type_hints(fn).values()))


def test_the_protocols_exist_and_appear_in_signatures():
  from pedrl.env import party, rollout
  from pedrl.eval import evaluations, records, shards
  from pedrl.jobs import offline, sharded
  from pedrl.rewards import asking, oracle, pipeline
  from pedrl.rl import objective, update
  protocols = {
      # An evaluation as its shards merge: its records, metrics and files.
      evaluations.EvalTask: [shards.evaluation],
      evaluations.Metrics: [evaluations.EvalTask.metrics, evaluations.Merged],
      # What a sharded job computes, batch by batch.
      sharded.ShardedTask: [sharded.run],
      records.Record: [records.save, sharded.ShardedTask.run],
      # A dialogue side: a local model's running state or a Replier's (endpoint, agent).
      rollout.DialogueSide: [rollout._sides],
      party.Replier: [rollout.run],
      party.ChatClient: [party.EndpointParty],
      # A text backend: the OpenAI-compatible, local and rule judges and classifiers.
      asking.TextBackend: [pipeline.RewardPipeline, oracle.LLMOracle],
      # A training objective (GRPO, SFT, MDPO) and what it measures.
      objective.Objective: [update.train_step, update.gradients],
      objective.LossStats: [objective.Objective.metrics],
      # What an offline job (SFT, MDPO) adds to the shared offline trainer.
      offline.Method: [offline.build, offline.resolve_paths],
  }
  for protocol, users in protocols.items():
    assert getattr(protocol, "_is_protocol", False), f"{protocol.__name__} is no typing.Protocol"
    for fn in users:
      assert protocol.__name__ in _hints(fn), f"{fn.__qualname__} does not name {protocol.__name__}"


def test_the_evaluations_answer_for_every_kind_a_merge_meets():
  """shards.merge asks the protocol's evaluation, never a kind string's branch."""
  from pedrl.eval import evaluations, protocol
  assert set(evaluations.TASKS) == {"tutoring", "reasoning", "mathtutorbench"}
  for kind, task in evaluations.TASKS.items():
    assert task.kind == kind and callable(task.metrics) and callable(task.write)
  assert protocol.kind_of({}) == "tutoring"  # Protocols before kinds were tutoring ones.


# One endpoint type; validation in __post_init__.


def _classes():
  """(where, ast.ClassDef, its module's path) of every class in pedrl/."""
  import ast
  for path in sorted(ROOT.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
      if isinstance(node, ast.ClassDef):
        yield f"{path.relative_to(ROOT.parent)}:{node.name}", node, path


def _field_names(node) -> list[str]:
  import ast
  return [a.target.id for a in node.body
          if isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name)]


def _endpoint_types() -> list[str]:
  """Classes declaring an endpoint's address and key variable (`base_url`, `api_key_env`,
  also under a prefix such as oracle_base_url)."""
  return [where for where, node, _ in _classes()
          if any(f.endswith("base_url") for f in _field_names(node))
          and any(f.endswith("api_key_env") for f in _field_names(node))]


def test_one_type_names_an_openai_compatible_endpoint():
  """Judges, UCO's oracle, an evaluation's endpoint sides, MathTutorBench's model under
  test and the analysis labellers all read pedrl.clients.settings.EndpointSettings."""
  assert _endpoint_types() == ["pedrl/clients/settings.py:EndpointSettings"]


def test_the_client_holds_its_settings_and_no_check_reads_them_as_a_dict():
  """OpenAIBackend is composed of its settings (it inherits none, and no frozen dataclass
  is mutated after the fact); config checks read typed settings, never a
  dataclasses.asdict of them."""
  import ast
  bases = {where: [ast.unparse(b) for b in node.bases] for where, node, _ in _classes()}
  assert bases["pedrl/clients/openai_compat.py:OpenAIBackend"] == []
  mutated = [where for where, code in _code_lines()
             if where.startswith("pedrl/clients/") and "object.__setattr__" in code]
  assert not mutated, mutated
  checks = [p for p in ROOT.rglob("*.py") if p.name in ("checks.py", "settings.py")]
  as_dicts = [f"{p.relative_to(ROOT.parent)}" for p in checks
              if re.search(r"\basdict\(", p.read_text(encoding="utf-8"))]
  assert not as_dicts, as_dicts


_NUMBER = re.compile(r"^(int|float)(\s*\|\s*None)?$")


def _settings_without_checks() -> list[str]:
  """Dataclasses named *Settings with a number field (int, float, or either | None) whose
  class and pedrl bases define no __post_init__: numbers nothing checks."""
  import ast
  classes = {node.name: node for _, node, _ in _classes()}

  def checked(node) -> bool:
    if any(isinstance(b, ast.FunctionDef) and b.name == "__post_init__" for b in node.body):
      return True
    bases = [ast.unparse(b).rpartition(".")[2] for b in node.bases]
    return any(b in classes and checked(classes[b]) for b in bases)

  out = []
  for where, node, _ in _classes():
    numbers = [a for a in node.body if isinstance(a, ast.AnnAssign)
               and _NUMBER.match(ast.unparse(a.annotation))]
    dataclass = any("dataclass" in ast.unparse(d) for d in node.decorator_list)
    if node.name.endswith("Settings") and dataclass and numbers and not checked(node):
      out.append(where)
  return out


def test_every_settings_type_with_numbers_checks_them_when_built():
  """A value out of range is refused where the settings are built (one line naming the
  --config flag, pedrl.fields.FieldError), not by a job's own check after the fact."""
  assert _settings_without_checks() == []


@pytest.mark.parametrize("section,key,value,message", [
    ("rl", "lr", float("nan"), "--config.rl.lr=nan: must be a finite number > 0"),
    ("rl", "lr_schedule", "step",
     "--config.rl.lr_schedule='step': must be one of ('constant', 'cosine', 'linear')"),
    ("rl", "eps_low", 1.5, "--config.rl.eps_low=1.5: must be in (0, 1)"),
    ("rl", "keep", 0, "--config.rl.keep=0: must be an integer >= 1"),
    ("rewards.openai", "max_tries", 0,
     "--config.rewards.openai.max_tries=0: must be an integer >= 1")])
def test_a_settings_value_out_of_range_is_one_line_naming_its_flag(section, key, value, message):
  """Refused as the config is read, before a job checks anything else."""
  from pedrl import paths
  from pedrl.jobs import settings
  c = paths.load_config("uco.py", "tiny")
  node = c
  for part in section.split("."):
    node = node[part]
  node[key] = value
  with pytest.raises(ValueError) as e:
    settings.read_settings(c, settings.TrainingSettings)
  assert str(e.value) == message


def test_an_old_config_key_is_refused_naming_its_new_one(capsys):
  """In a config file (the reader) and on the command line (pedrl.cli), one line."""
  from absl import flags
  from ml_collections import config_flags
  from pedrl import cli, paths
  from pedrl.jobs import settings
  c = paths.load_config("uco.py", "tiny")
  c.rewards.uco.oracle_model = "gemini-2.5-pro"
  with pytest.raises(settings.UnreadKeys, match=r"^--config\.rewards\.uco\.oracle_model was "
                                                r"renamed: use --config\.rewards\.uco\."
                                                r"oracle_endpoint\.model$"):
    settings.read_settings(c, settings.TrainingSettings)
  fv = flags.FlagValues()
  config_flags.DEFINE_config_file("config", None, "", flag_values=fv)
  with pytest.raises(SystemExit):
    cli._parse_config(fv, ["uco", f"--config={ROOT.parent / 'experiments' / 'uco.py'}:tiny",
                           "--config.rewards.uco.oracle_base_url=http://x"])
  lines = capsys.readouterr().err.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith(
      "error: --config.rewards.uco.oracle_base_url was renamed: use "
      "--config.rewards.uco.oracle_endpoint.base_url"), lines


def test_the_oracles_endpoint_is_the_judges_where_it_names_none_of_its_own():
  from pedrl import paths
  from pedrl.jobs import settings
  c = paths.load_config("uco.py", "tiny")
  c.rewards.openai.update(base_url="http://judges/v1", api_key_env="JUDGE_KEY")
  c.rewards.uco.oracle_endpoint.update(model="gemini-2.5-pro", api_key_env="ORACLE_KEY")
  s = settings.read_settings(c, settings.TrainingSettings)
  o = s.oracle_endpoint
  assert (o.model, o.base_url, o.api_key_env, o.timeout) == (
      "gemini-2.5-pro", "http://judges/v1", "ORACLE_KEY", s.openai.timeout)
  assert settings.read_settings(paths.load_config("uco.py", "tiny"),
                                settings.TrainingSettings).oracle_endpoint.model is None


def test_a_run_recorded_under_the_old_keys_resumes(tmp_path):
  """A workdir whose run.json names the renamed keys (a run started before the rename)
  resumes with the same settings under the new ones: no mismatch."""
  import json
  from pedrl import paths
  from pedrl.jobs import workdir
  c = paths.load_config("uco.py", "tiny")
  w = str(tmp_path / "w")
  workdir.record_start(w, "train", c, "experiments/uco.py:tiny", {})
  path = tmp_path / "w" / "run.json"
  record = json.loads(path.read_text())
  s = record["settings"]
  s = {k: v for k, v in s.items() if not k.startswith("rewards.uco.oracle_endpoint.")}
  s.update({"rewards.uco.oracle_model": None, "rewards.uco.oracle_base_url": None,
            "rewards.uco.oracle_api_key_env": None, "rewards.openai.role": "judge"})
  path.write_text(json.dumps({**record, "settings": s}))
  assert workdir.guard(w, "train", c, "experiments/uco.py:tiny") == {}
  c.rewards.uco.oracle_endpoint.model = "gemini-2.5-pro"
  with pytest.raises(workdir.WorkdirError, match=r"rewards\.uco\.oracle_endpoint\.model: "
                                                 r"null -> 'gemini-2\.5-pro'\)"):
    workdir.guard(w, "train", c, "experiments/uco.py:tiny")


def test_an_evaluation_recorded_before_its_endpoints_had_retry_keys_resumes(tmp_path):
  """The endpoint sides' new keys (pedrl.fields.ADDED) hold the values such a run had."""
  import json
  from pedrl import fields, paths
  from pedrl.jobs import workdir
  c = paths.load_config("evaluate.py", "tiny")
  w = str(tmp_path / "w")
  workdir.record_start(w, "evaluate", c, "experiments/evaluate.py:tiny", {})
  path = tmp_path / "w" / "run.json"
  record = json.loads(path.read_text())
  record["settings"] = {k: v for k, v in record["settings"].items() if k not in fields.ADDED}
  path.write_text(json.dumps(record))
  assert workdir.guard(w, "evaluate", c, "experiments/evaluate.py:tiny") == {}


RUNS_24B266D = {"evaluate": "evaluate", "uco": "train", "pedagogical_rl": "train", "cpa": "cpa",
                "mathtutorbench": "mathtutorbench", "baselines": "baseline_data",
                "rollout": "rollout", "analyze": "analyze", "sft": "sft", "mdpo": "mdpo"}


@pytest.mark.parametrize("name", sorted(RUNS_24B266D))
def test_a_run_recorded_by_an_earlier_pedrl_resumes_with_todays_config(tmp_path, name):
  """testdata/records/runs_24b266d: each tiny job's run.json as pedrl at commit 24b266d
  recorded it (its checkout's path replaced by {ROOT}). Today's config resumes it: every
  key added since is in pedrl.fields.ADDED with the value that run had."""
  import json
  from pedrl import paths
  from pedrl.jobs import workdir
  from tests.helpers import jobs
  root = pathlib.Path(jobs.ROOT)
  text = (root / "testdata" / "records" / "runs_24b266d" / f"{name}.json").read_text()
  text = text.replace("{ROOT}", str(root))
  w = tmp_path / "w"
  w.mkdir()
  (w / "run.json").write_text(text)
  config = json.loads(text)["config"]
  c = paths.load_config(*config.removeprefix("experiments/").split(":"))
  assert workdir.guard(str(w), RUNS_24B266D[name], c, config) == {}


def test_a_baselines_data_run_recorded_before_this_release_resumes(tmp_path):
  """testdata/records/protocols_a2baaa1/baselines.json: the tiny baselines data job's
  protocol as pedrl at commit a2baaa1 built it (its checkout's path replaced by {ROOT}).
  Shards compare protocols exactly, so a setting added since must leave it unchanged at
  its old behaviour (rewards.template_tags=paper), or the workdir is refused."""
  import json
  from pedrl import paths
  from pedrl.eval import shards
  from pedrl.eval.protocol import EvalProtocol
  from pedrl.experiments import baseline_data
  from tests.helpers import jobs
  root = pathlib.Path(jobs.ROOT)
  text = (root / "testdata" / "records" / "protocols_a2baaa1" / "baselines.json").read_text()
  recorded = EvalProtocol.from_dict(json.loads(text.replace("{ROOT}", str(root))))
  c = paths.load_config("baselines.py", "tiny")
  today = baseline_data.protocol(*baseline_data.read(c))
  assert today == recorded, today.differences(recorded)
  c.rewards.template_tags = "reference"  # Another reading of the tags: another protocol.
  assert baseline_data.protocol(*baseline_data.read(c)) != recorded
  (tmp_path / "shards").mkdir()
  (tmp_path / "shards" / "status-00000-of-00001.json").write_text(
      json.dumps({"protocol": recorded.to_dict()}))
  shards.check_protocol(str(tmp_path), today)


# Judge labels as typed answers.

# A judge's reply is read once, in the module that parses it, into a Decision or Score;
# elsewhere neither a judge's name nor a reply's JSON key is read as a string key.
JUDGE_PARSER = "pedrl/rewards/judging.py"
JUDGE_KEY_READS = (r"""\[\s*["'](?:leakage|helpfulness|thinking)["']\s*\]"""
                   r"""|\.get\(\s*["'](?:leakage|helpfulness|thinking|decision|reasoning)["']""")


def test_judge_labels_are_read_by_key_only_where_a_reply_is_parsed():
  found = [where for where, code in _code_lines()
           if re.search(JUDGE_KEY_READS, code) and not where.startswith(JUDGE_PARSER + ":")]
  assert not found, f"judge labels read by a string key outside {JUDGE_PARSER}: {found}"
  for old in ('      leak_decisions=a["leakage"], helpful_decisions=a["helpfulness"],',
              '      thinking_scores=a.get("thinking", []), pedrm_turn_scores=t, dialogue=d)'):
    assert re.search(JUDGE_KEY_READS, old)


def test_a_judge_reply_parses_into_a_frozen_answer():
  import dataclasses
  from pedrl.rewards import judging
  for answer in (judging.Decision, judging.Score):
    assert dataclasses.is_dataclass(answer) and answer.__dataclass_params__.frozen
  assert "Decision" in _hints(judging.parse) and "Score" in _hints(judging.parse)


# A run's recorded settings read typed.

def test_a_runs_recorded_dialogue_settings_are_read_by_the_settings_types():
  """conditions.differences reads config.json through the settings types, not by key path."""
  from pedrl.jobs import conditions
  source = (ROOT / "jobs" / "conditions.py").read_text(encoding="utf-8")
  key_path = r"""\.get\(|\[\s*["']|\.split\(\s*["']\.["']\s*\)"""
  found = [line for line in source.splitlines() if re.search(key_path, line.split("#", 1)[0])]
  assert not found, f"pedrl/jobs/conditions.py reads settings by key path: {found}"
  assert re.search(key_path, '  theirs = {"rollout": trained_config.get("rollout", {}),')
  assert "Recorded" in _hints(conditions.recorded)
  assert "RolloutSettings" in _hints(conditions.Dialogues)


# The Dialogue: one mutable record, each field written by its own stage.

# Module -> the Dialogue fields it may write after the rollout built the record (the
# table in pedrl/env/dialogue.py's docstring).
DIALOGUE_WRITERS = {
    "pedrl/env/rollout.py": {"student_system", "messages", "end_reason", "tutor_ids",
                             "tutor_mask", "tutor_logprobs", "student_tokens"},
    "pedrl/rl/trainer.py": {"step"},
    "pedrl/env/solving.py": {"post_answers", "post_correct", "r_sol"},
    "pedrl/experiments/rollout.py": {"pre_solve_rate"},
    "pedrl/rewards/pipeline.py": {"judgement", "dropped", "turn_rewards"},
    "pedrl/rewards/assemble.py": {"rewards"},
}
# Attributes that share a Dialogue field's name but belong to other objects.
NOT_DIALOGUE = {("pedrl/agents/cpa/agent.py", "answer"), ("pedrl/jobs/base_config.py", "rollout"),
                ("pedrl/jobs/base_config.py", "rewards")}


def _field_writes(tree, fields):
  """(line, field) of every `X.field = …`, `X.field += …`, `X[i].field = …` and
  `X.field.append(…)`-style write in the tree, X not `self` (a class's own attribute)."""
  import ast
  out = []
  for node in ast.walk(tree):
    targets = (node.targets if isinstance(node, ast.Assign) else
               [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("append", "extend", "insert", "pop", "clear", "remove")):
      targets = [node.func.value]
    for t in [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]:
      t = t.value if isinstance(t, ast.Subscript) and isinstance(node, ast.Assign) else t
      if (isinstance(t, ast.Attribute) and t.attr in fields
          and not (isinstance(t.value, ast.Name) and t.value.id == "self")):
        out.append((node.lineno, t.attr))
  return out


def test_each_dialogue_field_is_written_only_by_its_stage():
  import ast
  import dataclasses

  from pedrl.env import dialogue
  fields = {f.name for f in dataclasses.fields(dialogue.Dialogue)}
  owners = [f for fs in DIALOGUE_WRITERS.values() for f in fs]
  assert len(owners) == len(set(owners)) and set(owners) <= fields  # One owner per field.
  for module in DIALOGUE_WRITERS:
    assert module in dialogue.__doc__, f"{module} is not in the Dialogue's table"
  found = []
  for path in sorted(ROOT.rglob("*.py")):
    module = str(path.relative_to(ROOT.parent))
    for line, field in _field_writes(ast.parse(path.read_text(encoding="utf-8")), fields):
      if field not in DIALOGUE_WRITERS.get(module, ()) and (module, field) not in NOT_DIALOGUE:
        found.append(f"{module}:{line} writes Dialogue.{field}")
  assert not found, found
  # The check sees each kind of write it is meant to catch.
  old = "d.r_sol = 1.0\nd.judgement, d.dropped = v, drop\nds[0].end_reason = 'x'\n" \
        "d.messages.append(m)\nd.tutor_ids += [1]\n"
  assert sorted(f for _, f in _field_writes(ast.parse(old), fields)) == [
      "dropped", "end_reason", "judgement", "messages", "r_sol", "tutor_ids"]
  assert not _field_writes(ast.parse("self.step = 1\nc.x.step = 2"), {"r_sol"})


# Annotations on every public function.

def unannotated(source: str) -> list[str]:
  """"name(param)" / "name ->" for each public function or method (module level or in a
  public class) lacking a parameter's or its return annotation; self and cls need none."""
  import ast
  out = []

  def visit(body, in_class):
    for node in body:
      if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
        visit(node.body, True)
      elif (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (not node.name.startswith("_") or node.name == "__call__")):
        a = node.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
        if in_class and params and params[0].arg in ("self", "cls"):
          params = params[1:]
        out.extend(f"{node.name}({p.arg})" for p in params if p.annotation is None)
        out.extend([f"{node.name} ->"] if node.returns is None else [])
  visit(ast.parse(source).body, False)
  return out


def test_every_public_function_is_annotated():
  found = {}
  for path in sorted(ROOT.rglob("*.py")):
    if missing := unannotated(path.read_text(encoding="utf-8")):
      found[str(path.relative_to(ROOT.parent))] = missing
  assert not found, f"public functions without annotations: {found}"
  assert unannotated("def f(x, y: int):\n  pass\nclass C:\n  def m(self, z) -> None: ...\n"
                     "  def _p(self, q): ...\ndef _private(a): ...\n") == ["f(x)", "f ->", "m(z)"]


# Names with one meaning.

# Module and package names that once meant two things (pedrl.eval.metrics beside the
# metrics.jsonl writer and the server's Prometheus registry, ...), and their new names:
# each names at most one module or package of pedrl/.
ONE_MEANING = ("metrics", "protocol", "mathtutorbench", "metric_log", "prometheus",
               "openai_types", "mathtutorbench_rules", "mathtutorbench_harness")


def _composed_attribute_names(root: pathlib.Path) -> list[str]:
  """`setattr`/`getattr`/`hasattr`/`delattr` calls whose attribute name is built at run
  time (an f-string, `+`, `%` or `.format`): a name grep cannot find."""
  import ast
  found = []
  for path in sorted(root.rglob("*.py")):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
      if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id in ("setattr", "getattr", "hasattr", "delattr")
          and len(node.args) > 1):
        name = node.args[1]
        if (isinstance(name, ast.JoinedStr) or isinstance(name, ast.BinOp) or
            (isinstance(name, ast.Call) and isinstance(name.func, ast.Attribute)
             and name.func.attr == "format")):
          found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
  return found


def _shared_names(root: pathlib.Path) -> dict[str, list[str]]:
  """{name of ONE_MEANING: the modules and packages of `root` so named}, where more than one."""
  named = {}
  for path in sorted(root.rglob("*")):
    if path.suffix == ".py" and path.name != "__init__.py":
      name = path.stem
    elif path.is_dir() and (path / "__init__.py").exists():
      name = path.name
    else:
      continue
    named.setdefault(name, []).append(str(path.relative_to(root.parent)))
  return {n: paths for n, paths in named.items() if n in ONE_MEANING and len(paths) > 1}


def test_no_attribute_name_is_built_at_run_time():
  found = _composed_attribute_names(ROOT)
  assert not found, "name the attribute (a field, or a dict keyed by name): " + ", ".join(found)


def test_a_renamed_module_name_means_one_thing():
  assert _shared_names(ROOT) == {}


def test_the_name_checks_see_what_they_forbid(tmp_path):
  """Each check catches what it was written against (a check that cannot fail passes
  whatever the code says)."""
  root = tmp_path / "pedrl"
  for folder in ("eval", "serve", "jobs", "mathtutorbench", "eval/mathtutorbench"):
    (root / folder).mkdir(parents=True, exist_ok=True)
    (root / folder / "__init__.py").write_text("")
  (root / "eval" / "metrics.py").write_text("")
  (root / "serve" / "metrics.py").write_text(
      'def f(stats, name, t):\n  setattr(stats, f"{name}_seconds", t)\n'
      '  return getattr(stats, name + "_seconds"), getattr(stats, "{}_s".format(name))\n')
  (root / "jobs" / "settings.py").write_text('def g(s):\n  return getattr(s, "path")\n')
  assert _composed_attribute_names(root) == [
      "pedrl/serve/metrics.py:2", "pedrl/serve/metrics.py:3", "pedrl/serve/metrics.py:3"]
  assert _shared_names(root) == {
      "mathtutorbench": ["pedrl/eval/mathtutorbench", "pedrl/mathtutorbench"],
      "metrics": ["pedrl/eval/metrics.py", "pedrl/serve/metrics.py"]}
