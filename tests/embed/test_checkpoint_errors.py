"""Bad model directories fail with messages that name the file and the key."""

import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from memr1.embed import DEFAULT_SHA256, Encoder, read_bert_spec
from memr1.embed.checkpoint import check_pinned


@pytest.fixture
def model_dir(tmp_path, tiny_bert_dir):
    path = tmp_path / "m"
    shutil.copytree(tiny_bert_dir, path)
    return path


def _edit_json(path, **changes):
    data = json.loads(path.read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path.write_text(json.dumps(data))


def _edit_tensors(path, fn):
    tensors = load_file(str(path))
    fn(tensors)
    save_file(tensors, str(path))


def test_missing_weights_file(model_dir):
    (model_dir / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors"):
        Encoder.from_dir(model_dir)


def test_missing_config_file(model_dir):
    (model_dir / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        Encoder.from_dir(model_dir)


def test_not_a_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        Encoder.from_dir(tmp_path / "nowhere")


def test_non_bert_config(model_dir):
    _edit_json(model_dir / "config.json", model_type="gpt2")
    with pytest.raises(ValueError, match=r"config\.json.*'model_type'.*gpt2"):
        Encoder.from_dir(model_dir)


def test_missing_config_key(model_dir):
    _edit_json(model_dir / "config.json", intermediate_size=None)
    with pytest.raises(ValueError, match=r"config\.json: missing key 'intermediate_size'"):
        read_bert_spec(model_dir)


def test_relative_positions_refused(model_dir):
    _edit_json(model_dir / "config.json", position_embedding_type="relative_key")
    with pytest.raises(ValueError, match="position_embedding_type"):
        read_bert_spec(model_dir)


def test_wrong_tensor_shape(model_dir):
    key = "encoder.layer.1.intermediate.dense.weight"

    def shrink(t):
        t[key] = np.zeros((36, 15), np.float32)

    _edit_tensors(model_dir / "model.safetensors", shrink)
    with pytest.raises(ValueError, match=rf"model\.safetensors.*{key}.*\(36, 15\).*\(37, 15\)"):
        Encoder.from_dir(model_dir)


def test_config_disagreeing_with_weights(model_dir):
    # A config that promises a bigger feed-forward than the tensors hold is caught by shape.
    _edit_json(model_dir / "config.json", intermediate_size=41)
    with pytest.raises(ValueError, match=r"intermediate\.dense\.weight.*\(37, 15\).*\(41, 15\)"):
        Encoder.from_dir(model_dir)


def test_missing_tensor(model_dir):
    key = "encoder.layer.0.attention.self.value.bias"
    _edit_tensors(model_dir / "model.safetensors", lambda t: t.pop(key))
    with pytest.raises(ValueError, match=rf"model\.safetensors: missing tensor '{key}'"):
        Encoder.from_dir(model_dir)


def test_unsupported_pooling(model_dir):
    _edit_json(
        model_dir / "1_Pooling" / "config.json",
        pooling_mode_mean_tokens=False,
        pooling_mode_max_tokens=True,
    )
    with pytest.raises(ValueError, match=r"1_Pooling/config\.json.*pooling_mode_max_tokens"):
        Encoder.from_dir(model_dir)


def test_max_seq_length_beyond_positions(model_dir):
    _edit_json(model_dir / "sentence_bert_config.json", max_seq_length=41)
    with pytest.raises(ValueError, match=r"sentence_bert_config\.json.*'max_seq_length'"):
        Encoder.from_dir(model_dir)


def test_pin_refuses_other_bytes(model_dir):
    weights = model_dir / "model.safetensors"
    with pytest.raises(ValueError, match=rf"{weights}: sha256 is [0-9a-f]{{64}}.*pinned"):
        check_pinned(weights, DEFAULT_SHA256)


def test_user_directory_is_not_pinned(model_dir):
    # The same bytes that fail the pin load fine when the user names the directory.
    assert Encoder.from_dir(model_dir).encode(["the dog"]).shape == (1, 15)


def test_default_load_checks_the_pin(monkeypatch, model_dir):
    # Pretend the package ships the tiny weights: loading the default must refuse them.
    from memr1.embed import checkpoint

    monkeypatch.setattr(checkpoint, "default_model_dir", lambda: model_dir)
    with pytest.raises(ValueError, match=r"model\.safetensors: sha256 is"):
        Encoder.from_dir()
