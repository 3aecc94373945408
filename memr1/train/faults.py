"""Fault injection for drills and tests: a NaN loss or inf gradients at chosen steps, inside the
real update, to exercise its NaN/inf guard (`memr1.train.update.make_step`).

The production steps take no fault input. `inject_nonfinite` is a wrapper installed around a step
builder: at an ordinary step it runs the production program itself, and at a poisoned step a twin
built by the same builder whose summed loss (kind "loss": NaN) or gradients (kind "grads": inf)
are scaled just before the guard. The train CLI installs it from `--inject_nonfinite`; the
reliability drill (`memr1.drill`, tools/fault_drill.py) and the tests use that flag or call it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from memr1.train.update import BeforeGuard, StepBuilder

# What each kind does to a step: (loss scale, gradient scale).
FAULTS = {"loss": (float("nan"), 1.0), "grads": (1.0, float("inf"))}

Faults = tuple[tuple[int, str], ...]


def parse_faults(text: str | None) -> Faults:
    """The train CLI's --inject_nonfinite: "3,7:grads" gives ((3, "loss"), (7, "grads"))."""
    out = []
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        step, _, kind = item.partition(":")
        try:
            out.append((int(step), kind.strip() or "loss"))
        except ValueError as err:
            raise ValueError(
                f"--inject_nonfinite item {item!r}: expected STEP[:loss|grads]"
            ) from err
    return check_faults(out)


def check_faults(faults: Iterable[Sequence[Any]]) -> Faults:
    """The (step, kind) pairs as a tuple; raises ValueError naming a bad one."""
    out = []
    for fault in faults:
        step, kind = fault
        if kind not in FAULTS or isinstance(step, bool) or int(step) != step or step < 0:
            raise ValueError(
                f"inject_nonfinite ({step!r}, {kind!r}): expected (step >= 0, one of "
                f"{sorted(FAULTS)})"
            )
        out.append((int(step), kind))
    return tuple(out)


def scaled(loss_scale: float, grad_scale: float) -> BeforeGuard:
    """A `before_guard` that multiplies the loss and every gradient by constants."""

    def poison(loss, grads):
        grads = jax.tree.map(lambda g: g * jnp.asarray(grad_scale, g.dtype), grads)
        return loss * loss_scale, grads

    return poison


def inject_nonfinite(build: StepBuilder, faults: Iterable[Sequence[Any]]) -> Callable[..., tuple]:
    """The step `build(None)`, except that the steps named in `faults` run a poisoned twin.

    Args:
      build: `before_guard -> jitted step` (e.g. `lambda h: make_sft_step(setup, cfg,
        before_guard=h)`); the step's first argument is the train state.
      faults: (step, "loss" | "grads") pairs; several kinds at one step combine.

    The step number is the state's `step` counter, read on the host before each call (so each
    call waits for the previous one: drills only).
    """
    kinds: dict[int, tuple[str, ...]] = {}
    for step, kind in check_faults(faults):
        kinds[step] = tuple(sorted((*kinds.get(step, ()), kind)))
    clean = build(None)
    twins: dict[tuple[str, ...], Callable[..., tuple]] = {}

    def step_fn(state, *args):
        poisoned = kinds.get(int(state.step))
        if poisoned is None:
            return clean(state, *args)
        if poisoned not in twins:
            loss_scale = math.prod(FAULTS[k][0] for k in poisoned)
            twins[poisoned] = build(scaled(loss_scale, math.prod(FAULTS[k][1] for k in poisoned)))
        return twins[poisoned](state, *args)

    return step_fn


def wrapper(faults: Iterable[Sequence[Any]]) -> Callable[[StepBuilder], Callable]:
    """`build -> inject_nonfinite(build, faults)`, or `build -> build(None)` without faults.

    The faults are checked here, before any step is built.
    """
    faults = check_faults(faults)
    if not faults:
        return lambda build: build(None)
    return lambda build: inject_nonfinite(build, faults)
