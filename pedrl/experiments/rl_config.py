"""The `rl` section every training config shares (GRPO settings; paper 003 defaults)."""
import ml_collections


def rl_section(**overrides) -> ml_collections.ConfigDict:
  rl = ml_collections.ConfigDict(dict(
      steps=150,  # Paper 003 A.1: about 300 policy updates per run = 150 batches × μ 2.
      lr=5e-7,  # Paper 003 A.2, constant.
      lr_schedule="constant",  # constant | cosine | linear (decay to 0 over `steps`)
      warmup_steps=0,
      remat=False,  # Recompute the tutor's layer activations in the backward pass.
      param_dtype="float32",  # The trained tutor's weights (bfloat16 loses small updates).
      weight_decay=0.0, adam_eps=1e-8, max_grad_norm=1.0,
      beta=0.001,  # KL coefficient (k3).
      eps_low=0.2, eps_high=None,  # Clip range; eps_high None: symmetric.
      aggregation="token_mean",  # token_mean (reference) | sequence_mean
      passes=2,  # μ.
      mini_batch=0,  # Rows per optimizer step; 0: the whole generated batch.
      micro_batch=8,  # Rows per gradient computation (accumulated exactly).
      advantage="dialogue",  # dialogue | turn (UCO)
      advantage_eps=1e-4,
      advantage_ddof=1,  # Unbiased group std, as TRL (paper 003's reference code).
      save_every=10, keep=3, samples_every=10,
      max_bad_steps=3))  # Steps in a row with a non-finite loss/KL/gradient before stopping.
  rl.update(overrides)
  return rl


def tiny(c):
  """Shrinks a config to the testdata models on a 2-core CPU."""
  c.rl.update(steps=3, save_every=1, samples_every=1, micro_batch=4, lr=1e-4)
  return c
