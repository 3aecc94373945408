"""The HF transformers twin of a memr1 model, the peer of tools/bench/bench_generate.py and
tools/bench/bench_train_engines.py: the same weights copied into an HF model through the
checkpoint layout table (`memr1.models.hf_io`), and the check that both sides compute the same
logits."""

from __future__ import annotations

import numpy as np


def hf_twin(cfg, params, device: str):
    """An HF model holding exactly `params`, built in memory through the checkpoint layout."""
    import jax
    import torch
    import transformers
    from flax import nnx

    from memr1.models.hf_export import ARCHITECTURE, hf_config_dict
    from memr1.models.hf_io import tensor_layout

    config_dict = hf_config_dict(cfg, cfg.param_dtype)
    config_cls = getattr(transformers, ARCHITECTURE[cfg.family].replace("ForCausalLM", "Config"))
    model_cls = getattr(transformers, ARCHITECTURE[cfg.family])
    torch_dtype = getattr(torch, cfg.param_dtype)
    with torch.device(device):
        model = model_cls(config_cls(**config_dict)).to(torch_dtype).eval()
    flat = dict(nnx.to_flat_state(params))
    state = {}
    for path, hf_name, _, _, to_hf in tensor_layout(cfg):
        # A writable contiguous copy: torch refuses to wrap read-only device-get buffers.
        host = np.array(to_hf(np.asarray(jax.device_get(flat[path].get_value()))), order="C")
        if host.dtype.name == "bfloat16":  # ml_dtypes bf16 has no torch twin; move the bits
            tensor = torch.from_numpy(host.view(np.uint16)).view(torch.bfloat16)
        else:
            tensor = torch.from_numpy(host)
        state[hf_name] = tensor.to(device)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise RuntimeError(f"weight copy mismatch: missing {missing}, unexpected {unexpected}")
    return model


def max_logit_gap(cfg, graphdef, params, model, prompts) -> float:
    """Max |ours - HF| over the prompt logits: proves both sides hold the same weights."""
    import jax.numpy as jnp
    import torch

    from memr1.models import transformer
    from memr1.models.masks import causal_mask, positions_from_valid

    tokens = jnp.asarray(prompts[:2, :16])
    valid = jnp.ones(tokens.shape, bool)
    h, _ = transformer.forward(
        graphdef, params, tokens, positions_from_valid(valid), causal_mask(valid)
    )
    ours = np.asarray(transformer.logits_fn(graphdef, params, h))
    device = next(model.parameters()).device
    with torch.inference_mode():
        theirs = model(torch.from_numpy(np.asarray(prompts[:2, :16])).to(device)).logits
    return float(np.abs(ours - theirs.float().cpu().numpy()).max())
