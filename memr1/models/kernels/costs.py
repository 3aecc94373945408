"""The FLOPs the block-skipping kernels run, counted from their block mask.

XLA's cost analysis counts 0 FLOPs inside a Pallas (or any custom) call, so a program that
calls the kernels is counted in two parts: XLA's figure for everything around them, and the
kernels' matmuls from the block mask of the rows they run. To get the first part without the
kernels' Pallas interpreter (whose loops XLA would count once, or not at all), the program is
compiled with the kernels as stand-ins (`launch.pallas_mode("standin")`): host callbacks of
0 FLOPs that keep the program's shape, one custom call per kernel call. `kernel_calls` finds
them in the compiled program (so it counts what XLA kept: a layer loop unrolled L times holds
L forward calls, a rematerialised forward one more each), and `kernel_flops` prices a call.

A call of kind k over rows r costs MATMULS[k] x 2 x block^2 x N x H FLOPs per live block pair
(`masks.block_live` at the kernel's block, T padded to it as the kernel pads), summed over the
rows: the matmuls of a block pair and query head are 2 in the forward (scores, probabilities
times V), 3 in the dq kernel (scores, dP, dQ) and 4 in the dk/dv kernel (scores, dV, dP, dK).
The softmax's elementwise work is not counted (as 6N counts no nonlinearity). Splash's
unfused backward runs the same matmuls over the same blocks at the same 128 x 128 tile.
"""

from __future__ import annotations

import re

import numpy as np

from memr1.models import masks
from memr1.models.kernels.launch import STANDIN_PREFIX

MATMULS = {"flash_forward": 2, "flash_dq": 3, "flash_dkv": 4}


def padded_segments(segments_BT, block: int) -> np.ndarray:
    """Segment ids [B, T'] with T padded to a multiple of `block` by padding columns (-1)."""
    seg = np.asarray(segments_BT, np.int32)
    pad = (-seg.shape[1]) % block
    return np.pad(seg, ((0, 0), (0, pad)), constant_values=-1)


def live_block_pairs(segments_BT, block: int) -> np.ndarray:
    """[B]: the live (query block, key block) pairs of each row, as the kernels walk them."""
    live = masks.block_live(padded_segments(segments_BT, block), block)
    return np.asarray(live).sum(axis=(1, 2))


def kernel_flops(segments_BT, *, heads: int, head_dim: int, block: int) -> dict[str, float]:
    """FLOPs of one call of each kernel kind over the rows `segments_BT` [B, T], all heads."""
    per_pair = 2.0 * block * block * head_dim * heads
    pairs = float(live_block_pairs(segments_BT, block).sum())
    return {kind: n * per_pair * pairs for kind, n in MATMULS.items()}


def kernel_calls(hlo_text: str) -> dict[str, int]:
    """Stand-in kernel calls per kind in a compiled program's HLO text
    (`compiled.as_text()`): custom calls whose op name carries the stand-in's scope."""
    counts = dict.fromkeys(MATMULS, 0)
    pattern = re.compile(re.escape(STANDIN_PREFIX) + r"(\w+)")
    for line in hlo_text.splitlines():
        if "custom-call(" not in line:
            continue
        found = pattern.search(line)
        if found and found.group(1) in counts:
            counts[found.group(1)] += 1
    return counts


def step_kernel_flops(batch, calls: dict[str, int], cfg, devices: int) -> float:
    """A device's share of the kernel FLOPs of a packed batch (`batch["segments"]`) that a
    program with `calls` kernel calls (`kernel_calls`) runs over in micro-batches: each call
    runs once a micro-batch over its rows, so over the batch every row once a call. `cfg` the
    model's config (heads, head dim); the flash kernel's block."""
    from memr1.models.kernels.flash_gpu import BLOCK

    if "segments" not in batch or not any(calls.values()):
        return 0.0
    per_call = kernel_flops(
        batch["segments"], heads=cfg.n_heads, head_dim=cfg.head_dim, block=BLOCK
    )
    return sum(n * per_call[kind] for kind, n in calls.items()) / devices
