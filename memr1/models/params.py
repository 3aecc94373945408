"""Parameter states split into trainable and frozen parts, and rebinding across traces.

The update steps differentiate only the trainable part of a model's `nnx.State` (all of it, or the
LoRA adapters) and merge the frozen part back in inside the loss.
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx


def split_trainable(params: nnx.State, trainable: Any) -> tuple[nnx.State, nnx.State]:
    """(trainable, frozen) parts of a parameter state; `merge_params` undoes it."""
    return nnx.split_state(params, trainable, ...)


def rebind(tree: Any) -> Any:
    """The same arrays in fresh nnx Variables, owned by the trace this is called in.

    nnx Variables remember the trace that made them, and `nnx.remat` (the model's per-block
    remat) refuses to touch a Variable from an enclosing trace. A parameter state that a
    `lax.scan` body reads from the surrounding jit (frozen weights, the reference, the critic
    during `prepare`) is therefore re-wrapped inside the body first.
    """
    return jax.tree.map(lambda x: x, tree)


def merge_params(trainable: nnx.State, frozen: nnx.State) -> nnx.State:
    """Undoes `split_trainable`; `frozen` may come from an enclosing trace (see `rebind`)."""
    return nnx.merge_state(trainable, rebind(frozen))
