"""notebooks/explore.ipynb runs top to bottom on the testdata models (nbclient, a python3
kernel), and its outputs show the real path ran: dialogues with tutor text, rewards, the
judges' verdicts, UCO's return recomputed from its parts, two GRPO steps and their plot."""
import json
import math
import os
import re
import sys

import pytest

from tests.helpers import jobs

nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")
pytest.importorskip("ipykernel")
pytest.importorskip("matplotlib")

ROOT = jobs.ROOT
NOTEBOOK = os.path.join(ROOT, "notebooks", "explore.ipynb")


def _files(*parts):
  out = set()
  for base, dirs, names in os.walk(os.path.join(ROOT, *parts)):
    dirs[:] = [d for d in dirs if d != "__pycache__"]  # Other tests' jobs write these.
    out |= {os.path.join(base, n) for n in names if not n.endswith(".pyc")}
  return out


def _text(cell) -> str:
  return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
  """(the executed notebook, its code cells' stdout by first source line, the GRPO workdir)."""
  workdir = str(tmp_path_factory.mktemp("notebook") / "grpo")
  watched = ("notebooks", "testdata", "experiments")
  before = {p: _files(p) for p in watched}
  with pytest.MonkeyPatch.context() as mp:
    # One CPU device (the suite's conftest asks for 8 in its own process; the kernel would
    # inherit them and the tiny batch would not split over them).
    mp.setenv("XLA_FLAGS", jobs.xla_flags())
    mp.setenv("JAX_PLATFORMS", "cpu")
    mp.setenv("PEDRL_NOTEBOOK_WORKDIR", workdir)
    # ipykernel's python3 kernelspec runs `python` from PATH: make it this interpreter.
    mp.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": os.path.join(ROOT,
                                                                                  "notebooks")}})
    client.execute()  # CellExecutionError (with the cell and its traceback) on any error.
  for p in watched:
    assert _files(p) == before[p], f"the notebook changed files under {p}/"
  for name in ("metrics.jsonl", "checkpoints", "run.json"):
    assert not os.path.exists(os.path.join(ROOT, name))
    assert not os.path.exists(os.path.join(ROOT, "notebooks", name))
  cells = {c.source.splitlines()[0]: c for c in nb.cells if c.cell_type == "code"}
  return nb, cells, workdir


def _cell(cells, first_line):
  matches = [c for line, c in cells.items() if line.startswith(first_line)]
  assert len(matches) == 1, f"no single code cell starts with {first_line!r}"
  return matches[0]


def test_notebook_is_short_cells_each_explained():
  nb = nbformat.read(NOTEBOOK, as_version=4)
  assert nb.metadata.kernelspec.name == "python3"
  assert nb.cells[0].cell_type == "markdown" and nb.cells[-1].cell_type == "markdown"
  for before, cell in zip(nb.cells, nb.cells[1:]):
    if cell.cell_type == "code":
      assert before.cell_type == "markdown", f"no explanation before:\n{cell.source}"
      assert len(cell.source.splitlines()) <= 30, f"a long cell:\n{cell.source}"
      # Stored with a clean run's outputs (GitHub and Colab show them unrun).
      assert cell.outputs and all(o.output_type != "error" for o in cell.outputs), (
          f"the notebook is stored without a clean run's outputs:\n{cell.source}")
  first = next(c for c in nb.cells if c.cell_type == "code").source
  assert "REPO_URL" in first and "google.colab" in first and "pip" in first


@pytest.mark.job
def test_installs_nothing_inside_the_clone(executed):
  _, cells, _ = executed
  assert _text(_cell(cells, "import os, subprocess, sys")).strip() == (
      f"pedrl from {os.path.join(ROOT, 'pedrl')}")


@pytest.mark.job
def test_dialogues_are_printed_with_tutor_text_thinking_and_rewards(executed):
  _, cells, _ = executed
  assert re.search(r"4 dialogues in [\d.]+ s", _text(_cell(cells, "import time")))
  stats = _text(_cell(cells, "rewards = reward_factory.build_rewards"))
  assert re.search(r"^uco: mean [-+]\d+\.\d+, std \d+\.\d+$", stats, re.M)
  assert re.search(r"^total: mean [-+]\d+\.\d+", stats, re.M)

  shown = _text(_cell(cells, "import textwrap")).splitlines()
  assert sum(line.startswith("=== dialogue") for line in shown) == 2
  assert re.search(r"TUTOR\s+\[UCO r_t [-+]\d", "\n".join(shown))
  # Each tutor turn prints its thinking line, then its visible text: some must be real text.
  visible = [shown[i + 1].strip() for i, line in enumerate(shown)
             if line.strip().startswith("(thinking)")]
  assert visible and any(v and v != "(empty)" for v in visible)
  assert re.search(r"rewards \{'uco': [-+]?\d", "\n".join(shown))

  forced = _text(_cell(cells, "import dataclasses")).splitlines()
  thoughts = [line.strip()[len("(thinking) "):] for line in forced
              if line.strip().startswith("(thinking)")]
  assert thoughts and all(t and t != "(none)" for t in thoughts)


@pytest.mark.job
def test_judges_and_uco_pieces(executed):
  _, cells, _ = executed
  judged = _text(_cell(cells, "from pedrl.rewards import judging"))
  assert len(re.findall(r"^dialogue \d+: \{'leakage': \[", judged, re.M)) == 4
  assert re.search(r"r_ped (0\.0|1\.0), pedagogy term", judged)
  reasons = re.findall(r"^  (leakage|helpfulness|thinking) sample \d: (.*)$", judged, re.M)
  assert len(reasons) == 5 and all(why.strip() not in ("", "None") for _, why in reasons)

  parts = _text(_cell(cells, "from pedrl.rewards import oracle, uco"))
  assert "turn at message 0: potential" in parts
  g0, record = map(float, re.search(r"G_0 = (\S+); the record's uco component: (\S+)",
                                    parts).groups())
  assert math.isfinite(g0) and g0 == record


@pytest.mark.job
def test_two_grpo_steps_and_their_plot(executed):
  _, cells, workdir = executed
  steps = _text(_cell(cells, "import tempfile"))
  assert re.search(r"^step 1: reward [-+]\d", steps, re.M)
  assert re.search(r"^step 2: reward [-+]\d", steps, re.M)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    rows = [json.loads(line) for line in f]
  assert [r["step"] for r in rows] == [1, 2]
  for r in rows:
    assert all(math.isfinite(r[k]) for k in ("reward/total", "kl", "grad_norm", "entropy"))
  assert os.listdir(os.path.join(workdir, "checkpoints"))

  plot = _cell(cells, "import json")
  assert "steps: [1, 2]" in _text(plot)
  assert any("image/png" in o.get("data", {}) for o in plot.outputs)
