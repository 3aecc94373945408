"""One packed row per GRPO group: the prompt once, then the group's G replies back to back.

The row layout (`memr1.train.batches.pack_rollout`) gives each of a group's G samples its own
row, a left-padded prompt then a right-padded reply, so the update runs the prompt G times and
pads every reply to the step's longest. A packed row is

    [prompt (no padding) | reply_1 | reply_2 | ... | reply_G | pad]

with per-column segment ids (0 the prompt, j reply j, -1 padding) and explicit positions (the
prompt 0..P-1, reply j again from P: every reply sits where it sat after its own prompt). Under
`memr1.models.masks.packed_mask` (a query reads earlier keys of the prompt and of its own reply)
each reply's tokens see exactly what they saw in their own row, so the log-probs are the row
layout's, the prompt runs once per group and no reply is padded to another's length.

The loss reads the replies only, so the per-token fields live in "reply columns" [N, L], L the
bucketed longest sum of a group's reply lengths: reply column i of a row is packed column
`target_index[i]`, predicted by the hidden state at `predictor_index[i]` (the previous column,
or the prompt's last for a reply's first token). The LM head (a 152k-word unembedding) then
runs on L columns a row, not on the prompt's.

Fields of a packed batch (N groups):
  tokens, segments, positions [N, W] int32; valid [N, W] bool (segments >= 0);
  target_index, predictor_index [N, L] int32; reply_segment [N, L] int32 (j, 0 on padding);
  response_mask [N, L] bool; advantages, old_logp, sampler_logp [N, L] float32 (when the row
  layout has them; advantages per token, its reply's).
"""

from __future__ import annotations

import numpy as np

PACKED_FIELDS = (
    "tokens",
    "segments",
    "positions",
    "valid",
    "target_index",
    "predictor_index",
    "reply_segment",
    "response_mask",
    "advantages",
)
_PER_TOKEN = ("old_logp", "sampler_logp")


def _parts(batch, group: int, groups=None):
    """Per group (`groups`, indices in that order; default all): the real prompt ids, and per
    reply its row's real reply columns."""
    rows, width = batch["tokens"].shape
    if group < 1 or rows % group:
        raise ValueError(f"pack_groups: {rows} rows do not split into groups of {group}")
    if "prompt_mask" not in batch:
        raise ValueError(
            f"pack_groups needs the row layout's 'prompt_mask' [rows, prompt width] to find the "
            f"replies; the batch has {sorted(batch)}"
        )
    p = batch["prompt_mask"].shape[1]
    valid = np.asarray(batch["valid"], bool)
    reply = np.asarray(batch["response_mask"], bool) & valid
    out = []
    for n in range(rows // group) if groups is None else (int(g) for g in groups):
        first = n * group
        prompt = np.asarray(batch["tokens"][first, :p])[valid[first, :p]]
        if len(prompt) == 0:
            raise ValueError(
                f"pack_groups: group {n} has an empty prompt: nothing predicts its replies"
            )
        replies = [np.flatnonzero(reply[first + j]) for j in range(group)]
        out.append((prompt, replies))
    return out


def _group_needs(parts) -> np.ndarray:
    totals = [sum(len(c) for c in replies) for _, replies in parts]
    return np.asarray([(len(p) + t, t) for (p, _), t in zip(parts, totals, strict=True)], np.int64)


def _needs(parts) -> tuple[int, int]:
    needs = _group_needs(parts)
    return int(needs[:, 0].max()), max(int(needs[:, 1].max()), 1)


def group_needs(batch, group: int) -> np.ndarray:
    """[groups, 2]: the columns and the reply columns each group of a row-layout batch needs
    packed (its prompt once and its replies), in the batch's order."""
    return _group_needs(_parts(batch, group))


def packed_needs(batch, group: int) -> tuple[int, int]:
    """(columns, reply columns) the longest packed group of a row-layout batch needs."""
    return _needs(_parts(batch, group))


def pack_groups(
    batch, group: int, width: int, reply_width: int, groups=None
) -> dict[str, np.ndarray]:
    """The packed batch (see the module docstring) of a row-layout GRPO batch whose rows come
    in groups of `group` samples of one prompt, at `width` columns and `reply_width` reply
    columns a row (at least `packed_needs`; the caller buckets them, common to all processes).
    `groups` (indices, default all) packs those groups only, one row each in that order."""
    parts = _parts(batch, group, groups)
    parts = list(zip(range(len(parts)) if groups is None else groups, parts, strict=True))
    need, reply_need = _needs([part for _, part in parts])
    if need > width or reply_need > reply_width:
        raise ValueError(
            f"pack_groups: the longest group needs {need} columns ({reply_need} of replies), "
            f"more than width={width} (reply_width={reply_width})"
        )
    n = len(parts)
    out = {
        "tokens": np.zeros((n, width), np.int32),
        "segments": np.full((n, width), -1, np.int32),
        "positions": np.zeros((n, width), np.int32),
        "target_index": np.zeros((n, reply_width), np.int32),
        "predictor_index": np.zeros((n, reply_width), np.int32),
        "reply_segment": np.zeros((n, reply_width), np.int32),
        "response_mask": np.zeros((n, reply_width), bool),
        "advantages": np.zeros((n, reply_width), np.float32),
    }
    per_token = [k for k in _PER_TOKEN if k in batch]
    for k in per_token:
        out[k] = np.zeros((n, reply_width), np.float32)
    for i, (source, (prompt, replies)) in enumerate(parts):
        p = len(prompt)
        out["tokens"][i, :p], out["segments"][i, :p], out["positions"][i, :p] = prompt, 0, range(p)
        col, rc = p, 0  # the next packed column and reply column
        for j, cols in enumerate(replies):
            row, r = source * group + j, len(cols)
            span, rspan = slice(col, col + r), slice(rc, rc + r)
            out["tokens"][i, span] = batch["tokens"][row, cols]
            out["segments"][i, span] = j + 1
            out["positions"][i, span] = np.arange(p, p + r)
            out["target_index"][i, rspan] = np.arange(col, col + r)
            out["predictor_index"][i, rspan] = np.arange(col - 1, col + r - 1)
            if r:
                out["predictor_index"][i, rc] = p - 1  # the prompt's last predicts the first
            out["reply_segment"][i, rspan] = j + 1
            out["response_mask"][i, rspan] = True
            out["advantages"][i, rspan] = batch["advantages"][row]
            for k in per_token:
                out[k][i, rspan] = batch[k][row, cols]
            col, rc = col + r, rc + r
    out["valid"] = out["segments"] >= 0
    return out
