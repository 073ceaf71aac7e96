"""Every `python -m pedrl…` command the README and docs/ show still parses: module, flags,
config file, variant and `--config.*` keys (tests/helpers/doc_commands.py)."""
import os
import shutil

import pytest

from tests.helpers import doc_commands, jobs

MAIN_JOB = ("pedrl.experiments.uco", ("--config=experiments/uco.py:tiny", "--workdir=/tmp/pedrl_uco"))


def test_commands_are_read_from_code_blocks_inline_code_and_included_files(tmp_path):
  (tmp_path / "docs").mkdir()
  (tmp_path / "NOTES.md").write_text("```bash\npython -m pedrl.tools.plot /runs/a\n```\n")
  (tmp_path / "README.md").write_text(
      "Inline `python -m pedrl.tools.report\n/runs/a --out=/r` spans lines; "
      "`python -m pedrl.experiments.NAME` is a placeholder.\n\n"
      "```bash\n"
      "pip install -e . && python -m pedrl.experiments.uco --config=experiments/uco.py:tiny \\\n"
      "  --workdir=/tmp/w   # a comment\n"
      "python -m pedrl.experiments.evaluate --config=x.py:paper ... "
      "[--config.tutor.step=3]\n"
      "```\n\n"
      "```python\n# python -m pedrl.not_a_command\n```\n\n"
      '--8<-- "NOTES.md"\n')
  found = [(c.where, c.module, c.args) for c in doc_commands.commands(str(tmp_path))]
  assert found == [
      ("README.md:5", "pedrl.experiments.uco",
       ("--config=experiments/uco.py:tiny", "--workdir=/tmp/w")),
      ("README.md:7", "pedrl.experiments.evaluate",
       ("--config=x.py:paper", "--config.tutor.step=3")),
      ("NOTES.md:2", "pedrl.tools.plot", ("/runs/a",)),
      ("README.md:1", "pedrl.tools.report", ("/runs/a", "--out=/r")),
  ]


def test_the_readme_shows_the_main_job():
  cmds = doc_commands.commands(jobs.ROOT)
  assert MAIN_JOB in [(c.module, c.args) for c in cmds]
  assert len({c.module for c in cmds}) >= 10  # Jobs, tools, benchmarks and the server.


@pytest.mark.job
def test_every_documented_command_parses():
  cmds = doc_commands.commands(jobs.ROOT)
  failures = doc_commands.check(cmds, jobs.ROOT)
  assert not failures, "\n".join(failures)


@pytest.mark.job
def test_a_doc_naming_a_missing_module_flag_or_config_key_fails(tmp_path):
  for name in ("README.md", "BUILD_NOTES.md", "docs", "experiments"):
    source = os.path.join(jobs.ROOT, name)
    (shutil.copytree if os.path.isdir(source) else shutil.copy)(source, tmp_path / name)
  readme = (tmp_path / "README.md").read_text()
  (tmp_path / "README.md").write_text(readme.replace(
      "--workdir=/tmp/pedrl_uco", "--workdir=/tmp/pedrl_uco --config.rl.stepz=3", 1))
  page = tmp_path / "docs" / "broken.md"
  page.write_text("```bash\npython -m pedrl.tools.reporter /tmp/eval\n"
                  "python -m pedrl.tools.report /tmp/eval --outt=/tmp/report\n```\n")
  good = {(c.module, c.args) for c in doc_commands.commands(jobs.ROOT)}
  changed = [c for c in doc_commands.commands(str(tmp_path)) if (c.module, c.args) not in good]
  assert len(changed) == 3
  failures = sorted(doc_commands.check(changed, str(tmp_path)))
  assert len(failures) == 3, failures
  assert failures[0].startswith("README.md:") and "no key 'stepz'" in failures[0]
  assert "docs/broken.md:2" in failures[1] and "No module named pedrl.tools.reporter" in failures[1]
  assert "docs/broken.md:3" in failures[2] and "Unknown command line flag 'outt'" in failures[2]
