"""Greedy decoding equals HF transformers' `generate` on the same tiny random Qwen2 weights."""

import jax
import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from memr1.models.hf_io import load_hf
from memr1.sampling import Sampler

PAD = 0
PROMPTS = [[11, 42, 7, 90], [3, 5, 8, 13, 21, 34, 55, 89, 44], [60, 61]]
NEW = 8


@pytest.fixture(scope="module")
def hf_model():
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=97,
        hidden_size=48,
        intermediate_size=72,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=10_000.0,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(config).eval()
    # Spread the weights (and make biases and norm scales non-trivial) so greedy has clear winners.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def _hf_generate(model, eos=None):
    width = max(len(p) for p in PROMPTS)
    ids = torch.full((len(PROMPTS), width), PAD, dtype=torch.long)
    attention = torch.zeros_like(ids)
    for b, p in enumerate(PROMPTS):
        ids[b, width - len(p) :] = torch.tensor(p)
        attention[b, width - len(p) :] = 1
    out = model.generate(
        input_ids=ids,
        attention_mask=attention,
        do_sample=False,
        max_new_tokens=NEW,
        min_new_tokens=0,
        pad_token_id=PAD,
        eos_token_id=eos,
        return_dict_in_generate=True,
        output_logits=True,
    )
    tokens = out.sequences[:, width:].numpy()
    logits = torch.stack(out.logits, dim=1).float()
    return tokens, logits


def test_greedy_matches_hf_generate(hf_model, tmp_path):
    hf_model.save_pretrained(str(tmp_path))
    cfg, graphdef, params = load_hf(tmp_path)
    sampler = Sampler(cfg, graphdef, pad_id=PAD)

    hf_tokens, hf_logits = _hf_generate(hf_model)
    ours = sampler.generate(
        params, PROMPTS, key=jax.random.key(0), max_new_tokens=NEW, temperature=0
    )
    np.testing.assert_array_equal(np.asarray(ours.tokens), hf_tokens)
    hf_logp = torch.log_softmax(hf_logits, -1).gather(-1, torch.from_numpy(hf_tokens)[..., None])
    np.testing.assert_allclose(np.asarray(ours.logprobs), hf_logp[..., 0].numpy(), atol=1e-5)

    # With an EOS id that row 0 emits at step 2, HF pads that row after it; so must we.
    eos = int(hf_tokens[0, 2])
    hf_tokens, _ = _hf_generate(hf_model, eos=eos)
    ours = sampler.generate(
        params, PROMPTS, key=jax.random.key(0), max_new_tokens=NEW, temperature=0, eos_ids=[eos]
    )
    np.testing.assert_array_equal(np.asarray(ours.tokens), hf_tokens[:, : ours.tokens.shape[1]])
    assert int(ours.lengths[0]) <= 3 and bool(ours.done[0])
