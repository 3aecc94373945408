"""Training batches padded with an id outside the vocabulary (some tokenizers add a pad token
past vocab_size) train exactly as batches padded in it; a real token outside it is refused."""

from __future__ import annotations

import numpy as np
import pytest

from memr1.env.policy import Completion
from memr1.models.vocab import OutOfVocabError
from memr1.train import batches, sft, update
from tests.train import tiny

V = tiny.CFG.vocab_size
OUTSIDE = (V, V + 10**6)


def _completions(seed: int = 0) -> tuple[list[list[Completion]], np.ndarray]:
    """Two groups of four completions with prompts and responses of different lengths."""
    rng = np.random.default_rng(seed)
    groups = []
    for _ in range(2):
        prompt = rng.integers(1, V, int(rng.integers(3, 9))).astype(np.int32)
        group = []
        for _ in range(4):
            ids = rng.integers(1, V, int(rng.integers(2, 7))).astype(np.int32)
            logp = -rng.random(len(ids)).astype(np.float32)
            group.append(Completion("", prompt, ids, logp, finished=True))
        groups.append(group)
    return groups, np.asarray([[1, 0, 0, 1], [0, 1, 1, 1]], np.float32)


def _same_update(step, s0, ref_batch, batch, *extra):
    s_ref, m_ref = step(tiny.copy_tree(s0), ref_batch, *extra)
    s_out, m_out = step(tiny.copy_tree(s0), batch, *extra)
    assert np.isfinite(float(m_out["loss"])), m_out
    assert float(m_out["loss"]) == float(m_ref["loss"])
    assert tiny.leaves_equal(s_out.params, s_ref.params)


@pytest.mark.parametrize("pad", OUTSIDE)
def test_grpo_update_on_a_rollout_padded_outside_the_vocabulary(policy, reference, grpo_step, pad):
    setup, s0 = policy
    groups, rewards = _completions()
    ref_batch, _ = batches.pack_rollout(groups, rewards, response_width=8, pad_id=0)
    batch, _ = batches.pack_rollout(groups, rewards, response_width=8, pad_id=pad)
    assert (batch["tokens"][~batch["valid"]] == pad).all()
    fields = ("tokens", "valid", "response_mask", "advantages", "old_logp")
    pick = lambda b: update.shard_batch(setup, {k: b[k] for k in fields})
    _same_update(grpo_step, s0, pick(ref_batch), pick(batch), reference)


@pytest.mark.parametrize("pad", OUTSIDE)
def test_sft_update_on_a_batch_padded_outside_the_vocabulary(policy, sft_step, pad):
    setup, s0 = policy
    rng = np.random.default_rng(1)
    prompts = [rng.integers(1, V, int(rng.integers(2, 6))).tolist() for _ in range(tiny.ROWS)]
    targets = [rng.integers(1, V, int(rng.integers(2, 9))).tolist() for _ in range(tiny.ROWS)]
    ref_batch = sft.sft_batch(prompts, targets, tiny.LENGTH, pad_id=0)
    batch = sft.sft_batch(prompts, targets, tiny.LENGTH, pad_id=pad)
    assert (batch["tokens"][~batch["valid"]] == pad).all()
    _same_update(sft_step, s0, ref_batch, batch)


def test_a_real_token_outside_the_vocabulary_is_refused_before_the_update(policy):
    setup, _ = policy
    batch = tiny.sft_batch()
    batch["tokens"][~batch["valid"]] = V + 5  # padding: accepted
    update.shard_batch(setup, batch)
    row, col = np.argwhere(batch["valid"])[3]
    batch["tokens"][row, col] = V
    with pytest.raises(OutOfVocabError, match=f"row {row} position {col} holds token id {V}"):
        update.shard_batch(setup, batch)
