"""Validation while training: when the loop validates, what it logs, and which step is the best.

A run with `train.eval_every` k > 0 scores its policy on a held-out set (verl's
`trainer.test_freq` with `val_before_train`, TRL's `eval_steps`): once before the first step
(step 0, the start weights: the reference every later score is read against), after every step
whose count of updates is a multiple of k, and after the last step. `validate(params, step)`
(built by `memr1.train.validators`) returns host floats named `val/...`; they are logged at
that step with `time/val_s`, in metrics.jsonl and TensorBoard. A step's validation record has
the step's number of updates as its "step", so `val/em` at step 2 scores checkpoint 2.

`train.keep_best` names the metric that picks the best checkpoint: "val/em" is maximised,
"-val/loss" (a leading "-") minimised; "" keeps no best. A validated step that beats every
earlier validated step (strictly: on a tie the earlier step stays best) is checkpointed at
once, so "best" is always loadable, and its record {"step", "value", "metric"} goes into every
later checkpoint's data position, so a resumed run continues it (`Checkpointer(keep_best=True)`
keeps that step beside the last N; `checkpoint.resolve_checkpoint` reads `DIR:best`). A score
that is not finite is logged but never the best.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

# validate(params, step) -> {"val/...": float}: the loop's validation hook.
Validate = Callable[[Any, int], dict[str, float]]

PREFIX = "val/"


def parse_keep_best(spec: str) -> tuple[str, bool] | None:
    """(metric, maximise) of a `train.keep_best` value, or None for "" (no best kept)."""
    if not isinstance(spec, str):
        raise ValueError(f"train.keep_best={spec!r}: expected a metric name such as 'val/em'")
    if spec == "":
        return None
    name, maximise = (spec[1:], False) if spec.startswith("-") else (spec, True)
    if not name.startswith(PREFIX) or name == PREFIX:
        raise ValueError(
            f"train.keep_best={spec!r}: expected a validation metric 'val/NAME' to maximise or "
            "'-val/NAME' to minimise (e.g. 'val/em', '-val/loss'), or '' for none"
        )
    return name, maximise


def is_due(done: int, every: int, steps: int) -> bool:
    """Whether the loop validates after `done` updates (0: before the first step)."""
    return every > 0 and (done == 0 or done % every == 0 or done == steps)


class Validation:
    """One run's validations: runs them when due, logs them, and keeps the best record.

    `params_of(state)` gives `validate` the weights it samples from (the loop's rollout replica
    for an RL stage, the train state's parameters for SFT). `position()` is what the loop adds
    to a checkpoint's data position: the best record and the last validated step.
    """

    def __init__(
        self,
        validate: Validate,
        params_of: Callable[[Any], Any],
        *,
        every: int,
        steps: int,
        keep_best: str,
        writer=None,
        position: Mapping[str, Any] | None = None,
    ):
        self._validate = validate
        self._params_of = params_of
        self.every, self.steps = every, steps
        self.keep_best = keep_best
        self._rule = parse_keep_best(keep_best)
        self._writer = writer
        position = position or {}
        self.best: dict[str, Any] | None = position.get("best")
        self.validated: int | None = position.get("validated")

    def due(self, done: int) -> bool:
        return is_due(done, self.every, self.steps)

    def run(self, done: int, state) -> tuple[dict[str, float], bool]:
        """Validates the weights after `done` updates and logs the scores at step `done`.

        Returns (the scores, whether `done` is the new best step).
        """
        started = time.perf_counter()
        scores = self._validate(self._params_of(state), done)
        scores = _checked(scores, done)
        scores["time/val_s"] = time.perf_counter() - started
        if self._writer is not None:
            self._writer.write(done, scores)
        self.validated = done
        return scores, self._update_best(done, scores)

    def _update_best(self, done: int, scores: Mapping[str, float]) -> bool:
        if self._rule is None:
            return False
        name, maximise = self._rule
        if name not in scores:
            raise ValueError(
                f"train.keep_best={self.keep_best!r}: validation logs no {name!r} "
                f"(it logs {sorted(k for k in scores if k.startswith(PREFIX))})"
            )
        value = scores[name]
        if not math.isfinite(value):
            return False
        if self.best is not None:
            old = float(self.best["value"])
            if not (value > old if maximise else value < old):
                return False
        self.best = {"step": int(done), "value": float(value), "metric": self.keep_best}
        return True

    def position(self) -> dict[str, Any]:
        out: dict[str, Any] = {"validated": self.validated}
        if self.best is not None:
            out["best"] = dict(self.best)
        return out


def _checked(scores: Mapping[str, Any], done: int) -> dict[str, float]:
    if not scores:
        raise ValueError(f"step {done}: validation returned no scores")
    out = {}
    for key, value in scores.items():
        if not key.startswith(PREFIX):
            raise ValueError(f"step {done}: validation metric {key!r} is not named 'val/...'")
        out[key] = float(value)
    return out
