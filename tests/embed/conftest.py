"""A tiny random BERT sentence-transformer directory, written by transformers itself.

Odd sizes (hidden 15 = 3 heads x 5, feed-forward 37) make transposition and head-split mistakes
change the numbers; max_seq_length 24 makes truncation reachable with short texts.
"""

import json
import os

import pytest

# Everything here is read from local directories; this makes an accidental hub lookup fail fast.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

WORDS = (
    "the a and of to in is was on at for with he she they we it my your dog cat bought "
    "went party school paris melanie caroline adopted named buddy scout loves music painting "
    "yesterday 2023 may camping lake"
).split()
TINY_MAX_SEQ = 24


def write_tiny_bert(path, *, seed: int = 0, pooling: str = "mean") -> None:
    """Saves a random BertModel, its tokenizer and sentence-transformer configs into ``path``."""
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    letters = list("abcdefghijklmnopqrstuvwxyz0123456789")
    vocab = specials + WORDS + letters + ["##" + c for c in letters] + list(".,!?'")
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True)
    tokenizer.save_pretrained(str(path))

    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(vocab) + 3,
        hidden_size=15,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=37,
        max_position_embeddings=40,
        type_vocab_size=2,
        hidden_act="gelu",
        # Larger weights than BERT's 0.02 push activations to O(1), where the exact and the
        # tanh GELU (and any other small slip) differ visibly.
        initializer_range=0.5,
    )
    model = BertModel(config, add_pooling_layer=True).eval()
    # Random init leaves LayerNorm at identity and biases at zero; perturbing them makes sure
    # every loaded tensor reaches the output.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or name.endswith("bias"):
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(str(path))
    (path / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": TINY_MAX_SEQ, "do_lower_case": False})
    )
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(
        json.dumps(
            {
                "word_embedding_dimension": 15,
                "pooling_mode_cls_token": pooling == "cls",
                "pooling_mode_mean_tokens": pooling == "mean",
                "pooling_mode_max_tokens": False,
            }
        )
    )


@pytest.fixture(scope="session")
def tiny_bert_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_bert")
    write_tiny_bert(path)
    return path


def torch_sentence_embeddings(model_dir, ids: list[list[int]], pooling: str = "mean"):
    """The PyTorch reference: BertModel on each sequence alone, pooled and L2-normalised."""
    import numpy as np
    import torch
    from transformers import BertModel

    model = BertModel.from_pretrained(str(model_dir), local_files_only=True).eval()
    out = []
    with torch.no_grad():
        for seq in ids:
            x = torch.tensor([seq])
            h = model(input_ids=x, attention_mask=torch.ones_like(x)).last_hidden_state[0]
            v = h[0] if pooling == "cls" else h.mean(0)
            out.append(torch.nn.functional.normalize(v, dim=0).numpy())
    return np.stack(out)
