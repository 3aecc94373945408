"""How the Pallas calls of `memr1.models.kernels` run: "native" (compiled for the accelerator),
"interpret" (Pallas' interpreter, any backend: tests on CPU) or "standin".

A stand-in call computes nothing: it is a host callback that returns zeros of the kernel's
output shapes, named `STANDIN_PREFIX + name` in the program's metadata, so a compiled program
can be searched for its kernel calls (`memr1.models.kernels.costs.kernel_calls`) and their FLOPs
added from the block mask. It exists to count, never to run.

The mode is read when a function is traced; `jax.jit` caches what it traced, so set the mode
before the first trace of a program and do not change it for that program.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax
import numpy as np

MODES = ("native", "interpret", "standin")
STANDIN_PREFIX = "memr1_kernel_standin_"

_MODE: contextvars.ContextVar[str] = contextvars.ContextVar("memr1_pallas_mode", default="native")


@contextlib.contextmanager
def pallas_mode(mode: str) -> Iterator[None]:
    """Runs the kernels' Pallas calls traced inside this context in `mode` (see the module)."""
    if mode not in MODES:
        raise ValueError(f"pallas mode {mode!r} is not one of {list(MODES)}")
    token = _MODE.set(mode)
    try:
        yield
    finally:
        _MODE.reset(token)


def current_mode() -> str:
    return _MODE.get()


def standin(name: str, out_shape, *args):
    """Zeros of `out_shape` (a ShapeDtypeStruct or a tuple of them) from a host callback that
    XLA cannot see into or fold: 0 FLOPs in the cost analysis, one custom call per use."""
    outs = out_shape if isinstance(out_shape, (tuple, list)) else (out_shape,)

    def zeros(*_):
        return tuple(np.zeros(o.shape, o.dtype) for o in outs)

    shapes = tuple(jax.ShapeDtypeStruct(o.shape, o.dtype) for o in outs)
    with jax.named_scope(STANDIN_PREFIX + name):
        got = jax.pure_callback(zeros, shapes, *args)
    return got if isinstance(out_shape, (tuple, list)) else got[0]
