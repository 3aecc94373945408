"""Fault injection for drills and tests: a NaN loss or inf gradients at chosen steps, inside the
real update, to exercise its NaN/inf guard (`memr1.train.update.make_step`).

The production steps know nothing of faults. `inject_nonfinite` builds, from an update's
`StepSpec`, the production step for ordinary steps and, for a poisoned step, a twin whose loss
is wrapped from outside: kind "loss" makes the loss NaN and leaves its gradients alone, kind
"grads" leaves the loss alone and makes its gradients inf. The guard under test is the
production one. The train CLI installs it from `--inject_nonfinite`; the reliability drill
(`memr1.drill`, tools/fault_drill.py) and the tests use that flag or call it.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax

from memr1.train.state import TrainSetup
from memr1.train.update import LossFactory, StepSpec, make_step

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


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def _scale_gradient(x: jax.Array, scale: float) -> jax.Array:
    """x itself; its gradient multiplied by `scale`."""
    return x


_scale_gradient.defvjp(lambda x, scale: (x, None), lambda scale, _, g: (g * scale,))


def poisoned(factory: LossFactory, loss_scale: float, grad_scale: float) -> LossFactory:
    """`factory` with each micro-batch's loss multiplied by `loss_scale` (its gradient kept) and
    its gradient by `grad_scale` (its value kept): the summed loss and gradients the guard sees
    are scaled alike."""

    def poisoned_factory(parts, frozen):
        loss_fn, batch_metrics = factory(parts, frozen)

        def poisoned_loss(diff, mb):
            loss, metrics = loss_fn(diff, mb)
            loss = _scale_gradient(loss, grad_scale)
            return loss + jax.lax.stop_gradient(loss * loss_scale - loss), metrics

        return poisoned_loss, batch_metrics

    return poisoned_factory


def inject_nonfinite(
    setup: TrainSetup,
    spec: StepSpec,
    faults: Iterable[Sequence[Any]],
    *,
    clean: Callable[..., tuple] | None = None,
) -> Callable[..., tuple]:
    """The step `make_step(setup, spec)` (or `clean`, that step already built), except that the
    steps named in `faults` run a twin whose loss is poisoned (`poisoned`).

    Args:
      faults: (step, "loss" | "grads") pairs; several kinds at one step combine.

    The step number is the state's `step` counter, read on the host before each call (so each
    call waits for the previous one: drills only).
    """
    kinds: dict[int, tuple[str, ...]] = {}
    for step, kind in check_faults(faults):
        kinds[step] = tuple(sorted((*kinds.get(step, ()), kind)))
    clean = clean or make_step(setup, spec)
    twins: dict[tuple[str, ...], Callable[..., tuple]] = {}

    def step_fn(state, *args):
        poison = kinds.get(int(state.step))
        if poison is None:
            return clean(state, *args)
        if poison not in twins:
            scales = [math.prod(FAULTS[k][i] for k in poison) for i in (0, 1)]
            twin = dataclasses.replace(spec, loss_factory=poisoned(spec.loss_factory, *scales))
            twins[poison] = make_step(setup, twin)
        return twins[poison](state, *args)

    return step_fn


def wrapper(faults: Iterable[Sequence[Any]]) -> Callable[[TrainSetup, StepSpec], Callable]:
    """A step builder `(setup, spec) -> step` for `memr1.train.loop`: `update.make_step`
    without faults, `inject_nonfinite` with them. The faults are checked here, before any step
    is built."""
    faults = check_faults(faults)
    if not faults:
        return make_step
    return lambda setup, spec: inject_nonfinite(setup, spec, faults)
