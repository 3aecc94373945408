"""A generated synthloco fixture and a tokenizer trained on it, shared by the pipeline tests."""

from __future__ import annotations

import pytest

from memr1.data.locomo import load_locomo
from memr1.data.synthloco import generate as synth
from memr1.data.synthloco.world import get_preset
from memr1.models.tokenizer_train import train_bpe_tokenizer


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    synth.write_dataset(synth.generate_dataset(get_preset("tiny", 0)), root / "data", "tiny")
    conversations = load_locomo(root / "data" / "train.json")
    texts = [t.text for c in conversations for t in c.iter_turns()]
    train_bpe_tokenizer(texts, root / "tokenizer", vocab_size=600)
    return root
