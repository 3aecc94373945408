"""The packed GRPO mask, its block mask and the kernels' walk tables: one definition.

`masks.packed_allowed` is the mask of packed rows (`memr1.rl.packing`); the dense mask is it,
and `masks.block_live` (what the kernels skip by) must mark exactly the blocks where the dense
mask has a True, on ragged packed layouts at several block sizes, and at least those on any
segment ids (the kernels mask inside a block, so a superset is still right).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from memr1.models import masks
from memr1.models.kernels import costs, flash_gpu


def packed_row(width: int, prompt: int, replies) -> np.ndarray:
    """Segment ids of one packed row: the prompt, the replies back to back, then padding."""
    seg = np.full(width, -1, np.int32)
    seg[:prompt] = 0
    col = prompt
    for j, r in enumerate(replies):
        seg[col : col + r] = j + 1
        col += r
    assert col <= width
    return seg


def ragged_rows(seed: int, rows: int, width: int, group: int) -> np.ndarray:
    """Packed rows with random prompt and reply lengths (some replies empty), padded."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(rows):
        prompt = int(rng.integers(1, width // 2))
        replies = rng.integers(0, (width - prompt) // group + 1, group)
        out.append(packed_row(width, prompt, replies))
    return np.stack(out)


def _reference(seg: np.ndarray) -> np.ndarray:
    """The packed mask written out as loops over one row."""
    t = len(seg)
    out = np.zeros((t, t), bool)
    for q in range(t):
        for k in range(t):
            if seg[q] < 0:
                out[q, k] = k == q
            else:
                out[q, k] = k <= q and seg[k] >= 0 and seg[k] in (0, seg[q])
    return out


def _occupancy(dense: np.ndarray, block: int) -> np.ndarray:
    b, t, _ = dense.shape
    n = t // block
    return dense.reshape(b, n, block, n, block).any(axis=(2, 4))


def test_packed_mask_is_the_written_out_rule():
    seg = np.stack([packed_row(23, 5, [4, 0, 7, 2]), packed_row(23, 1, [1, 1, 1])])
    got = np.asarray(masks.packed_mask(jnp.asarray(seg)))
    for row in range(2):
        np.testing.assert_array_equal(got[row], _reference(seg[row]))


def test_padding_reads_only_itself_and_no_row_is_empty():
    seg = packed_row(16, 4, [3, 2])  # padding from column 9
    dense = np.asarray(masks.packed_mask(jnp.asarray(seg[None])))[0]
    assert dense.any(axis=-1).all()
    np.testing.assert_array_equal(dense[9:], np.eye(16, dtype=bool)[9:])
    # Reply 2 (columns 7-8) reads the prompt and itself, never reply 1 (columns 4-6).
    assert dense[8, :4].all() and dense[8, 7:9].all() and not dense[8, 4:7].any()
    assert not dense[4:7, 7:].any()


def test_packed_mask_object_is_the_dense_mask():
    seg = jnp.asarray(ragged_rows(0, 3, 40, 4))
    mask = masks.PackedMask(seg)
    assert mask.shape == (3, 40, 40)
    np.testing.assert_array_equal(mask.dense(), masks.packed_mask(seg))


@pytest.mark.parametrize("block", [1, 4, 8, 16])
@pytest.mark.parametrize("seed", range(4))
def test_block_mask_is_the_dense_masks_block_occupancy(block, seed):
    seg = ragged_rows(seed, rows=5, width=64, group=int(2 + seed))
    dense = np.asarray(masks.packed_mask(jnp.asarray(seg)))
    live = np.asarray(masks.block_live(jnp.asarray(seg), block))
    np.testing.assert_array_equal(live, _occupancy(dense, block))


def test_block_mask_covers_any_segment_ids():
    """Segments in any order (not a packed layout): every live block is marked."""
    rng = np.random.default_rng(5)
    seg = rng.integers(-1, 5, (6, 48)).astype(np.int32)
    dense = np.asarray(masks.packed_mask(jnp.asarray(seg)))
    live = np.asarray(masks.block_live(jnp.asarray(seg), 8))
    assert (live | ~_occupancy(dense, 8)).all()


def test_block_mask_needs_whole_blocks():
    with pytest.raises(ValueError, match="40 columns do not split into blocks of 16"):
        masks.block_live(jnp.zeros((1, 40), jnp.int32), 16)


def test_walk_tables_list_each_blocks_live_partners_first():
    seg = jnp.asarray(ragged_rows(1, 3, 64, 3))
    live = np.asarray(masks.block_live(seg, 8))
    tables = {k: np.asarray(v) for k, v in flash_gpu.block_tables(seg, 8).items()}
    for name, rows in (("kv", live), ("q", live.swapaxes(1, 2))):
        count, order = tables[f"{name}_count"], tables[f"{name}_order"]
        np.testing.assert_array_equal(count, rows.sum(-1))
        for b in range(rows.shape[0]):
            for i in range(rows.shape[1]):
                listed = order[b, i, : count[b, i]]
                np.testing.assert_array_equal(listed, np.flatnonzero(rows[b, i]))


def test_kernel_flops_by_hand():
    """Block 2, one row of 8 columns: prompt 0-2, reply 1 at 3-4, reply 2 at 5, padding 6-7.

    Blocks: 0 = {0, 0}, 1 = {0, 1}, 2 = {1, 2}, 3 = {-1, -1}. Live pairs (query, key): the
    diagonal (0,0) (1,1) (2,2) (3,3); below it (1,0) prompt, (2,0) and (2,1) prompt or reply 1;
    block 3 is padding and reads nothing below. 7 of 16."""
    seg = packed_row(8, 3, [2, 1])[None]
    assert costs.live_block_pairs(seg, 2).tolist() == [7]
    got = costs.kernel_flops(seg, heads=3, head_dim=4, block=2)
    per_matmul = 2 * 2 * 2 * 4 * 3 * 7  # 2 b^2 N FLOPs, 3 heads, 7 pairs
    assert got == {"flash_forward": 2 * per_matmul, "flash_dq": 3 * per_matmul,
                   "flash_dkv": 4 * per_matmul}  # fmt: skip
    # Padding to the block: 7 columns count as the kernel runs them, 8.
    assert costs.live_block_pairs(seg[:, :7], 2).tolist() == [7]
