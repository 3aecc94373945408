"""Cancellations counted apart from changes (SynthConfig.max_cancels) and their weight."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from memr1.data.synthloco.generate import generate_dataset
from memr1.data.synthloco.world import PLAN_KEYS, SynthConfig, get_preset

# The demo preset with one change per key, as the CPU demo's world has.
ONE_CHANGE = dataclasses.replace(get_preset("demo"), max_changes=1)


def _per_key(dataset) -> tuple[Counter, Counter]:
    """(changes, cancellations) per (conversation, speaker, key), from the gold operations."""
    changes, cancels = Counter(), Counter()
    for sample_id, gold in dataset.gold.items():
        for op in gold["ops"]:
            where = (sample_id, op["speaker"], op["key"])
            if op["op"] == "DELETE":
                cancels[where] += 1
            elif op["op"] == "UPDATE" and op["key"] in ("city", "job", *PLAN_KEYS):
                changes[where] += 1
    return changes, cancels


def test_by_default_a_cancellation_is_one_of_the_changes():
    changes, cancels = _per_key(generate_dataset(ONE_CHANGE))
    assert sum(cancels.values()) > 20
    assert all(changes[k] + cancels[k] <= 1 for k in changes | cancels)


def test_max_cancels_counts_cancellations_apart_from_changes():
    config = dataclasses.replace(ONE_CHANGE, max_cancels=2, cancel_weight=6.0)
    dataset = generate_dataset(config)
    changes, cancels = _per_key(dataset)
    assert max(changes.values()) == 1 and max(cancels.values()) == 2
    assert {key for _, _, key in cancels} <= set(PLAN_KEYS)
    # A plan called off and changed: both counted, each within its own limit.
    assert any(changes[k] == 1 and cancels[k] >= 1 for k in cancels)
    before = sum(_per_key(generate_dataset(ONE_CHANGE))[1].values())
    assert sum(cancels.values()) > 1.5 * before
    # Every plan called off is gone from the final bank: no plan memory after a last cancel.
    for sample_id, gold in dataset.gold.items():
        last = {}
        for op in gold["ops"]:
            if op["key"] in PLAN_KEYS and op["op"] != "NOOP":
                last[(op["speaker"], op["key"])] = op["op"]
        for (speaker, key), op in last.items():
            phrase = {"trip": "trip to", "event": "plans to go to"}[key]
            held = [t for t in gold["final_bank"][speaker] if phrase in t]
            assert (op == "DELETE") == (not held), (sample_id, speaker, key, held)


def test_no_cancellations_at_zero_weight_or_zero_limit():
    for change in ({"cancel_weight": 0.0}, {"max_cancels": 0}):
        _, cancels = _per_key(generate_dataset(dataclasses.replace(ONE_CHANGE, **change)))
        assert not cancels, change


@pytest.mark.parametrize(
    ("change", "field"),
    [({"max_cancels": -1}, "max_cancels"), ({"cancel_weight": -0.5}, "cancel_weight")],
)
def test_bad_cancellation_settings_name_the_field(change, field):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(SynthConfig(), **change).validate()
