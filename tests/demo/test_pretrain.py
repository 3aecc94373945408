"""Copy pretraining (experiments/cpu_demo/pretrain.py): its rows, its accuracy, its stage."""

from __future__ import annotations

import json

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from experiments.cpu_demo import pretrain, sft_data
from memr1.models import transformer
from memr1.models.config import get_size
from memr1.train.sft import sft_batch

MICRO = get_size(
    "tiny", vocab_size=40, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, head_dim=16,
    d_ff=64, max_position=64,
)  # fmt: skip


def test_copy_rows_are_a_marked_prompt_then_its_copy():
    rows = pretrain.copy_rows(60, (3, 7), (5, 20), 1, 2, np.random.default_rng(0))
    assert len(rows) == 60
    for prompt, target in rows:
        assert prompt == [1] + target + [2]
        assert 3 <= len(target) <= 7 and all(5 <= t < 20 for t in target)
    assert {len(t) for _, t in rows} == {3, 4, 5, 6, 7}  # both ends of the range are drawn
    again = pretrain.copy_rows(60, (3, 7), (5, 20), 1, 2, np.random.default_rng(0))
    assert again == rows  # a function of its random stream


@pytest.mark.parametrize(
    "lengths, ids, markers, message",
    [
        ((0, 4), (5, 20), (1, 2), "need 1 <= min <= max"),
        ((5, 4), (5, 20), (1, 2), "need 1 <= min <= max"),
        ((2, 4), (9, 9), (1, 2), "an empty range"),
        ((2, 4), (2, 20), (1, 2), "markers 1, 2 fall inside"),
        ((2, 4), (3, 20), (1, 19), "markers 1, 19 fall inside"),
    ],
)
def test_copy_rows_refuse_what_holds_no_copy_task(lengths, ids, markers, message):
    with pytest.raises(ValueError, match=message):
        pretrain.copy_rows(4, lengths, ids, *markers, np.random.default_rng(0))


def test_marked_rows_hide_the_copy_among_quoted_strings_behind_its_mark():
    head, quote = 3, 4
    rows = pretrain.copy_rows(
        200, (2, 5), (5, 20), 1, 2, np.random.default_rng(0), spans=(1, 4), marks=(head, quote)
    )
    places, counts = set(), set()
    for prompt, target in rows:
        assert prompt[0] == 1 and prompt[-1] == 2 and prompt.count(head) == 1
        x = target[1:-1]
        assert target == [quote, *x, quote] and 2 <= len(x) <= 5
        at = prompt.index(head)
        assert prompt[at + 1 : at + 3 + len(x)] == [quote, *x, quote]
        # Every string is quoted: the copy's first token follows a quote like every other's.
        assert prompt.count(quote) % 2 == 0
        n = prompt.count(quote) // 2
        counts.add(n)
        places.add(sum(1 for i in range(at) if prompt[i] == quote) // 2)  # strings before it
        assert all(5 <= t < 20 for t in prompt if t not in (1, 2, head, quote))
    assert counts == {1, 2, 3, 4} and places == {0, 1, 2, 3}  # anywhere among 1-4 strings


@pytest.mark.parametrize(
    "spans, marks, message",
    [
        ((1, 3), None, "several strings need marks"),
        ((0, 3), (3, 4), "spans .* need 1 <= min <= max"),
        ((1, 3), (3, 9), "markers 1, 2, 3, 9 fall inside"),
    ],
)
def test_marked_rows_refuse_what_holds_no_marked_copy(spans, marks, message):
    with pytest.raises(ValueError, match=message):
        pretrain.copy_rows(
            4, (2, 4), (5, 20), 1, 2, np.random.default_rng(0), spans=spans, marks=marks
        )


def _greedy(graphdef, params, prompt: list[int], n: int) -> list[int]:
    """The model's own greedy continuation of ``prompt``, one unpadded forward per token."""
    from memr1.models import masks

    seq = list(prompt)
    for _ in range(n):
        tokens = jnp.asarray([seq])
        valid = jnp.ones_like(tokens, bool)
        h, _ = transformer.forward(
            graphdef, params, tokens, masks.positions_from_valid(valid), masks.causal_mask(valid)
        )
        seq.append(int(jnp.argmax(transformer.logits_fn(graphdef, params, h[:, -1:])[0, -1])))
    return seq[len(prompt) :]


def test_copy_accuracy_is_one_on_the_models_own_greedy_targets_and_counts_a_miss():
    graphdef, params = transformer.init_model(MICRO, seed=3)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(3, 40, size=n).tolist() for n in (3, 5, 4)]
    targets = [_greedy(graphdef, params, p, n) for p, n in zip(prompts, (4, 2, 3))]
    batch = sft_batch(prompts, targets, 12)  # padded on the right: the mask must skip it
    assert pretrain.copy_accuracy(graphdef, params, batch) == (1.0, 1.0)
    missed = [list(t) for t in targets]
    missed[1][-1] = (missed[1][-1] + 1) % 40  # the last token: no later prediction sees it
    token_acc, row_acc = pretrain.copy_accuracy(graphdef, params, sft_batch(prompts, missed, 12))
    assert token_acc == pytest.approx(8 / 9) and row_acc == pytest.approx(2 / 3)


def test_first_token_accuracy_counts_only_the_first_copied_token():
    graphdef, params = transformer.init_model(MICRO, seed=3)
    rng = np.random.default_rng(2)
    prompts = [rng.integers(3, 40, size=n).tolist() for n in (3, 5, 4)]
    targets = [_greedy(graphdef, params, p, 3) for p in prompts]
    first = pretrain.first_copied(list(zip(prompts, targets)), marked=False)
    assert first.tolist() == [3, 5, 4]
    batch = sft_batch(prompts, targets, 12)
    assert pretrain.copy_accuracy(graphdef, params, batch, first) == (1.0, 1.0, 1.0)
    missed = [list(t) for t in targets]
    missed[0][0] = (missed[0][0] + 1) % 40  # row 0's first token; its later ones may follow
    acc = pretrain.copy_accuracy(graphdef, params, sft_batch(prompts, missed, 12), first)
    assert acc[2] == pytest.approx(2 / 3) and acc[1] == pytest.approx(2 / 3)
    shifted = pretrain.first_copied(list(zip(prompts, targets)), marked=True)
    assert (shifted == first + 1).all()  # after the target's opening quote


def _section(**kw) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {
            "steps": 150,
            "batch_size": 32,
            "lr": 1e-2,
            "warmup_steps": 10,
            "tokens": (2, 3),
            "spans": (1, 1),
            **kw,
        }
    )


def test_rehearsal_rows_are_marked_copy_rows_of_their_own_stream():
    section = _section(tokens=(2, 4), spans=(1, 3))
    task = {"ids": (4, 37), "bos": 0, "sep": 39, "marks": (37, 38)}
    rows = pretrain.rehearsal_rows(50, section, **task, seed=5)
    drawn = pretrain.copy_rows(
        50, (2, 4), (4, 37), 0, 39, np.random.default_rng([5, 3]), spans=(1, 3), marks=(37, 38)
    )
    assert rows == [{"prompt_ids": p, "target_ids": t} for p, t in drawn]
    for row in rows:  # the marked string, quoted, is the target
        prompt, target = row["prompt_ids"], row["target_ids"]
        at = prompt.index(37)
        assert prompt[at + 1 : at + 1 + len(target)] == target and target[0] == target[-1] == 38
    training = pretrain.copy_rows(
        50, (2, 4), (4, 37), 0, 39, np.random.default_rng([5, 1]), spans=(1, 3), marks=(37, 38)
    )
    assert [r["prompt_ids"] for r in rows] != [p for p, _ in training]  # not pretraining's rows


def test_a_negative_rehearsal_row_count_is_refused_naming_the_setting(tmp_path):
    from experiments.cpu_demo.config import get_config

    config = get_config("quick")
    with config.unlocked():
        config.sft.rehearsal_rows = -1
    with pytest.raises(ValueError, match=r"sft.rehearsal_rows -1: need a count"):
        sft_data.rehearsed(config, 0, tmp_path / "sft.jsonl", tmp_path / "base", tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_pretraining_learns_to_copy_and_reports_held_out_accuracy():
    _, params = transformer.init_model(MICRO, seed=0)
    lines = []
    out, history = pretrain.pretrain(
        MICRO, params, _section(), ids=(2, 39), bos=0, sep=39, seed=0, log=lines.append, every=50
    )
    assert [h["step"] for h in history] == [50, 100, 150] and len(lines) == 3
    assert all(np.isfinite(h["loss"]) for h in history)
    # Chance is 1/37 a token; a two-layer model copying 2-3 tokens gets most of them.
    assert history[-1]["token_acc"] > max(0.6, history[0]["token_acc"])
    assert history[-1]["row_acc"] <= history[-1]["token_acc"]
    held_out = pretrain.copy_rows(64, (2, 3), (2, 39), 0, 39, np.random.default_rng([0, 2]))
    graphdef, _ = transformer.init_model(MICRO, seed=0)
    batch = sft_batch([p for p, _ in held_out], [t for _, t in held_out], 8)
    assert pretrain.copy_accuracy(graphdef, out, batch)[0] > 0.6


@pytest.mark.slow
def test_pretraining_learns_to_find_the_marked_string():
    _, params = transformer.init_model(MICRO, seed=0)
    section = _section(steps=300, spans=(1, 2))
    _, history = pretrain.pretrain(
        MICRO, params, section, ids=(4, 39), bos=0, sep=39, marks=(2, 3), seed=0, every=50
    )
    # The first copied token follows a quote, as every string's first token does: the model has
    # to learn where the strings start (chance 1/35); which one is marked it learns later (the
    # demo's 4-layer backbone: 0.99 with 1-4 strings a prompt, docs/demo.md).
    assert history[0]["first_acc"] < 0.05 and history[-1]["first_acc"] > 0.2


def test_a_non_finite_loss_stops_pretraining_naming_the_step():
    import jax

    _, params = transformer.init_model(MICRO, seed=0)
    broken = jax.tree.map(lambda x: x * jnp.nan, params)
    with pytest.raises(RuntimeError, match="copy pretraining: loss nan at step 1"):
        pretrain.pretrain(MICRO, broken, _section(steps=3), ids=(2, 39), bos=0, sep=39, seed=0)


def _quick_base(tmp_path):
    """The quick demo's config and seed 0's run, built up to its copy-pretrained base."""
    from experiments.cpu_demo.config import get_config
    from experiments.cpu_demo.run import SeedRun

    config = get_config("quick")
    run = SeedRun(config, 0, tmp_path, algo="grpo", log=print)
    for stage in (run.make_data, run.make_tuples, run.make_careful_tuples, run.make_traces):
        stage()
    run.make_tokenizer()
    run.make_base()
    return config, run


@pytest.mark.slow
def test_the_demo_base_is_copy_pretrained_and_refuses_other_settings(tmp_path):
    from experiments.cpu_demo.config import get_config
    from experiments.cpu_demo.run import SeedRun

    config, run = _quick_base(tmp_path)
    history = json.loads((run.base / "pretrain.json").read_text())
    assert [h["step"] for h in history] == [config.pretrain.steps]
    assert (run.base / "config.json").is_file() and "pretrain" in run.sft_settings()
    weights = sorted(p.name for p in run.base.iterdir())
    other = get_config("quick")
    other.unlock()
    other.pretrain.lr = 3e-3
    with pytest.raises(ValueError, match=r"pretrain.lr: built 0.001, config 0.003"):
        SeedRun(other, 0, tmp_path, algo="grpo", log=print).make_base()
    assert sorted(p.name for p in run.base.iterdir()) == weights  # left as it was
    larger = get_config("quick")
    with larger.unlocked():
        larger.vocab_size = 1024  # another tokenizer: it and the base trained on it are refused
    bigger = SeedRun(larger, 0, tmp_path, algo="grpo", log=print)
    for stage in (bigger.make_tokenizer, bigger.make_base):
        with pytest.raises(ValueError, match=r"vocab_size: built 512, config 1024"):
            stage()
    off = get_config("quick")
    with off.unlocked():
        off.pretrain.steps = 0  # no pretraining: a random base, which records its tokenizer
    plain = SeedRun(off, 0, tmp_path, algo="grpo", log=print)
    assert plain.base_settings() == {"tokenizer": run.tokenizer_settings()}
    assert "pretrain" not in plain.sft_settings()
    with pytest.raises(ValueError, match=r"sft.rehearsal_rows 8: copy pretraining is off"):
        sft_data.rehearsed(off, 0, run.sft_data, run.base, run.sft)


@pytest.mark.slow
def test_the_demo_sft_reads_its_traces_then_the_copy_task_rehearsed(tmp_path):
    from memr1.env import load
    from memr1.train.sft import read_sft_pairs

    config, run = _quick_base(tmp_path)
    run.sft.mkdir()
    path = sft_data.rehearsed(config, 0, run.sft_data, run.base, run.sft)
    traces_text = run.sft_data.read_text()
    assert path.parent == run.sft and path.read_text().startswith(traces_text)
    added = [json.loads(line) for line in path.read_text()[len(traces_text) :].splitlines()]
    assert len(added) == config.sft.rehearsal_rows == 8
    backbone = load.load_backbone(hf_dir=str(run.base))
    policy = load.make_policy(backbone, backbone.params)
    pairs = read_sft_pairs(str(path), policy)
    task = sft_data.copy_task(config, backbone.tokenizer)
    assert [(p, t) for p, t, _ in pairs[-8:]] == [(r["prompt_ids"], r["target_ids"]) for r in added]
    for _, target, _ in pairs[-8:]:  # the quoted copy: no EOS, the copied ids only
        assert target[0] == target[-1] == task["marks"][1]
        assert all(task["ids"][0] <= i < task["ids"][1] for i in target[1:-1])
    longest = max(len(p) + len(t) for p, t, _ in pairs)
    assert longest <= sft_data.longest_row(path, run.base) < longest + 16
    again = sft_data.rehearsed(config, 0, run.sft_data, run.base, run.sft)
    assert again.read_text() == path.read_text()  # written once, then reused
