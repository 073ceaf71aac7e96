"""Rotary position embeddings, with the `linear` and `llama3` frequency scalings.

Frequencies are computed in float32 numpy, the way transformers computes them,
so that angles at long positions round the same way as in the reference.
"""
import jax.numpy as jnp
import numpy as np


def inv_frequencies(head_dim: int, theta: float, scaling: dict | None = None) -> np.ndarray:
  """Inverse frequencies theta^(-2i/d), i < d/2, after the configured scaling."""
  f32 = np.float32
  exponents = np.arange(0, head_dim, 2, dtype=np.int64).astype(f32) / f32(head_dim)
  inv = f32(1.0) / (f32(theta) ** exponents)
  scaling = dict(scaling or {})
  rope_type = scaling.get("rope_type", "default")
  if rope_type == "default":
    return inv
  if rope_type == "linear":
    return (inv / f32(scaling["factor"])).astype(f32)
  if rope_type == "llama3":
    return llama3_scale(inv, **{k: v for k, v in scaling.items() if k != "rope_type"})
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


def cos_sin(positions: jnp.ndarray, inv_freq: np.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
  """cos and sin tables [..., head_dim] for integer positions [...], in float32."""
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)
  angles = jnp.concatenate([angles, angles], axis=-1)
  return jnp.cos(angles), jnp.sin(angles)


def apply(x: jnp.ndarray, cos: jnp.ndarray, sin: jnp.ndarray) -> jnp.ndarray:
  """Rotates x [B, T, H, D] by tables [B, T, D] (the half-split convention of HF)."""
  x32 = x.astype(jnp.float32)
  half = x.shape[-1] // 2
  rotated = jnp.concatenate([-x32[..., half:], x32[..., :half]], axis=-1)
  out = x32 * cos[:, :, None, :] + rotated * sin[:, :, None, :]
  return out.astype(x.dtype)
