"""The shared logging setup: a log line during a job's progress bar lands on its own line;
short lines and no library chatter unless --verbosity=1."""
import logging
import re
import subprocess
import sys

import pytest

SCRIPT = r"""
import sys
from absl import flags, logging
from tqdm import tqdm
from pedrl import logs
flags.FLAGS(["prog"])
logging.use_absl_handler()  # As absl.app.run does.
if len(sys.argv) > 1:
  logs.quiet()
with tqdm(total=3, desc="grpo", file=sys.stderr, mininterval=0) as bar:
  bar.update(1)
  logging.warning("signal is low")
  bar.update(1)
"""


def _warning_segment(quiet: bool) -> str:
  out = subprocess.run([sys.executable, "-c", SCRIPT, *(["quiet"] if quiet else [])],
                       capture_output=True, text=True, timeout=120)
  assert out.returncode == 0, out.stderr
  line = next(line for line in out.stderr.split("\n") if "signal is low" in line)
  return line.split("\r")[-1]  # What the terminal shows of that line.


@pytest.mark.job
def test_a_log_line_is_not_written_into_the_progress_bar():
  assert re.fullmatch(r"\d\d:\d\d:\d\d warning: signal is low", _warning_segment(quiet=True))
  assert "grpo:" in _warning_segment(quiet=False)  # absl alone: the bar and the line mixed.


LINES = r"""
import logging as std_logging, sys
from absl import app, logging
from pedrl import logs

def main(_):
  logging.info("loaded %d rows", 25)
  logging.warning("signal is low")
  std_logging.getLogger("matplotlib.font_manager").info("generated new fontManager")
logs.quiet()
app.run(main)
"""


def _lines(*flags) -> list[str]:
  out = subprocess.run([sys.executable, "-c", LINES, *flags], capture_output=True, text=True,
                       timeout=120)
  assert out.returncode == 0, out.stderr
  return out.stderr.splitlines()


@pytest.mark.job
def test_log_lines_are_short_unless_verbose_and_library_chatter_is_hidden():
  lines = _lines()
  assert len(lines) == 2, lines  # matplotlib's line is hidden.
  assert re.fullmatch(r"\d\d:\d\d:\d\d loaded 25 rows", lines[0]), lines
  assert re.fullmatch(r"\d\d:\d\d:\d\d warning: signal is low", lines[1]), lines
  verbose = _lines("--verbosity=1")  # absl's own lines, every one.
  assert len(verbose) == 3, verbose
  assert re.match(r"I\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ <string>:\d+\] loaded 25 rows", verbose[0])
  assert re.match(r"W\d{4} .*\] signal is low", verbose[1])
  assert "generated new fontManager" in verbose[2]


def test_unused_checkpoint_tensors_are_a_debug_line(testdata, caplog):
  """BERT's pooler, which pedrl does not use: shown with --verbosity=1, not by default."""
  from pedrl import models
  with caplog.at_level(logging.DEBUG, logger="absl"):
    models.load(testdata("bert"), task="embed")
  unused = [r for r in caplog.records if "tensors not used by pedrl" in r.getMessage()]
  assert [r.levelno for r in unused] == [logging.DEBUG], unused
