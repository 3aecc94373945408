"""Rotary position embeddings, in the half-split layout used by HF Qwen2 and LLaMA."""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from memr1.models.config import ModelConfig


def inverse_frequencies(cfg: ModelConfig) -> np.ndarray:
    """Returns the [N/2] RoPE inverse frequencies, with LLaMA-3.1 scaling when configured."""
    exponents = np.arange(0, cfg.head_dim, 2, dtype=np.float64) / cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta**exponents)
    s = cfg.rope_scaling
    if s is None:
        return inv_freq.astype(np.float32)
    # LLaMA-3.1: long wavelengths are slowed down by `factor`, short ones kept, and the band in
    # between is interpolated smoothly between the two.
    low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def apply_rope(x_BTHN: jnp.ndarray, positions_BT: jnp.ndarray, inv_freq: np.ndarray) -> jnp.ndarray:
    """Rotates query or key heads by their absolute positions (computed in float32)."""
    angles_BTn = positions_BT[..., None].astype(jnp.float32) * jnp.asarray(inv_freq)
    cos = jnp.cos(angles_BTn)[:, :, None, :]
    sin = jnp.sin(angles_BTn)[:, :, None, :]
    x = x_BTHN.astype(jnp.float32)
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    out = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return out.astype(x_BTHN.dtype)
