"""Weighted SFT tokens (memr1.train.sft): the loss is sum(w · NLL) / sum(w) over the batch's
trained tokens, exact under gradient accumulation, the unweighted loss bit for bit at w = 1; a
row's target_weights are character spans mapped onto its tokens."""

from __future__ import annotations

import json
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from memr1.models.tokenizer_train import train_bpe_tokenizer
from memr1.rl.logprobs import sequence_logprobs
from memr1.train import sft
from tests.train import tiny


def _weights(batch, seed=3):
    rng = np.random.default_rng(seed)
    w = rng.uniform(0.0, 5.0, batch["loss_mask"].shape).astype(np.float32)
    return {**batch, "loss_weight": np.where(batch["loss_mask"], w, 0.0).astype(np.float32)}


def test_the_weighted_loss_is_the_weighted_mean_nll_of_the_trained_tokens(policy):
    setup, s0 = policy
    batch = _weights(tiny.sft_batch(step=2))
    grads = sft.make_sft_step(setup, tiny.sft_config(n_micro=1), grads_only=True)
    loss, _, _ = grads(s0, batch)
    logp, _ = sequence_logprobs(
        setup.graphdef, s0.params, batch["tokens"], batch["valid"], chunk=tiny.CHUNK
    )
    w = batch["loss_weight"] * (batch["loss_mask"] & batch["valid"])
    expected = float((-np.asarray(logp) * w).sum() / w.sum())
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    plain = float(sft.eval_sft_loss(setup, s0.params, batch, chunk=tiny.CHUNK))
    assert abs(float(loss) - plain) > 1e-3  # the weights change the objective


def test_weighted_accumulation_equals_one_full_batch(policy):
    setup, s0 = policy
    batch = _weights(tiny.sft_batch(step=1))
    full = sft.make_sft_step(setup, tiny.sft_config(n_micro=1), grads_only=True)
    micro = sft.make_sft_step(setup, tiny.sft_config(n_micro=4), grads_only=True)
    loss_full, grads_full, _ = full(s0, batch)
    loss_micro, grads_micro, _ = micro(s0, batch)
    assert float(loss_micro) == pytest.approx(float(loss_full), rel=1e-6)
    for g_full, g_micro in zip(jax.tree.leaves(grads_full), jax.tree.leaves(grads_micro)):
        np.testing.assert_allclose(np.asarray(g_micro), np.asarray(g_full), rtol=1e-4, atol=1e-7)


def test_unit_weights_train_exactly_as_no_weights(policy):
    setup, s0 = policy
    batch = tiny.sft_batch(step=3)
    ones = {**batch, "loss_weight": batch["loss_mask"].astype(np.float32)}
    grads = sft.make_sft_step(setup, tiny.sft_config(n_micro=2), grads_only=True)
    loss_a, grads_a, _ = grads(s0, batch)
    loss_b, grads_b, _ = grads(s0, ones)
    assert float(loss_a) == float(loss_b)
    assert tiny.leaves_equal(grads_a, grads_b)


def test_sft_batch_weights_its_rows_targets():
    b = sft.sft_batch([[5, 6], [7]], [[8, 9], [3, 4, 2]], length=6, weights=[[2.0, 0.5], None])
    np.testing.assert_array_equal(b["loss_weight"][0], [0, 0, 2.0, 0.5, 0, 0])
    np.testing.assert_array_equal(b["loss_weight"][1], [0, 1, 1, 1, 0, 0])
    ones = sft.sft_batch([[5]], [[8]], length=4, weights=[None])["loss_weight"]
    np.testing.assert_array_equal(ones, [[0, 1, 0, 0]])  # the field whatever the rows hold
    assert "loss_weight" not in sft.sft_batch([[5]], [[8]], length=4)
    with pytest.raises(ValueError, match="SFT row 0: 1 weights for 2 target tokens"):
        sft.sft_batch([[5]], [[8, 9]], length=4, weights=[[1.0]])


@pytest.fixture(scope="module")
def policy_io(tmp_path_factory):
    texts = ['{"memory": [{"event": "DELETE", "id": "0", "text": ""}]}', "Ana lives in Rome."] * 20
    tok = train_bpe_tokenizer(texts, tmp_path_factory.mktemp("tok"), vocab_size=300)
    return SimpleNamespace(
        tokenizer=tok,
        render=lambda messages: messages[-1]["content"],
        encode=lambda text: (np.asarray(tok.encode(text, add_special_tokens=False)), None),
        eos_ids=[tok.eos_token_id],
        max_prompt_tokens=4096,
    )


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_target_weights_spans_weigh_the_tokens_they_overlap(policy_io, tmp_path):
    target = '{"memory": [{"event": "DELETE", "id": "0", "text": ""}]}'
    start = target.index("DELETE")
    rows = [
        {"messages": [{"role": "user", "content": "Ana"}], "target": target},
        {
            "messages": [{"role": "user", "content": "Ana"}],
            "target": target,
            "target_weights": [[start, start + len("DELETE"), 8.0]],
        },
    ]
    (p0, t0, w0), (p1, t1, w1) = sft.read_sft_pairs(_write(tmp_path / "a.jsonl", rows), policy_io)
    assert w0 is None and (p0, t0) == (p1, t1) and len(w1) == len(t1)
    assert t1[-1] == policy_io.eos_ids[0] and w1[-1] == 1.0
    tok = policy_io.tokenizer
    enc = tok(target, add_special_tokens=False, return_offsets_mapping=True)
    heavy = [target[a:b] for (a, b), w in zip(enc["offset_mapping"], w1) if w == 8.0]
    assert "".join(heavy).strip(' "') == "DELETE"
    assert sorted(set(w1)) == [1.0, 8.0]


@pytest.mark.parametrize(
    "spans, what",
    [
        ([[5, 500, 2.0]], "not inside"),
        ([[3, 3, 2.0]], "not inside"),
        ([[0, 4, -1.0]], "weight >= 0"),
        ([[0, 4, float("nan")]], "finite"),
        ([[0, 4]], r"\[start, end, weight\]"),
        ("DELETE", r"\[start, end, weight\]"),
    ],
)
def test_bad_target_weights_name_the_file_and_line(policy_io, tmp_path, spans, what):
    rows = [{"messages": [{"role": "user", "content": "Ana"}], "target": "Ana lives in Rome."}]
    rows.append({**rows[0], "target_weights": spans})
    path = _write(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ValueError, match=f"bad.jsonl: line 2: target_weights.*{what}"):
        sft.read_sft_pairs(path, policy_io)


def _loop_params(tmp_path, pairs, name, fields=None):
    from memr1.train import loop, mesh, state
    from memr1.train.metrics_log import MetricsWriter

    setup, s0 = state.create_train_state(
        mesh.build_mesh(1, 1, 1, model_cfgs=[tiny.CFG]), tiny.CFG, tiny.optim(), seed=0
    )
    sft_step = sft.make_sft_step(setup, tiny.sft_config(n_micro=1))

    def step(s, batch):
        if fields is not None:
            fields.append(sorted(batch))
        return sft_step(s, batch)

    cfg = loop.LoopConfig.from_config(tiny.config("runlocal,algo=sft", steps=3, batch_size=4))
    with MetricsWriter(tmp_path / name, tensorboard=False) as writer:
        final = loop.run_sft(setup, s0, step, pairs, cfg=cfg, length=32, pad_id=0, writer=writer)
    return final.params


def test_the_sft_loop_trains_on_weighted_triples(tmp_path):
    rng = np.random.default_rng(0)
    pairs = [([1, 2, 3], rng.integers(5, 60, size=int(k)).tolist()) for k in (3, 5, 7, 9) * 2]
    plain = _loop_params(tmp_path, pairs, "plain")
    unweighted = _loop_params(tmp_path, [(p, t, None) for p, t in pairs], "none")
    assert tiny.leaves_equal(plain, unweighted)  # (prompt, target, None) is the plain pair
    heavy = [(p, t, [4.0] + [1.0] * (len(t) - 1)) for p, t in pairs]
    weighted = _loop_params(tmp_path, heavy, "heavy")
    assert not tiny.leaves_equal(plain, weighted)
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(weighted))


def test_every_step_has_loss_weight_when_any_row_is_weighted(tmp_path):
    # Weighted rows first, plain rows after: batches of 4 drawn from them mix or hold none,
    # and still every step feeds the same fields (one program; one pytree on every process).
    rng = np.random.default_rng(1)
    pairs = [([1, 2], rng.integers(5, 60, size=4).tolist()) for _ in range(8)]
    mixed = [(p, t, [3.0] * len(t) if i < 2 else None) for i, (p, t) in enumerate(pairs)]
    fields = []
    _loop_params(tmp_path, mixed, "mixed", fields)
    assert len(fields) == 3 and all("loss_weight" in f for f in fields), fields
    fields = []
    _loop_params(tmp_path, pairs, "plain", fields)
    assert all("loss_weight" not in f for f in fields), fields


def test_token_id_rows_are_taken_as_they_are(policy_io, tmp_path):
    rows = [
        {"messages": [{"role": "user", "content": "Ana"}], "target": "Ana lives in Rome."},
        {"prompt_ids": [5, 7, 9], "target_ids": [7, 9]},
    ]
    (p0, t0, _), (p1, t1, w1) = sft.read_sft_pairs(_write(tmp_path / "a.jsonl", rows), policy_io)
    assert t0[-1] == policy_io.eos_ids[0]  # a text row's target ends with the EOS
    assert (p1, t1, w1) == ([5, 7, 9], [7, 9], None)  # an id row gets none, no template


@pytest.mark.parametrize(
    "row, what",
    [
        ({"prompt_ids": [5], "target_ids": []}, "no target ids"),
        ({"prompt_ids": [5], "target_ids": [297]}, "297 is outside the tokenizer's 0..296"),
        ({"prompt_ids": [-1], "target_ids": [5]}, "-1 is outside the tokenizer's 0..296"),
        ({"prompt_ids": [5], "target_ids": [1.5]}, "lists of token ids"),
        ({"prompt_ids": "5 6", "target_ids": [5]}, "lists of token ids"),
        ({"prompt_ids": [5]}, "not a"),
        ({"prompt_ids": [5] * 40, "target_ids": [5]}, "40 prompt ids, over"),
    ],
)
def test_bad_token_id_rows_name_the_file_and_line(policy_io, tmp_path, row, what):
    rows = [{"prompt_ids": [5, 6], "target_ids": [7]}, row]
    path = _write(tmp_path / "bad.jsonl", rows)
    limited = SimpleNamespace(**{**vars(policy_io), "max_prompt_tokens": 32})
    assert len(limited.tokenizer) == 297  # the BPE's merges ran out below vocab_size
    with pytest.raises(ValueError, match=f"bad.jsonl: line 2: .*{what}"):
        sft.read_sft_pairs(path, limited)
