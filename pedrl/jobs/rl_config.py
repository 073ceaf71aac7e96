"""The `rl` section every training config shares: the fields of TrainSettings,
GRPOSettings and OptimizerSettings with their defaults (paper 003's)."""
from typing import Any

import ml_collections

from pedrl.jobs import settings
from pedrl.rl.settings import GRPOSettings, OptimizerSettings, TrainSettings


def rl_section(**overrides: Any) -> ml_collections.ConfigDict:
  return settings.section(TrainSettings, GRPOSettings, OptimizerSettings, **overrides)


def tiny(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Shrinks a config to the testdata models on a 2-core CPU."""
  c.rl.update(steps=3, save_every=1, samples_every=1, dialogues_every=1, micro_batch=4,
              lr=1e-4)
  return c
