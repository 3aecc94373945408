"""Pieces every update step shares: batch placement, micro-batching, the guarded optimiser update.

Gradient accumulation: a batch of B rows is split into M micro-batches that a `lax.scan` visits
one after another, summing gradients. Each micro-batch loss is divided by the GLOBAL token count
of the whole batch (not its own), so the summed gradient is exactly the gradient of the full-batch
token-mean loss. Rows are assigned to micro-batches by interleaving (micro-batch m holds rows
m, m + M, m + 2M, ...): every device's contiguous slice of the batch then contributes equally to
every micro-batch, and the split needs no communication.

Width classes: a step's batch may come in K parts of their own widths (GRPO's packed groups
sorted by length, `memr1.train.batches.pack_step_classes`), each split into M / K micro-batches
and scanned in turn inside the one program, with the loss normalised over every part's tokens:
the gradient is the one-width batch's, without padding every group to the step's longest.

`make_step` is the one skeleton of every update (SFT, GRPO, PPO): they differ only in their
`StepSpec` (the loss, the fields it reads, whether a critic trains with it). The NaN/inf guard:
if the loss or the gradient norm is not finite, the new parameters and optimiser state are
replaced by the old ones with `jnp.where` (so a poisoned step leaves the weights bitwise
unchanged), `update_refused` is 1 in the metrics and the state's `n_refused` counter grows. The
host loop decides from those whether to skip on or stop. (Fault drills exercise the guard with a
step built from a spec whose loss they poison, `memr1.train.faults`.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding

from memr1.models.params import merge_params, rebind, split_trainable
from memr1.models.vocab import check_token_ids
from memr1.rl.logprobs import sequence_logprobs
from memr1.sharding import logical_to_spec, use_mesh
from memr1.train.state import TrainSetup, TrainState, tree_shardings

Batch = Mapping[str, jax.Array]


def batch_sharding(setup: TrainSetup) -> NamedSharding:
    """Sharding of every batch array: the leading (row) dimension over data × fsdp."""
    return NamedSharding(setup.mesh, logical_to_spec(("batch",), setup.rules))


def as_parts(batch: Batch | tuple[Batch, ...]) -> tuple[Batch, ...]:
    """A step's batch as its width classes: one dict, or a tuple of dicts of their own widths."""
    return tuple(batch) if isinstance(batch, tuple | list) else (batch,)


def part_micro(n_micro: int, parts: tuple[Batch, ...], name: str) -> int:
    """The micro-batches of each of a batch's parts: the step's `n_micro` shared equally."""
    if not parts or n_micro % len(parts):
        raise ValueError(
            f"{name} step of {n_micro} micro-batches (train.n_micro / train.micro_rows) cannot "
            f"split them equally over {len(parts)} width classes (train.width_classes)"
        )
    return n_micro // len(parts)


def check_batch(
    batch: Batch, required: tuple[str, ...], n_micro: int, row_divisor: int, name: str
) -> int:
    """Validates field names and shapes at trace time (before any compute); returns B."""
    missing = [k for k in required if k not in batch]
    if missing:
        raise ValueError(f"{name} batch lacks fields {missing}; it has {sorted(batch)}")
    rows = {k: v.shape[0] for k, v in batch.items()}
    b = rows[required[0]]
    if any(r != b for r in rows.values()):
        raise ValueError(f"{name} batch fields disagree on the number of rows: {rows}")
    if b % (n_micro * row_divisor):
        raise ValueError(
            f"{name} batch of {b} rows cannot be split into {n_micro} micro-batches whose rows "
            f"divide over {row_divisor} data×fsdp devices (need a multiple of "
            f"{n_micro * row_divisor})"
        )
    return b


def micro_parts(
    parts: tuple[Batch, ...], required: tuple[str, ...], n_micro: int, divisor: int, name: str
) -> tuple[dict[str, jax.Array], ...]:
    """Each part checked and split into its micro-batches (`to_micro`), [M / K, rows, ...]."""
    per = part_micro(n_micro, parts, name)
    out = []
    for k, part in enumerate(parts):
        label = name if len(parts) == 1 else f"{name} (width class {k})"
        check_batch(part, required, per, divisor, label)
        out.append(to_micro(part, per))
    return tuple(out)


def shard_batch(setup: TrainSetup, batch: Mapping[str, Any]) -> dict[str, jax.Array]:
    """Places a host batch on the mesh (rows over data × fsdp).

    On several processes each one passes its own rows and they are stitched into global arrays.
    Raises `OutOfVocabError` when a real token (`valid`) of `tokens` is outside the model's
    vocabulary; padding may hold any id (the model clamps it, and it is masked).
    """
    if "tokens" in batch and "valid" in batch:
        vocab = setup.model_cfg.vocab_size
        check_token_ids(batch["tokens"], batch["valid"], vocab, "batch field 'tokens'")
    sharding = batch_sharding(setup)
    divisor = setup.mesh.shape["data"] * setup.mesh.shape["fsdp"] // jax.process_count()
    for k, v in batch.items():
        if np.shape(v)[0] % divisor:
            raise ValueError(
                f"batch field {k!r} has {np.shape(v)[0]} rows on this process, not a multiple "
                f"of the {divisor} data×fsdp shards it holds"
            )
    if jax.process_count() > 1:
        return {
            k: jax.make_array_from_process_local_data(sharding, np.asarray(v))
            for k, v in batch.items()
        }
    return {k: jax.device_put(v, sharding) for k, v in batch.items()}


def to_micro(batch: Batch, n_micro: int) -> dict[str, jax.Array]:
    """Splits rows into M interleaved micro-batches: [B, ...] -> [M, B/M, ...].

    Interleaving (micro-batch m takes rows m, m + M, ...) draws every micro-batch evenly from
    each device's contiguous block of rows.
    """

    def split(x):
        b = x.shape[0]
        x = x.reshape(b // n_micro, n_micro, *x.shape[1:])
        return jnp.swapaxes(x, 0, 1)

    return {k: split(v) for k, v in batch.items()}


def accumulate(
    setup: TrainSetup,
    loss_fn: Callable[[Any, Batch], tuple[jax.Array, dict[str, jax.Array]]],
    diff_params: Any,
    micro: Batch | tuple[Batch, ...],
) -> tuple[jax.Array, Any, dict[str, jax.Array]]:
    """Sums (loss, grads, metrics) of `loss_fn` over the leading micro-batch axis with a scan,
    one scan a part when `micro` is a tuple of parts of their own widths.

    `loss_fn` must already normalise by global counts, so the sums are the full-batch values.
    Gradients are accumulated in float32 whatever the parameter dtype, in a buffer sharded like
    the parameters (an unsharded accumulator would not fit beside a large model).
    """
    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def body(grads_acc, mb):
        (loss, metrics), grads = grad_fn(diff_params, mb)
        grads_acc = jax.tree.map(lambda a, g: a + g.astype(jnp.float32), grads_acc, grads)
        return grads_acc, (loss, metrics)

    grads = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), diff_params)
    grads = jax.lax.with_sharding_constraint(
        grads, tree_shardings(setup.mesh, diff_params, setup.rules)
    )
    # Per-micro-batch losses and metrics are scalars: stacking them costs nothing, and their
    # sums over the micro axis (and the parts) are the full-batch values.
    loss, metrics = jnp.zeros((), jnp.float32), None
    for part in as_parts(micro):
        grads, (loss_M, metrics_M) = jax.lax.scan(body, grads, part)
        sums = jax.tree.map(lambda m: m.sum(0), metrics_M)
        loss = loss + loss_M.sum()
        metrics = sums if metrics is None else jax.tree.map(jnp.add, metrics, sums)
    grads = jax.tree.map(lambda g, p: g.astype(p.dtype), grads, diff_params)
    return loss, grads, metrics


def guarded_update(
    tx: optax.GradientTransformation, params: Any, opt_state: Any, grads: Any, ok: jax.Array
) -> tuple[Any, Any]:
    """One optimiser update that keeps the old parameters and state bitwise where `ok` is False."""
    updates, new_opt_state = tx.update(grads, opt_state, params)
    new_params = optax.apply_updates(params, updates)
    keep = lambda new, old: jnp.where(ok, new, old)
    return jax.tree.map(keep, new_params, params), jax.tree.map(keep, new_opt_state, opt_state)


# `(parts, frozen) -> (loss_fn, batch_metrics)`: `parts` is the step's batch as a tuple of its
# width classes (`as_parts`; one dict for most steps), whose counts normalise the loss.
LossFactory = Callable[
    [tuple[Batch, ...], Any],
    tuple[Callable[[Any, Batch], tuple[jax.Array, dict]], dict[str, jax.Array]],
]


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """One kind of update, as `make_step` builds it (`memr1.train.steps`, `memr1.train.sft`).

    name: the update's name in errors ("GRPO"). required: the batch fields it reads.
    n_micro: its micro-batches, shared among a batch's width classes. loss_factory:
    `(parts, frozen_params) -> (loss_fn, batch_metrics)`, where `parts` is `as_parts(batch)`,
    `loss_fn(diff_params, micro_batch) -> (loss, metrics)` is normalised by global counts over
    every part and `diff_params` is `(trainable,)` or `(trainable, critic_params)`.
    with_critic: the critic is trained by the same loss with its own optimiser.
    """

    name: str
    required: tuple[str, ...]
    n_micro: int
    loss_factory: LossFactory
    with_critic: bool = False


def _apply(setup: TrainSetup, state: TrainState, trainable, frozen, grads, ok) -> TrainState:
    """The state after one guarded update: the policy (and the critic, when grads holds its
    gradients) step only if `ok`; the step counter always advances, n_refused when not ok."""
    new_tr, new_opt = guarded_update(setup.tx, trainable, state.opt_state, grads[0], ok)
    new_state = state.replace(
        step=state.step + 1,
        params=merge_params(new_tr, frozen),
        opt_state=new_opt,
        n_refused=state.n_refused + (~ok).astype(jnp.int32),
    )
    if len(grads) == 1:
        return new_state
    new_c, new_c_opt = guarded_update(
        setup.critic_tx, state.critic_params, state.critic_opt_state, grads[1], ok
    )
    return new_state.replace(critic_params=new_c, critic_opt_state=new_c_opt)


def make_step(
    setup: TrainSetup, spec: StepSpec, *, grads_only: bool = False
) -> Callable[..., tuple]:
    """The jitted, donating update `step(state, batch) -> (state, metrics)` of `spec`; `batch`
    is one dict or a tuple of width classes (see the module docstring), `spec.n_micro` shared
    among them.

    The update program runs the policy (and critic) only: a KL reference's log-probs come in
    the batch (`ref_logp`), computed once per rollout by a forward-only program
    (`make_logprob_fn`), not on every micro-batch of every update.

    grads_only: instead build `(state, batch) -> (loss, grads, metrics)`, which updates nothing
    and donates nothing (gradient checks and diagnostics); grads is `(trainable,)` or
    `(trainable, critic)`.
    """
    name, with_critic = spec.name, spec.with_critic
    if with_critic and setup.critic_graphdef is None:
        raise ValueError(f"the {name} step trains a critic but the train state has none")
    divisor = setup.mesh.shape["data"] * setup.mesh.shape["fsdp"]

    def step(state: TrainState, batch: Batch | tuple[Batch, ...]):
        with use_mesh(setup.mesh, setup.rules):
            parts = as_parts(batch)
            micro = micro_parts(parts, spec.required, spec.n_micro, divisor, name)
            trainable, frozen = split_trainable(state.params, setup.trainable)
            diff = (trainable, state.critic_params) if with_critic else (trainable,)
            loss_fn, metrics = spec.loss_factory(parts, frozen)
            loss, grads, micro_metrics = accumulate(setup, loss_fn, diff, micro)
            if grads_only:
                return loss, grads, {**metrics, **micro_metrics}
            ok = jnp.isfinite(loss) & jnp.isfinite(optax.tree.norm(grads))
            new_state = _apply(setup, state, trainable, frozen, grads, ok)
            if with_critic:
                metrics["critic_grad_norm"] = optax.tree.norm(grads[1])
            metrics.update(micro_metrics)
            metrics["loss"] = loss
            metrics["grad_norm"] = optax.tree.norm(grads[0])
            metrics["update_refused"] = (~ok).astype(jnp.float32)
            metrics["lr"] = jnp.asarray(setup.lr_schedule(state.step - state.n_refused))
            return new_state, metrics

    state_and_batch = (setup.state_shardings, batch_sharding(setup))
    out_shardings = (setup.state_shardings, setup.replicated)
    donate = 0
    if grads_only:
        grad_shardings = (split_trainable(setup.param_shardings, setup.trainable)[0],)
        if with_critic:
            grad_shardings += (setup.state_shardings.critic_params,)
        out_shardings = (setup.replicated, grad_shardings, setup.replicated)
        donate = ()
    return jax.jit(
        step,
        in_shardings=state_and_batch,
        out_shardings=out_shardings,
        donate_argnums=donate,
    )


def from_micro(x_M: jax.Array) -> jax.Array:
    """The inverse of `to_micro` for one array: [M, B/M, ...] -> [B, ...] in the batch's order."""
    m, per = x_M.shape[:2]
    return jnp.swapaxes(x_M, 0, 1).reshape(m * per, *x_M.shape[2:])


# `(graphdef, params, micro_batch) -> per-token log-probs`, the layout the loss reads.
LogprobFn = Callable[[Any, Any, Batch], jax.Array]


def make_logprob_fn(
    setup: TrainSetup,
    *,
    n_micro: int = 1,
    chunk: int = 128,
    temperature: float = 1.0,
    logprobs: LogprobFn | None = None,
    fields: tuple[str, ...] = ("tokens", "valid"),
) -> Callable[[Any, Batch], jax.Array]:
    """A jitted `(params, batch) -> logp [B, ...]` over micro-batches, without gradients (a
    tuple of width classes gives a tuple of their log-probs, `n_micro` shared among them).

    One forward-only program for every log-prob a step needs that is not the policy's own:
    the old policy's before several update epochs, the KL reference's once per rollout
    (`memr1.train.steps.make_grpo_reference`), or tokens whose sampler log-probs are missing.
    `logprobs` is the loss's own log-prob function (default: `sequence_logprobs` of `tokens` and
    `valid` at `temperature`, in `chunk`-token chunks), so the values are exactly those the loss
    would compute; `fields` are the batch fields it reads; its micro-batches are the update's.
    """
    if logprobs is None:

        def logprobs(graphdef, params, mb):
            kw = dict(temperature=temperature, chunk=chunk)
            return sequence_logprobs(graphdef, params, mb["tokens"], mb["valid"], **kw)[0]

    def fn(params, batch):
        with use_mesh(setup.mesh, setup.rules):
            divisor = setup.mesh.shape["data"] * setup.mesh.shape["fsdp"]
            parts = tuple({k: p[k] for k in fields} for p in as_parts(batch))
            micro = micro_parts(parts, fields, n_micro, divisor, "logprob")

            def body(_, mb):
                return None, logprobs(setup.graphdef, rebind(params), mb)

            out = tuple(from_micro(jax.lax.scan(body, None, m)[1]) for m in micro)
            return out if isinstance(batch, tuple | list) else out[0]

    return jax.jit(
        fn,
        in_shardings=(setup.param_shardings, batch_sharding(setup)),
        out_shardings=batch_sharding(setup),
    )
