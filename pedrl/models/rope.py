"""Rotary position embeddings, with the `linear`, `llama3` and `yarn` scalings.

Frequencies are computed in float32 numpy, the way transformers computes them,
so that angles at long positions round the same way as in the reference.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np


def frequencies(head_dim: int, theta: float,
                scaling: dict | None = None) -> tuple[np.ndarray, float]:
  """(inverse frequencies theta^(-2i/d) for i < d/2 after scaling, cos/sin multiplier)."""
  f32 = np.float32
  exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(f32) / f32(head_dim)
  powers = f32(theta) ** exponents
  inv = f32(1.0) / powers
  scaling = dict(scaling or {})
  rope_type = scaling.pop("rope_type", "default")
  if rope_type == "default":
    return inv, 1.0
  if rope_type == "linear":
    return (inv / f32(scaling["factor"])).astype(f32), 1.0
  if rope_type == "llama3":
    return llama3_scale(inv, **scaling), 1.0
  if rope_type == "yarn":
    return yarn_scale(powers, head_dim, theta, **scaling)
  raise ValueError(f"unknown rope type {rope_type!r}")


def llama3_scale(inv: np.ndarray, factor: float, low_freq_factor: float,
                 high_freq_factor: float, original_max_position_embeddings: float) -> np.ndarray:
  """Llama 3.1 scaling: long wavelengths slowed by `factor`, short kept, a smooth band between."""
  f32 = np.float32
  old_len = f32(original_max_position_embeddings)
  low_wavelen = old_len / f32(low_freq_factor)
  high_wavelen = old_len / f32(high_freq_factor)
  wavelen = f32(2 * np.pi) / inv
  scaled = np.where(wavelen > low_wavelen, inv / f32(factor), inv)
  smooth = (old_len / wavelen - f32(low_freq_factor)) / f32(high_freq_factor - low_freq_factor)
  smoothed = (f32(1) - smooth) * scaled / f32(factor) + smooth * scaled
  medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
  return np.where(medium, smoothed, scaled).astype(f32)


def yarn_scale(powers: np.ndarray, head_dim: int, theta: float, factor: float,
               original_max_position_embeddings: float, attention_factor: float,
               beta_fast: float = 32.0, beta_slow: float = 1.0,
               truncate: float = 1.0) -> tuple[np.ndarray, float]:
  """YaRN: interpolate long wavelengths, keep short ones, blend linearly between.

  Dimensions that turn fewer than beta_slow times over the original context are
  interpolated (divided by factor), those turning more than beta_fast times are
  kept; cos and sin are multiplied by attention_factor.
  """
  f32 = np.float32

  def dim_for(rotations):  # The dimension index that rotates `rotations` times.
    return head_dim * math.log(original_max_position_embeddings / (rotations * 2 * math.pi)) / (
        2 * math.log(theta))
  low, high = dim_for(beta_fast), dim_for(beta_slow)
  if truncate:
    low, high = math.floor(low), math.ceil(high)
  low, high = max(low, 0), min(high, head_dim - 1)
  if low == high:
    high += 0.001
  ramp = np.clip((np.arange(head_dim // 2, dtype=f32) - f32(low)) / f32(high - low), 0, 1)
  keep = f32(1) - ramp.astype(f32)  # 1: extrapolate (keep), 0: interpolate.
  inv = (f32(1) / (f32(factor) * powers)) * (f32(1) - keep) + (f32(1) / powers) * keep
  return inv.astype(f32), float(attention_factor)


def yarn_attention_factor(factor: float, mscale: float | None = None,
                          mscale_all_dim: float | None = None) -> float:
  """YaRN's default cos/sin multiplier, 0.1 ln(factor) + 1 (or the mscale ratio)."""
  def m(scale, k: float = 1.0):
    return 1.0 if scale <= 1 else 0.1 * k * math.log(scale) + 1.0
  if mscale and mscale_all_dim:
    return m(factor, mscale) / m(factor, mscale_all_dim)
  return m(factor)


def cos_sin(positions: jnp.ndarray, inv_freq: np.ndarray,
            scale: float = 1.0) -> tuple[jax.Array, jax.Array]:
  """cos and sin tables [..., head_dim] for integer positions [...], in float32."""
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)
  angles = jnp.concatenate([angles, angles], axis=-1)
  if scale == 1.0:
    return jnp.cos(angles), jnp.sin(angles)
  return jnp.cos(angles) * scale, jnp.sin(angles) * scale


def apply(x: jnp.ndarray, cos: jnp.ndarray, sin: jnp.ndarray) -> jnp.ndarray:
  """Rotates x [B, T, H, D] by tables [B, T, D] (the half-split convention of HF)."""
  x32 = x.astype(jnp.float32)
  half = x.shape[-1] // 2
  rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
  out = x32 * cos[:, :, None, :] + rotated * sin[:, :, None, :]
  return out.astype(x.dtype)
