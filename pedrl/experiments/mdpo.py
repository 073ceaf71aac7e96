r"""Multi-turn DPO of the tutor on the baseline data's preference pairs (paper 003's MDPO
baseline, A.3).

  python -m pedrl.experiments.mdpo --config=experiments/mdpo.py:tiny --workdir=/tmp/mdpo \
      --config.data.workdir=/tmp/baselines

The DPO loss over whole dialogues, only the tutor's sampled tokens counted
(pedrl.rl.dpo; WORKDIR/pairs.jsonl of the data workdir), against the frozen
initial tutor, whose log-probs of each step's pairs are computed once, before
the update, with the trainer's jitted scorer (pedrl.rl.update.logprobs_in_chunks).
The loop, checkpoints and outputs are the offline jobs'
(pedrl.jobs.offline). A row of metrics.jsonl has, before the update,
`loss`, `rewards/chosen` and `rewards/rejected` (DPO's implicit rewards β·Δ,
means over the step's pairs), `rewards/margins`, `rewards/accuracies` (the share
of pairs whose chosen reward is the higher) and `logps/chosen|rejected`.
"""
import sys

from pedrl import cli
from pedrl.jobs import settings
from pedrl.rl import settings as rl_settings

if __name__ == "__main__":  # First, before the imports below load JAX (pedrl.cli.check_job).
  cli.check_job(__spec__.name, sys.argv[1:],
                lambda c: settings.read_offline_settings(c, rl_settings.DPOSettings))

import os
import typing

import ml_collections

from pedrl.jobs import offline, workdir as workdir_lib
from pedrl.jobs.exits import define_flags, job_main
from pedrl.rl import dpo, offline_data, update

if typing.TYPE_CHECKING:  # Annotations only: transformers loads with the tokenizer.
  import transformers


class MDPO:
  """MDPO's offline.Method: the preference pairs' dialogues, against the frozen tutor."""
  name = "mdpo"
  objective_type = dpo.DPOObjective
  data_file = offline_data.PAIRS
  options_type = None
  reference = True
  shown = ("loss", "rewards/accuracies", "rewards/margins")

  def items(self, run: settings.OfflineRunSettings, data_dir: str,
            tokenizer: "transformers.PreTrainedTokenizerBase"
            ) -> list[tuple[offline_data.TutorSequence, offline_data.TutorSequence]]:
    pairs = offline_data.load(os.path.join(data_dir, self.data_file),
                              offline_data.PreferencePair)
    sequences = offline_data.tutor_sequences(
        os.path.join(data_dir, offline_data.DIALOGUES),
        [u for p in pairs for u in (p.chosen, p.rejected)])
    return [(sequences[p.chosen], sequences[p.rejected]) for p in pairs]

  def batch(self, trainer: offline.OfflineTrainer,
            items: list[tuple[offline_data.TutorSequence, offline_data.TutorSequence]]
            ) -> dpo.PairBatch:
    model, mesh = trainer.tutor.sampler.model, trainer.tutor.sampler.mesh
    chunk = 2 * trainer.objective.micro_batch
    return dpo.build(items, lambda tokens, attn: update.logprobs_in_chunks(
        model, trainer.ref_params, tokens, attn, 1.0, chunk, mesh))


define_flags("experiments/mdpo.py:tiny", "Run directory (checkpoints, metrics).")


@job_main
def main(c: ml_collections.ConfigDict, workdir: str) -> None:
  trainer, writer, ckpt = offline.build(c, MDPO(), workdir, workdir_lib.config_name(sys.argv))
  offline.train(trainer, writer, ckpt, workdir)


if __name__ == "__main__":
  cli.run(main)
