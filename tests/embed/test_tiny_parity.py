"""The NNX encoder against transformers' BertModel on a tiny random checkpoint."""

import json
import shutil

import numpy as np
import pytest

from memr1.embed import Encoder, read_bert_spec
from tests.embed.conftest import TINY_MAX_SEQ, torch_sentence_embeddings, write_tiny_bert

TEXTS = [
    "",
    "the dog",
    "Melanie went camping at the lake in May 2023.",
    "she adopted a dog named Buddy and a cat named Scout, they love music!",
    # Longer than max_seq_length, so it is truncated identically on both sides.
    " ".join(["caroline loves painting with her dog at the party"] * 6),
    "Zürich ☃ naïve",
    "x",
]


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    return Encoder.from_dir(tiny_bert_dir, batch_size=4, seq_buckets=(8, 16))


def test_matches_pytorch_sentence_embeddings(encoder, tiny_bert_dir):
    ids = encoder.tokenize(TEXTS)
    assert max(len(s) for s in ids) == TINY_MAX_SEQ, "the long text should hit truncation"
    ours = encoder.encode(TEXTS)
    ref = torch_sentence_embeddings(tiny_bert_dir, ids)
    assert ours.shape == (len(TEXTS), 15) and ours.dtype == np.float32
    cos = (ours * ref).sum(axis=1)
    assert cos.min() >= 0.9999, f"per-sentence cosine vs PyTorch: {cos}"
    np.testing.assert_allclose(ours, ref, atol=2e-5)


def test_hidden_states_match_last_hidden_state(encoder, tiny_bert_dir):
    import jax.numpy as jnp
    import torch
    from transformers import BertModel

    ids = encoder.tokenize(TEXTS[2:4])
    width = max(map(len, ids))
    ids_BT = np.zeros((2, width), np.int32)
    mask_BT = np.zeros((2, width), bool)
    for i, s in enumerate(ids):
        ids_BT[i, : len(s)], mask_BT[i, : len(s)] = s, True
    model = encoder.model
    ours = np.asarray(model.hidden_states(jnp.asarray(ids_BT), jnp.asarray(mask_BT)))
    ref_model = BertModel.from_pretrained(str(tiny_bert_dir), local_files_only=True).eval()
    with torch.no_grad():
        ref = ref_model(
            input_ids=torch.tensor(ids_BT, dtype=torch.long),
            attention_mask=torch.tensor(mask_BT, dtype=torch.long),
        ).last_hidden_state.numpy()
    # Only real tokens are compared: padded positions are never pooled.
    np.testing.assert_allclose(ours[mask_BT], ref[mask_BT], atol=5e-5)


def test_order_and_batching_do_not_change_results(encoder):
    whole = encoder.encode(TEXTS)
    one_by_one = np.concatenate([encoder.encode([t]) for t in TEXTS])
    reversed_ = encoder.encode(TEXTS[::-1])[::-1]
    np.testing.assert_allclose(one_by_one, whole, atol=1e-6)
    np.testing.assert_allclose(reversed_, whole, atol=1e-6)
    assert encoder.encode([]).shape == (0, 15)
    with pytest.raises(TypeError, match="sequence of strings"):
        encoder.encode("one string is not a batch")


def test_buckets_bound_the_number_of_compiled_programs(tiny_bert_dir):
    enc = Encoder.from_dir(tiny_bert_dir, batch_size=4, seq_buckets=(8, 16))
    enc.encode(["the dog", "a cat"])
    enc.encode(["the cat went", "a dog"])
    assert enc.compiled_shapes() == 1, "two 2-text calls of short texts share one program"
    enc.encode(["the dog"] * 3 + [TEXTS[4]])
    enc.encode(["x"] * 9)
    # batch buckets (1, 2, 4) x length buckets (8, 16, 24) bound everything that can compile.
    assert enc.compiled_shapes() <= 3 * 3
    assert enc.seq_buckets == (8, 16, TINY_MAX_SEQ)


def test_cls_pooling_from_pooling_config(tmp_path):
    write_tiny_bert(tmp_path, seed=1, pooling="cls")
    enc = Encoder.from_dir(tmp_path, batch_size=2)
    ids = enc.tokenize(TEXTS[1:4])
    ref = torch_sentence_embeddings(tmp_path, ids, pooling="cls")
    assert (enc.encode(TEXTS[1:4]) * ref).sum(axis=1).min() >= 0.9999


def test_prefixed_checkpoint_loads(tmp_path, tiny_bert_dir):
    # Checkpoints saved from a task head name tensors "bert.embeddings..."; they load the same.
    from safetensors.numpy import load_file, save_file

    shutil.copytree(tiny_bert_dir, tmp_path / "m")
    tensors = load_file(str(tmp_path / "m" / "model.safetensors"))
    save_file(
        {f"bert.{k}": v for k, v in tensors.items()}, str(tmp_path / "m" / "model.safetensors")
    )
    a = Encoder.from_dir(tiny_bert_dir).encode(TEXTS[:3])
    b = Encoder.from_dir(tmp_path / "m").encode(TEXTS[:3])
    np.testing.assert_array_equal(a, b)


def test_tanh_gelu_config_is_honoured(tmp_path, tiny_bert_dir):
    shutil.copytree(tiny_bert_dir, tmp_path / "m")
    cfg_path = tmp_path / "m" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["hidden_act"] = "gelu_new"
    cfg_path.write_text(json.dumps(cfg))
    assert read_bert_spec(tmp_path / "m").approximate_gelu
    exact = Encoder.from_dir(tiny_bert_dir).encode(TEXTS[2:4])
    approx = Encoder.from_dir(tmp_path / "m").encode(TEXTS[2:4])
    assert not np.array_equal(exact, approx)
    np.testing.assert_allclose(exact, approx, atol=1e-2)
