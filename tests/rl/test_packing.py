"""Packed GRPO rows (`memr1.rl.packing`): one row a group scores every reply exactly as its own
(prompt, reply) row does, values and gradients, on ragged prompts and replies."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from memr1.models.config import get_size
from memr1.models.transformer import init_model
from memr1.rl import logprobs, packing

CFG = get_size(
    "tiny", vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=48,
    max_position=64,
)  # fmt: skip
G, P, R = 3, 8, 8
PROMPTS = [5, 1, 7]  # a one-token prompt too
REPLIES = [[4, 1, 0], [3, 6, 2], [1, 8, 3]]  # a reply of one token, an empty one, a full one


def row_batch(seed: int = 0) -> dict[str, np.ndarray]:
    """Row layout as `batches.pack_rollout` builds it: left-padded prompts, right-padded replies."""
    rng = np.random.default_rng(seed)
    rows = G * len(PROMPTS)
    tokens = rng.integers(1, CFG.vocab_size, (rows, P + R)).astype(np.int32)
    valid = np.zeros((rows, P + R), bool)
    reply = np.zeros((rows, P + R), bool)
    for n, p in enumerate(PROMPTS):
        tokens[n * G : (n + 1) * G, :P] = tokens[n * G, :P]
        for j, r in enumerate(REPLIES[n]):
            valid[n * G + j, P - p : P + r] = True
            reply[n * G + j, P : P + r] = True
    return {
        "tokens": tokens,
        "valid": valid,
        "prompt_mask": valid[:, :P].copy(),
        "response_mask": reply,
        "advantages": rng.normal(size=rows).astype(np.float32),
        "old_logp": np.where(reply, rng.normal(size=reply.shape), 0.0).astype(np.float32),
    }


def packed(batch, width: int = 32, reply_width: int = 16) -> dict:
    return packing.pack_groups(batch, G, width, reply_width)


def as_reply_columns(row_values, batch) -> np.ndarray:
    """Row-layout [rows, T] values in the packed reply columns [N, L] (the replies in order)."""
    out = np.zeros((len(PROMPTS), 16), np.float32)
    reply = batch["response_mask"]
    for n in range(len(PROMPTS)):
        vals = np.concatenate(
            [np.asarray(row_values)[n * G + j][reply[n * G + j]] for j in range(G)]
        )
        out[n, : len(vals)] = vals
    return out


def test_the_packed_layout_of_ragged_groups():
    batch = row_batch()
    out = packed(batch)
    assert packing.packed_needs(batch, G) == (7 + 12, 12)
    # Group 1: a one-token prompt, then replies of 3, 6 and 2 tokens.
    seg = out["segments"][1]
    np.testing.assert_array_equal(seg[:12], [0] + [1] * 3 + [2] * 6 + [3] * 2)
    assert (seg[12:] == -1).all() and out["valid"][1].sum() == 12
    np.testing.assert_array_equal(out["positions"][1, :12], [0, 1, 2, 3, 1, 2, 3, 4, 5, 6, 1, 2])
    # Each reply's first token is predicted by the prompt's last column, the others by the one
    # before; reply columns hold the replies back to back.
    np.testing.assert_array_equal(
        out["predictor_index"][1, :11], [0, 1, 2, 0, 4, 5, 6, 7, 8, 0, 10]
    )
    np.testing.assert_array_equal(out["target_index"][1, :11], np.arange(1, 12))
    np.testing.assert_array_equal(out["reply_segment"][0, :6], [1, 1, 1, 1, 2, 0])
    assert out["response_mask"].sum() == sum(map(sum, REPLIES))
    np.testing.assert_array_equal(out["advantages"][0, :5], batch["advantages"][[0] * 4 + [1]])
    np.testing.assert_array_equal(out["old_logp"], as_reply_columns(batch["old_logp"], batch))


def test_pack_groups_refuses_what_it_cannot_pack():
    batch = row_batch()
    with pytest.raises(ValueError, match="width=16"):
        packed(batch, width=16)
    with pytest.raises(ValueError, match="groups of 4"):
        packing.pack_groups(batch, 4, 32, 16)
    empty = {k: v.copy() for k, v in batch.items()}
    empty["valid"][:G, :P] = False
    with pytest.raises(ValueError, match="group 0 has an empty prompt"):
        packed(empty)


def test_packed_logprobs_and_gradients_equal_each_row_whole():
    graphdef, params = init_model(CFG, seed=1)
    batch = row_batch()
    mb = {k: jnp.asarray(v) for k, v in packed(batch).items()}

    def whole(p):
        logp, ent = logprobs.sequence_logprobs(
            graphdef, p, batch["tokens"], batch["valid"], chunk=4
        )
        m = batch["response_mask"]
        return (logp * m).sum(), (logp, ent)

    def pack(p):
        logp, ent = logprobs.packed_logprobs(graphdef, p, mb, chunk=4)
        return (logp * mb["response_mask"]).sum(), (logp, ent)

    (l1, (want, want_ent)), g1 = jax.value_and_grad(whole, has_aux=True)(params)
    (l2, (got, got_ent)), g2 = jax.value_and_grad(pack, has_aux=True)(params)
    np.testing.assert_allclose(np.asarray(got), as_reply_columns(want, batch), atol=2e-6)
    np.testing.assert_allclose(np.asarray(got_ent), as_reply_columns(want_ent, batch), atol=2e-6)
    assert float(l2) == pytest.approx(float(l1), abs=1e-5)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=2e-6)
