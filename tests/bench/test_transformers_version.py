"""The installed transformers is one setup.py allows, and the benchmarks' transformers loop
speaks its dialect (`generate`'s cache keyword moved within 5.x)."""
import os
import re

import numpy as np
import torch
import transformers
from packaging.version import Version

from tests.helpers import reference
from pedrl.bench import rollout as bench

SETUP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "setup.py"))


def test_the_installed_transformers_meets_the_floor_of_setup_py():
  with open(SETUP) as f:
    floor = re.search(r'"transformers>=([\d.]+)"', f.read()).group(1)
  assert Version(transformers.__version__) >= Version(floor)
  assert Version(floor) >= Version("5.0")  # testdata's tokenizers need v5.


def test_a_cache_carried_across_generate_calls_is_used_and_changes_nothing(testdata):
  """Two greedy turns: the second call continues the first's DynamicCache (passed with the
  keyword this version takes) and samples what re-encoding everything samples."""
  model = reference.load(testdata("qwen2"))
  config = transformers.GenerationConfig(do_sample=False, max_new_tokens=6, eos_token_id=None,
                                         pad_token_id=0)
  ids = torch.tensor(np.random.default_rng(0).integers(3, 900, (1, 10)))
  cache = transformers.DynamicCache()
  with torch.no_grad():
    first = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                           generation_config=config, **bench.cache_kwargs(cache))
    assert cache.get_seq_length() == first.shape[1] - 1  # The last token is not fed yet.
    turn = torch.cat([first, torch.tensor([[5, 6, 7]])], 1)
    carried = model.generate(input_ids=turn, attention_mask=torch.ones_like(turn),
                             generation_config=config, **bench.cache_kwargs(cache))
    fresh = model.generate(input_ids=turn, attention_mask=torch.ones_like(turn),
                           generation_config=config)
  np.testing.assert_array_equal(carried.numpy(), fresh.numpy())
