"""Bad checkpoints and tokenizers fail with messages that name the file and the key."""

from __future__ import annotations

import json
import logging
import shutil

import pytest
from safetensors.numpy import load_file, save_file

from memr1.models.hf_io import INDEX_FILE, SINGLE_FILE, CheckpointError, load_hf
from memr1.models.tokenizer import encode_prompt, load_tokenizer, special_ids

from .tiny_hf import make_hf_model, make_tokenizer, read_config, write_config


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """One tiny Qwen2 checkpoint with a tokenizer; each test edits its own copy."""
    path = tmp_path_factory.mktemp("pristine")
    make_hf_model("qwen2", path, vocab=39, heads=4, kv_heads=2)
    make_tokenizer(path)
    return path


@pytest.fixture
def ckpt(pristine, tmp_path):
    return shutil.copytree(pristine, tmp_path / "ckpt")


def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="nowhere: checkpoint directory not found"):
        load_hf(tmp_path / "nowhere")


def test_missing_config(ckpt):
    (ckpt / "config.json").unlink()
    with pytest.raises(CheckpointError, match=r"config\.json: file not found"):
        load_hf(ckpt)


def test_config_not_json(ckpt):
    (ckpt / "config.json").write_text("{ not json")
    with pytest.raises(CheckpointError, match=r"config\.json: not valid JSON"):
        load_hf(ckpt)


def test_unsupported_architecture(ckpt):
    config = read_config(ckpt)
    config["architectures"] = ["MistralForCausalLM"]
    write_config(ckpt, config)
    with pytest.raises(CheckpointError, match=r"config\.json: key 'architectures'.*Mistral"):
        load_hf(ckpt)


def test_unsupported_rope_type(ckpt):
    config = read_config(ckpt)
    config["rope_parameters"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}
    write_config(ckpt, config)
    with pytest.raises(CheckpointError) as err:
        load_hf(ckpt)
    assert "config.json: unsupported RoPE type 'linear'" in str(err.value)
    assert "'rope_parameters.rope_type'" in str(err.value)


def test_config_transformers_rejects(ckpt):
    config = read_config(ckpt)
    config["num_hidden_layers"] = 3  # disagrees with the saved layer_types list
    write_config(ckpt, config)
    with pytest.raises(CheckpointError, match=r"config\.json: transformers could not parse"):
        load_hf(ckpt)


def test_sliding_window_rejected(ckpt):
    config = read_config(ckpt)
    config["use_sliding_window"] = True
    write_config(ckpt, config)
    with pytest.raises(CheckpointError, match="'use_sliding_window'"):
        load_hf(ckpt)


def test_missing_tensor_names_key_and_files(ckpt):
    tensors = load_file(str(ckpt / SINGLE_FILE))
    del tensors["model.layers.1.self_attn.k_proj.bias"]
    save_file(tensors, str(ckpt / SINGLE_FILE), metadata={"format": "pt"})
    with pytest.raises(CheckpointError) as err:
        load_hf(ckpt)
    assert "'model.layers.1.self_attn.k_proj.bias' is missing" in str(err.value)
    assert SINGLE_FILE in str(err.value)


def test_shape_mismatch_names_file_key_and_shapes(ckpt):
    config = read_config(ckpt)
    config["intermediate_size"] = 50  # the saved MLP has 56
    write_config(ckpt, config)
    with pytest.raises(CheckpointError) as err:
        load_hf(ckpt)
    msg = str(err.value)
    assert SINGLE_FILE in msg and "'model.layers.0.mlp.gate_proj.weight'" in msg
    assert "(56, 40)" in msg and "(50, 40)" in msg


def test_fewer_layers_in_config_than_weights(ckpt):
    config = read_config(ckpt)
    config["num_hidden_layers"] = 1
    config.pop("layer_types", None)  # else transformers itself rejects the config
    write_config(ckpt, config)
    with pytest.raises(CheckpointError, match=r"model\.layers\.1\..*num_hidden_layers"):
        load_hf(ckpt)


def test_corrupt_header_names_file(ckpt):
    data = bytearray((ckpt / SINGLE_FILE).read_bytes())
    data[8:40] = b"\xff" * 32  # the JSON header starts after the 8-byte length
    (ckpt / SINGLE_FILE).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: unreadable safetensors"):
        load_hf(ckpt)


def test_index_naming_absent_shard(ckpt):
    names = list(load_file(str(ckpt / SINGLE_FILE)))
    (ckpt / SINGLE_FILE).rename(ckpt / "model-00001-of-00002.safetensors")
    weight_map = dict.fromkeys(names, "model-00001-of-00002.safetensors")
    weight_map["model.norm.weight"] = "model-00002-of-00002.safetensors"
    (ckpt / INDEX_FILE).write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(CheckpointError, match=r"model-00002-of-00002\.safetensors: .*not found"):
        load_hf(ckpt)


def test_tokenizer_without_eos_is_rejected(tmp_path):
    tok = make_tokenizer(tmp_path, eos=False)
    with pytest.raises(CheckpointError, match="no end-of-sequence token"):
        special_ids(tok, tmp_path)


def test_tokenizer_without_pad_pads_with_eos(tmp_path, caplog):
    tok = make_tokenizer(tmp_path, pad=False)
    with caplog.at_level(logging.WARNING):
        ids = special_ids(load_tokenizer(tmp_path), tmp_path)
    assert ids.pad_id == tok.eos_token_id == ids.eos_ids[0]
    assert "no pad token" in caplog.text


def test_generation_config_eos_ids_come_first(tmp_path):
    tok = make_tokenizer(tmp_path)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [4, 3]}))
    ids = special_ids(tok, tmp_path)
    assert ids.eos_ids == (4, 3, tok.eos_token_id)
    assert ids.pad_id == tok.pad_token_id


def test_chat_without_template_is_rejected(tmp_path):
    tok = make_tokenizer(tmp_path, chat=False)
    assert encode_prompt(tok, "the cat", chat=False) == tok.encode("the cat")
    with pytest.raises(CheckpointError, match="no chat template"):
        encode_prompt(tok, "the cat", chat=True)


def test_missing_tokenizer_files(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CheckpointError, match="could not load a tokenizer"):
        load_tokenizer(tmp_path)
