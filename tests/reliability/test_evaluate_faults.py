"""The evaluation entry point: impossible memory settings are refused before anything loads, and
one config and seed give the same outputs twice."""

from __future__ import annotations

import json

import pytest

from configs import memr1 as memr1_config
from memr1 import evaluate
from memr1.data.locomo import load_locomo
from memr1.data.synthloco import generate as synth
from memr1.data.synthloco.world import get_preset
from memr1.models.tokenizer_train import train_bpe_tokenizer


@pytest.fixture(scope="module")
def synth_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    synth.write_dataset(synth.generate_dataset(get_preset("tiny", 0)), root / "data", "tiny")
    texts = [t.text for c in load_locomo(root / "data" / "train.json") for t in c.iter_turns()]
    train_bpe_tokenizer(texts, root / "tokenizer", vocab_size=600)
    return root


def _config(synth_dir, system="locomo_rag"):
    config = memr1_config.get_config(f"system={system},runlocal")
    config.data.path = str(synth_dir / "data" / "test.json")
    config.data.max_questions = 3
    config.tokenizer_dir = str(synth_dir / "tokenizer")
    config.memory.retriever = "exact_numpy"
    config.agents.batch_size = 4
    config.agents.answer_max_new_tokens = 6
    # Sampled, not greedy: the answers then depend on the seed, so equal outputs mean the
    # randomness is reproduced rather than absent.
    config.agents.temperature = 1.0
    config.seed = 3
    return config


def _evaluate(config, workdir):
    return evaluate.evaluate(
        config, hf_dir=None, manager_ckpt=None, answer_ckpt=None, embed_dir=None,
        workdir=str(workdir), overwrite=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("capacity", 0),
        ("capacity", -1),
        ("text_bytes", 0),
        ("log_capacity", -1),
        ("k_per_speaker", 0),
        ("retriever", "faiss"),
        ("overflow", "drop_newest"),
        ("fact_source", "oracle"),
    ],
)
def test_impossible_memory_settings_fail_before_data_or_model_load(
    synth_dir, tmp_path, monkeypatch, field, value
):
    def tripwire(*args, **kwargs):
        raise AssertionError("loaded before the memory settings were checked")

    monkeypatch.setattr(evaluate.load, "load_backbone", tripwire)
    monkeypatch.setattr(evaluate.setup, "load_conversations", tripwire)
    config = _config(synth_dir, "mem0")
    config.memory[field] = value
    with pytest.raises(ValueError, match=f"config memory.{field}={value!r}"):
        _evaluate(config, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_same_config_and_seed_give_the_same_predictions_and_scores(synth_dir, tmp_path):
    first = _evaluate(_config(synth_dir), tmp_path / "a")
    second = _evaluate(_config(synth_dir), tmp_path / "b")
    for name in ("predictions.jsonl", "manager_turns.jsonl", "banks/synth-test-000.json"):
        a, b = ((tmp_path / run / name).read_bytes() for run in "ab")
        assert a == b, f"{name} differs between two runs with one config and seed"
    assert first["scores"] == second["scores"]
    assert first["operations"] == second["operations"]
    # Not vacuous: every question retrieved memories, and sampling produced some text.
    rows = [json.loads(line) for line in (tmp_path / "a" / "predictions.jsonl").open()]
    assert len(rows) == 3 and all(any(r["retrieved"].values()) for r in rows)
    assert any(r["output"] for r in rows)
