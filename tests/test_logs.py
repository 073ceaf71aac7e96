"""The shared logging setup: a log line during a job's progress bar lands on its own line."""
import subprocess
import sys

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


def test_a_log_line_is_not_written_into_the_progress_bar():
  assert _warning_segment(quiet=True).startswith("W")
  assert "grpo:" in _warning_segment(quiet=False)  # absl alone: the bar and the line mixed.
