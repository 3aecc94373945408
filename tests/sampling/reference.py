"""Slow but obviously correct references for the sampler tests.

The references never use a KV cache: every step re-runs the full forward pass over the whole
(prompt + generated) sequence with the same masks a trainer would build, so they share no code
path with the sampler's prefill / decode loop beyond the transformer itself.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from memr1.models import transformer
from memr1.models.config import ModelConfig, get_size
from memr1.models.masks import causal_mask, positions_from_valid

# Odd sizes (prime vocab, 3 query heads per kv head) so that transposed axes cannot line up.
TEST_CFG = get_size(
    "tiny",
    vocab_size=101,
    d_model=48,
    n_layers=2,
    head_dim=8,
    d_ff=72,
    tie_embeddings=False,
    max_position=512,
)


def noisy_model(cfg: ModelConfig = TEST_CFG, seed: int = 0, scale: float = 0.1):
    """A random model whose biases and norm scales are non-trivial and logits well spread.

    The default init (std 0.02, zero biases, unit norms) gives near-uniform logits, where greedy
    argmax ties would make token-for-token comparisons flaky and bias bugs invisible. Much larger
    noise (0.3) makes the float32 network ill-conditioned: cached and uncached log-probs then
    differ by ~1.5e-5 from summation order alone, against ~1e-6 at 0.1. Drawn with NumPy, which
    is seconds faster than compiling the model's own initialiser.
    """
    graphdef, abstract = transformer.abstract_model(cfg)
    rng = np.random.default_rng(seed)

    def draw(path, leaf):
        centre = 1.0 if "scale" in jax.tree_util.keystr(path) else 0.0  # norm scales near 1
        noise = rng.normal(centre, scale, leaf.shape)
        return jnp.asarray(noise, leaf.dtype)

    return graphdef, jax.tree_util.tree_map_with_path(draw, abstract)


@functools.partial(jax.jit, static_argnums=0)
def _full_logits(graphdef, params, tokens_BT, valid_BT):
    h_BTD, _ = transformer.forward(
        graphdef, params, tokens_BT, positions_from_valid(valid_BT), causal_mask(valid_BT)
    )
    return transformer.logits_fn(graphdef, params, h_BTD)


def naive_greedy(graphdef, params, prompts: list[list[int]], max_new: int) -> np.ndarray:
    """Greedy continuation [B, max_new] by a full no-cache forward pass per generated token.

    Prompts are left-padded only to their own maximum length (not the sampler's bucket), and the
    buffer has fixed width so the forward pass compiles once.
    """
    width = max(len(p) for p in prompts)
    tokens = np.zeros((len(prompts), width + max_new), np.int32)
    valid = np.zeros_like(tokens, bool)
    for b, prompt in enumerate(prompts):
        tokens[b, width - len(prompt) : width] = prompt
        valid[b, width - len(prompt) : width] = True
    for i in range(max_new):
        logits_BTV = _full_logits(graphdef, params, tokens, valid)
        tokens[:, width + i] = np.asarray(jnp.argmax(logits_BTV[:, width + i - 1], axis=-1))
        valid[:, width + i] = True
    return tokens[:, width:]


def trainer_logprobs(graphdef, params, out, temperature: float) -> np.ndarray:
    """Log-probs [R, T] of the sampled tokens as a trainer recomputes them in one forward pass.

    The sequence is the sampler's own left-padded prompt followed by the generated tokens
    (right-padded by the mask); log_softmax(logits / T) is gathered at the taken tokens.
    """
    prompt_w = out.prompt_tokens.shape[1]
    tokens = jnp.concatenate([out.prompt_tokens, out.tokens], axis=1)
    valid = jnp.concatenate([out.prompt_mask, out.mask], axis=1)
    logits_RTV = _full_logits(graphdef, params, tokens, valid)[:, prompt_w - 1 : -1]
    logp_RTV = jax.nn.log_softmax(logits_RTV / temperature, axis=-1)
    taken = jnp.take_along_axis(logp_RTV, out.tokens[..., None], axis=-1)[..., 0]
    return np.asarray(jnp.where(out.mask, taken, 0.0))
