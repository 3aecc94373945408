"""Smoke test of the teacher builder with a real (random, tiny) TextPolicy from the command line.

A random model writes no usable op, so every turn's reply is rejected and the banks stay empty;
what is checked is that a real policy drives env.ingest end to end and the tuples are
written, linked and counted all the same.
"""

from __future__ import annotations

from configs import memr1 as memr1_config
from memr1.data.locomo import load_locomo
from memr1.models.tokenizer_train import train_bpe_tokenizer
from memr1.tuples import read_metadata, read_tuples
from memr1.tuples.cli import main
from tests.data.test_tuples import write_synth


def test_cli_teacher_builder_with_a_random_tiny_model(tmp_path, capsys):
    path = write_synth(tmp_path / "synth") / "test.json"
    texts = [t.text for c in load_locomo(path) for t in c.iter_turns()]
    train_bpe_tokenizer(texts, tmp_path / "tokenizer", vocab_size=400)
    out = tmp_path / "tuples"
    config = memr1_config.get_config("dataset=synthloco")
    config.data.path = str(path)
    config.tuples.update(builder="teacher", window=-1)
    config.tokenizer_dir = str(tmp_path / "tokenizer")  # a random tiny model with this tokenizer
    # Short prompts and replies keep the sampler's compiled shapes few and small: the compact
    # style's manager prompts (~300 tokens) fit 512 whole (an over-budget one is an error).
    config.agents.update(style="compact", batch_size=4, manager_max_new_tokens=4)
    config.agents.max_prompt_tokens = 512
    code = main(config, out=str(out))
    printed = capsys.readouterr()
    assert code == 0, printed.err
    manager = read_tuples(out, "manager")
    assert manager and all(m.builder == "teacher:random-tiny" and m.has_qa for m in manager)
    assert all(not m.bank and not m.retrieved for m in manager)
    answers = int(printed.out.split("answer tuples: ")[1].split()[0])
    assert answers == len(read_tuples(out, "answer")) > 0
    assert read_metadata(out)["build"]["teacher"] == "random tiny"
