"""Copy pretraining: the tiny backbone learns to copy a token string before its warm start.

A real backbone comes to SFT already able to copy a span of its prompt (induction heads form
early in pretraining); the demo's backbone is randomly initialised, and whether its SFT grows a
copy circuit is a lottery of the seed (docs/demo.md, 2026-12-04: the manager's copy probe
0.87 on one seed, 0.29 on the next). A manager that cannot copy the fact into its reply, or an
Answer Agent that cannot copy the value out of a memory, gives the manager stage no reward to
learn an operation from. This stage gives every seed the circuit first, on a task that needs
nothing else (`copy_rows`; the loss on the copy):

  [BOS] x [SEP] x                                   one string (spans (1, 1))
  [BOS] "d1" ^"x" "d2" [SEP] "x"                    the marked (^) one of 1-4 quoted strings

x and the d's: uniform random token ids, ``tokens`` long. The demo uses the second: a manager
reply starts a fact's copy after a quote, as every memory of its prompt starts, so the first
word has to be found, not continued; with the first alone the warm start wrote a frequent name
where a fact's first word belonged (docs/demo.md, 2026-12-05). The ids are uniform so that no
unigram guess helps (log V nats a token) and copying is the only way down; on random *words* the
model settled at their peaked unigram instead. The update is the warm start's own
(memr1.train.sft: the token-mean NLL of the target, `make_sft_step` on a one-device mesh); AdamW
(b2 0.95) at a constant rate after a linear warmup, no weight decay.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from memr1.models import masks
from memr1.models.transformer import forward, logits_fn
from memr1.train.mesh import build_mesh
from memr1.train.optim import OptimConfig
from memr1.train.sft import SFTConfig, make_sft_step, sft_batch
from memr1.train.state import create_train_state
from memr1.train.update import shard_batch

EVAL_ROWS = 256  # held-out copy rows of the accuracy curve, from their own random stream


def copy_rows(
    n: int,
    lengths: tuple[int, int],
    ids: tuple[int, int],
    bos: int,
    sep: int,
    rng,
    *,
    spans: tuple[int, int] = (1, 1),
    marks: tuple[int, int] | None = None,
) -> list[tuple[list[int], list[int]]]:
    """``n`` (prompt, target) pairs, each string x of a length uniform in ``lengths``
    (inclusive) and of ids uniform in [ids[0], ids[1]).

    Without ``marks``: prompt [bos] + x + [sep], target x (``spans`` must be (1, 1)).
    With ``marks`` (head, quote): the prompt holds k strings, k uniform in ``spans``, each
    quoted, the one to copy at a random place among them and marked by ``head``:

      [bos] [quote] d1 [quote] [head] [quote] x [quote] [quote] d2 [quote] ... [sep]
      target: [quote] x [quote]

    so that the first token of the copy cannot come from the token before it (every string
    follows a quote, as every memory and fact of a manager prompt does): the model has to find
    the marked string, which is what a reply does that writes a fact into memory.

    Raises:
      ValueError: for lengths, spans or an id range that hold no string, or a marker inside the
        range.
    """
    lo, hi = ids
    if not 1 <= lengths[0] <= lengths[1]:
        raise ValueError(f"pretrain.tokens {tuple(lengths)}: need 1 <= min <= max")
    if not 1 <= spans[0] <= spans[1]:
        raise ValueError(f"pretrain.spans {tuple(spans)}: need 1 <= min <= max")
    if marks is None and tuple(spans) != (1, 1):
        raise ValueError(f"pretrain.spans {tuple(spans)}: several strings need marks")
    if not 0 <= lo < hi:
        raise ValueError(f"copy ids [{lo}, {hi}): an empty range")
    special = (bos, sep, *(marks or ()))
    if any(lo <= m < hi for m in special):
        names = ", ".join(str(m) for m in special)
        raise ValueError(f"copy markers {names} fall inside the copied ids [{lo}, {hi})")

    def string() -> list[int]:
        return rng.integers(lo, hi, size=int(rng.integers(lengths[0], lengths[1] + 1))).tolist()

    rows = []
    for _ in range(n):
        x = string()
        if marks is None:
            rows.append(([bos] + x + [sep], x))
            continue
        head, quote = marks
        k = int(rng.integers(spans[0], spans[1] + 1))
        at = int(rng.integers(k))
        prompt = [bos]
        for i in range(k):
            prompt += [head, quote, *x, quote] if i == at else [quote, *string(), quote]
        rows.append((prompt + [sep], [quote, *x, quote]))
    return rows


def rehearsal_rows(
    n: int, pc, *, ids: tuple[int, int], bos: int, sep: int, marks, seed: int
) -> list[dict[str, list[int]]]:
    """``n`` rows of the copy task as the warm start's token-id rows ({prompt_ids,
    target_ids}: `memr1.train.sft.read_sft_pairs`), drawn as `pretrain` draws its own (``pc``:
    the pretrain section) from a stream of their own, to mix into the SFT traces: SFT then
    keeps training the circuit it maps onto a manager reply's fact (config.sft)."""
    lengths, spans = tuple(int(k) for k in pc.tokens), tuple(int(k) for k in pc.spans)
    rng = np.random.default_rng([seed, 3])
    rows = copy_rows(n, lengths, ids, bos, sep, rng, spans=spans, marks=marks)
    return [{"prompt_ids": p, "target_ids": t} for p, t in rows]


def copy_accuracy(
    graphdef, params, batch: dict[str, np.ndarray], first: np.ndarray | None = None
) -> tuple[float, ...]:
    """(token accuracy, row accuracy) of greedy next-token prediction on the batch's targets
    under teacher forcing: a row counts when every one of its target tokens is the argmax.
    With ``first`` (per row, the index into ``tokens`` of the first copied token), also the
    accuracy on those tokens: the ones a marked copy must find rather than continue."""
    valid = jnp.asarray(batch["valid"])
    tokens = jnp.asarray(batch["tokens"])
    h, _ = forward(
        graphdef, params, tokens, masks.positions_from_valid(valid), masks.causal_mask(valid)
    )
    pred = jnp.argmax(logits_fn(graphdef, params, h[:, :-1]), axis=-1)
    mask = jnp.asarray(batch["loss_mask"])[:, 1:] & valid[:, 1:]
    hit = (pred == tokens[:, 1:]) | ~mask
    token_acc = jnp.sum(hit & mask) / jnp.maximum(jnp.sum(mask), 1)
    out = (float(token_acc), float(jnp.mean(jnp.all(hit, axis=-1))))
    if first is None:
        return out
    rows = jnp.arange(hit.shape[0])
    return (*out, float(jnp.mean(hit[rows, jnp.asarray(first) - 1])))


def first_copied(rows: Sequence[tuple[list[int], list[int]]], marked: bool) -> np.ndarray:
    """Per row, the index into prompt + target of the first copied token (after the target's
    opening quote when ``marked``)."""
    return np.asarray([len(p) + int(marked) for p, _ in rows])


def pretrain(
    model_cfg,
    params,
    pc,
    *,
    ids: tuple[int, int],
    bos: int,
    sep: int,
    seed: int,
    marks: tuple[int, int] | None = None,
    log: Callable[[str], None] = print,
    every: int = 100,
) -> tuple[object, list[dict]]:
    """``pc.steps`` copy-task updates of ``params`` (``pc``: the demo's ``pretrain`` section:
    ``pc.spans`` strings a prompt, marked by ``marks`` when there can be several: `copy_rows`).

    Returns:
      (params, history): the trained parameters and, every ``every`` steps and after the last,
      {"step", "loss" (the last update's), "token_acc", "row_acc", "first_acc" (the first
      copied token's accuracy)} on EVAL_ROWS held-out rows.

    Raises:
      RuntimeError: when a step's loss is not finite (nothing is returned to export).
    """
    lengths = tuple(int(n) for n in pc.tokens)
    spans = tuple(int(n) for n in pc.spans)
    marked = marks is not None
    # prompt [bos] (head) (quote x quote) per string [sep], target (quote) x (quote)
    width = 2 + int(marked) + spans[1] * (lengths[1] + 2 * marked) + lengths[1] + 2 * marked
    make = lambda n, r: copy_rows(n, lengths, ids, bos, sep, r, spans=spans, marks=marks)
    optim = OptimConfig(
        lr=pc.lr, warmup_steps=pc.warmup_steps, b2=0.95, weight_decay=0.0, total_steps=pc.steps
    )
    mesh = build_mesh(1, 1, 1, devices=jax.devices()[:1])
    setup, state = create_train_state(mesh, model_cfg, optim, seed=seed, params=params)
    step_fn = make_sft_step(setup, SFTConfig(n_micro=1))
    rng = np.random.default_rng([seed, 1])
    held_out_rng = np.random.default_rng([seed, 2])
    held_out_rows = make(EVAL_ROWS, held_out_rng)
    held_out, first = _batch(held_out_rows, width), first_copied(held_out_rows, marked)
    history: list[dict] = []
    for step in range(1, pc.steps + 1):
        batch = _batch(make(pc.batch_size, rng), width)
        state, metrics = step_fn(state, shard_batch(setup, batch))
        loss = float(metrics["loss"])
        if not np.isfinite(loss):  # the update was refused (memr1.train.update's guard)
            raise RuntimeError(f"copy pretraining: loss {loss} at step {step}")
        if step % every == 0 or step == pc.steps:
            token_acc, row_acc, first_acc = copy_accuracy(
                setup.graphdef, state.params, held_out, first
            )
            history.append(
                {"step": step, "loss": round(loss, 4), "token_acc": round(token_acc, 4),
                 "row_acc": round(row_acc, 4), "first_acc": round(first_acc, 4)}
            )  # fmt: skip
            log(
                f"pretrain step {step}: loss {loss:.3f}, copy accuracy {token_acc:.3f}, "
                f"first token {first_acc:.3f}"
            )
    return state.params, history


def _batch(rows: Sequence[tuple[list[int], list[int]]], width: int) -> dict[str, np.ndarray]:
    return sft_batch([p for p, _ in rows], [t for _, t in rows], width)
