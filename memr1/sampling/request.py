"""What every rollout request is checked against, how prompts are padded to a bucket, and how
a request's sampling settings reach the engine's programs.

The rollout engine (`memr1.sampling.engine`) and the reference sampler
(`memr1.sampling.sampler`) accept the same requests and reject the same bad ones, with errors
that name the prompt, the value and the limit.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from memr1.models.config import ModelConfig
from memr1.models.vocab import check_token_ids

PromptBatch = Sequence[Sequence[int]] | np.ndarray


def default_bucket(length: int, minimum: int = 16) -> int:
    """The power of two (at least `minimum`) that a prompt batch of this length is padded to."""
    return max(minimum, 1 << max(0, length - 1).bit_length())


def left_pad(prompts: PromptBatch, width: int, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Left-pads prompts into [B, width] int32 tokens and a [B, width] bool validity mask."""
    rows = [np.asarray(p, np.int32).reshape(-1) for p in prompts]
    tokens = np.full((len(rows), width), pad_id, np.int32)
    valid = np.zeros((len(rows), width), bool)
    for b, row in enumerate(rows):
        if row.size:
            tokens[b, width - row.size :] = row
            valid[b, width - row.size :] = True
    return tokens, valid


def check_request(
    cfg: ModelConfig,
    prompt_tokens: PromptBatch,
    *,
    max_new_tokens: int,
    num_samples: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
) -> tuple[list[np.ndarray], int | None]:
    """Checks a request; returns its prompts as 1-D int32 arrays and top_k (None when off).

    Raises:
      ValueError: no prompt, an empty prompt, a non-positive budget or G, a prompt plus its
        budget past `cfg.max_position`, a negative temperature, top_p outside (0, 1] or top_k
        outside [1, V].
      memr1.models.vocab.OutOfVocabError: a prompt token outside the vocabulary.
    """
    prompts = [np.asarray(p).reshape(-1) for p in prompt_tokens]
    lengths = [len(p) for p in prompts]
    if not lengths:
        raise ValueError("generate() needs at least one prompt")
    if min(lengths) == 0:
        raise ValueError(f"prompt {lengths.index(0)} is empty; every prompt needs a token")
    if max_new_tokens < 1 or num_samples < 1:
        raise ValueError(f"{max_new_tokens=} and {num_samples=} must be positive")
    if max(lengths) + max_new_tokens > cfg.max_position:
        raise ValueError(
            f"prompt of {max(lengths)} tokens + {max_new_tokens} new tokens exceeds "
            f"max_position={cfg.max_position}"
        )
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    top_k = int(top_k) if top_k else None
    if top_k is not None and not 0 < top_k <= cfg.vocab_size:
        raise ValueError(f"top_k must be in [1, {cfg.vocab_size}], got {top_k}")
    for b, prompt in enumerate(prompts):
        check_token_ids(prompt, None, cfg.vocab_size, f"prompt {b}")
    return [p.astype(np.int32) for p in prompts], top_k


def prompt_ids_of(prompt_ids: Sequence[int] | None, n: int) -> np.ndarray:
    """Each prompt's id in the key: `prompt_ids`, or 0 .. n - 1."""
    ids = np.arange(n) if prompt_ids is None else np.asarray(prompt_ids, np.int64)
    if ids.shape != (n,) or ids.min() < 0 or ids.max() >= 2**31:
        raise ValueError(f"prompt_ids must be {n} ids in [0, 2**31), got {ids}")
    return ids


def sampling_args(key, temperature, top_k, top_p, stops, row_split) -> tuple[tuple, dict]:
    """A run's traced sampling arguments (key, temperature, top-p, stop set) and its static
    ones (greedy, top-k, whether top-p applies, the rows' sharding)."""
    if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)  # a raw uint32 key (jax.random.PRNGKey)
    greedy = temperature == 0.0
    args = (key, np.float32(1.0 if greedy else temperature),
            np.float32(1.0 if top_p is None else top_p), stops)  # fmt: skip
    static = dict(
        greedy=greedy,
        top_k=None if greedy else top_k,
        use_top_p=not greedy and top_p is not None and top_p < 1.0,
        row_split=row_split,
    )
    return args, static
