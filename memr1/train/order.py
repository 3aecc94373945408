"""Which examples a step sees: a pure function of (seed, step), so a resumed run replays its steps.

`batch_indices` walks a fresh permutation per epoch in consecutive slices. `grouped_batch_indices`
(SFT with `train.sft_group_by_length` = k > 0) groups rows of similar length into the same batch,
as TRL's `group_by_length` and verl's dynamic batch sizes do: each epoch's permutation is cut
into chunks of k batches, every chunk is sorted by length and split into batches, and the
epoch's batches are then visited in a random order, so that a step's rows pad to their own
longest, not to the longest of the data set, while the order of lengths across steps stays
random. An epoch holds n // batch such batches; the n % batch rows left over differ per epoch.
`bucket_length` is the width a batch pads to.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def batch_indices(n: int, batch: int, step: int, seed: int) -> np.ndarray:
    """The example indices of `step`: consecutive slices of a fresh permutation per epoch."""
    if n <= 0:
        raise ValueError("no training examples")
    out = []
    start = step * batch
    while len(out) < batch:
        epoch, offset = divmod(start + len(out), n)
        perm = np.random.default_rng([seed, epoch]).permutation(n)
        out.extend(perm[offset : offset + batch - len(out)].tolist())
    return np.asarray(out)


def grouped_batch_indices(
    lengths: Sequence[int], batch: int, step: int, seed: int, group: int
) -> np.ndarray:
    """The example indices of `step`, batched by length within chunks of `group` batches.

    Raises:
      ValueError: fewer examples than one batch, or `group` < 1.
    """
    n = len(lengths)
    if group < 1:
        raise ValueError(f"train.sft_group_by_length={group!r}: must be >= 1 to group")
    per_epoch = n // batch
    if per_epoch == 0:
        raise ValueError(f"{n} examples cannot fill one batch of {batch} grouped by length")
    epoch, k = divmod(step, per_epoch)
    rng = np.random.default_rng([seed, epoch])
    perm = rng.permutation(n)[: per_epoch * batch]
    sizes = np.asarray(lengths)
    chunk = group * batch
    parts = [perm[i : i + chunk] for i in range(0, len(perm), chunk)]
    ordered = np.concatenate([p[np.argsort(sizes[p], kind="stable")] for p in parts])
    batches = ordered.reshape(per_epoch, batch)
    return batches[rng.permutation(per_epoch)[k]]


def sft_batch_indices(lengths: Sequence[int], batch: int, step: int, seed: int, group: int):
    """The rows of SFT step `step`: grouped by length when `group` (train.sft_group_by_length)
    is > 0, else random (`batch_indices`)."""
    if group:
        return grouped_batch_indices(lengths, batch, step, seed, group)
    return batch_indices(len(lengths), batch, step, seed)


def bucket_length(need: int, length: int, n_buckets: int = 4) -> int:
    """The shortest of ``n_buckets`` padded lengths (multiples of 16 up to ``length``) >= need.

    Padding every SFT batch to the data set's longest row spends most of a step on padding; a
    few fixed buckets keep the compiled programs few (one a bucket) while a batch of short rows
    runs at its own size. Rows longer than ``length`` get ``length`` (``sft_batch`` names it).
    """
    for k in range(1, n_buckets + 1):
        size = min(length, -(-length * k // n_buckets // 16) * 16)
        if need <= size:
            return size
    return length
