r"""SFT of the tutor on the baseline data's accepted dialogues (paper 003's SFT baseline, A.3).

  python -m pedrl.experiments.sft --config=experiments/sft.py:tiny --workdir=/tmp/sft \
      --config.data.workdir=/tmp/baselines

The next-token loss of the tutor's tokens of every accepted dialogue
(pedrl.rl.sft; WORKDIR/accepted.jsonl of the data workdir), in batches of
train.batch dialogues padded to a length bucket; the loop, checkpoints and
outputs are the offline jobs' (pedrl.jobs.offline). A row of
metrics.jsonl has `loss` (the batch's mean NLL per counted token, before the
update) and `tutor_tokens`.
"""
import sys

from pedrl import cli
from pedrl.jobs import settings
from pedrl.rl import offline_data, settings as rl_settings

if __name__ == "__main__":  # First, before the imports below load JAX (pedrl.cli.check_job).
  cli.check_job(__spec__.name, sys.argv[1:],
                lambda c: settings.read_offline_settings(c, rl_settings.SFTSettings,
                                                         offline_data.SequenceSettings))

import os
import typing

import ml_collections

from pedrl.jobs import offline, workdir as workdir_lib
from pedrl.jobs.exits import define_flags, job_main
from pedrl.rl import batch as batch_lib, sft

if typing.TYPE_CHECKING:  # Annotations only: transformers loads with the tokenizer.
  import transformers


class SFT:
  """SFT's offline.Method: the accepted dialogues' tutor tokens, one sequence each."""
  name = "sft"
  objective_type = sft.SFTObjective
  options_type = offline_data.SequenceSettings
  data_file = offline_data.ACCEPTED
  reference = False
  shown = ("loss",)

  def items(self, run: settings.OfflineRunSettings, data_dir: str,
            tokenizer: "transformers.PreTrainedTokenizerBase") -> list[offline_data.TutorSequence]:
    accepted = offline_data.load(os.path.join(data_dir, self.data_file),
                                 offline_data.AcceptedDialogue)
    o = run.options
    sequences = offline_data.tutor_sequences(
        os.path.join(data_dir, offline_data.DIALOGUES), [a.uid for a in accepted],
        tokens=o.tokens, thinking=o.thinking, decode=tokenizer.decode)
    return [sequences[a.uid] for a in accepted]

  def batch(self, trainer: offline.OfflineTrainer,
            items: list[offline_data.TutorSequence]) -> batch_lib.SequenceBatch:
    return batch_lib.from_sequences(items)


define_flags("experiments/sft.py:tiny", "Run directory (checkpoints, metrics).")


@job_main
def main(c: ml_collections.ConfigDict, workdir: str) -> None:
  trainer, writer, ckpt = offline.build(c, SFT(), workdir, workdir_lib.config_name(sys.argv))
  offline.train(trainer, writer, ckpt, workdir)


if __name__ == "__main__":
  cli.run(main)
