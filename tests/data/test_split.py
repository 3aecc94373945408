"""The Memory-R1 split by conversation, on fixtures and on the real LoCoMo file."""

from __future__ import annotations

from collections import Counter

import pytest

from memr1.data.locomo import load_locomo
from memr1.data.split import parse_ratios, split_conversations, split_sizes
from tests import data_fixtures as fixtures
from tests.data.helpers import REAL_LOCOMO, needs_real_locomo, write_json


@pytest.mark.parametrize(
    "n, ratios, sizes",
    [
        (10, (1, 1, 8), (1, 1, 8)),
        (20, (1, 1, 8), (2, 2, 16)),
        (3, (1, 1, 8), (1, 1, 1)),
        (2, (1, 1, 8), (0, 0, 2)),
        (7, (1, 1, 1), (3, 2, 2)),
        (10, (8, 1, 1), (8, 1, 1)),
        (5, (1, 0, 1), (3, 0, 2)),
        (0, (1, 1, 8), (0, 0, 0)),
    ],
)
def test_split_sizes(n, ratios, sizes):
    assert split_sizes(n, ratios) == sizes
    assert sum(sizes) == n


@pytest.mark.parametrize("ratios", [(0, 0, 0), (1, -1, 8)])
def test_bad_ratios(ratios):
    with pytest.raises(ValueError, match="ratios"):
        split_sizes(10, ratios)


def test_parse_ratios():
    assert parse_ratios("1:1:8") == (1.0, 1.0, 8.0)
    for bad in ("1:1", "a:b:c", "1,1,8"):
        with pytest.raises(ValueError, match="ratios"):
            parse_ratios(bad)


def test_split_keeps_file_order_and_drops_category_5(tmp_path):
    records = fixtures.locomo_fixture(seed=9, num_conversations=5, num_sessions=3)
    conversations = load_locomo(write_json(tmp_path / "l.json", records))
    parts = split_conversations(conversations, (1, 1, 3))
    assert [[c.sample_id for c in part] for part in parts.values()] == [
        [records[0]["sample_id"]],
        [records[1]["sample_id"]],
        [r["sample_id"] for r in records[2:]],
    ]
    for part in parts.values():
        for conversation in part:
            original = next(c for c in conversations if c.sample_id == conversation.sample_id)
            assert conversation.qa == tuple(q for q in original.qa if q.category != 5)
            assert conversation.sessions == original.sessions
    kept = split_conversations(conversations, (1, 1, 3), dropped_categories=())
    assert kept["test"] == tuple(conversations[2:])


# Per conversation, categories 1/2/3/4/5 (datasets.md, read off the real file).
REAL_PER_CONVERSATION = {
    "conv-26": (32, 37, 13, 70, 47),
    "conv-30": (11, 26, 0, 44, 24),
    "conv-41": (31, 27, 8, 86, 41),
    "conv-42": (37, 40, 11, 111, 61),
    "conv-43": (31, 26, 14, 107, 64),
    "conv-44": (30, 24, 7, 62, 35),
    "conv-47": (20, 34, 13, 83, 40),
    "conv-48": (21, 42, 10, 118, 48),
    "conv-49": (37, 33, 13, 73, 40),
    "conv-50": (32, 32, 7, 87, 46),
}


@pytest.fixture(scope="module")
def real():
    return load_locomo(REAL_LOCOMO)


def _per_category(conversations):
    counts = Counter(qa.category for c in conversations for qa in c.qa)
    return {k: counts[k] for k in sorted(counts)}


@needs_real_locomo
def test_real_file_totals(real):
    assert len(real) == 10
    assert sum(len(c.sessions) for c in real) == 272
    assert sum(c.num_turns for c in real) == 5882
    assert sum(len(c.qa) for c in real) == 1986
    assert _per_category(real) == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}
    for conversation in real:
        counts = Counter(qa.category for qa in conversation.qa)
        per = tuple(counts[k] for k in range(1, 6))
        assert per == REAL_PER_CONVERSATION[conversation.sample_id], conversation.sample_id


@needs_real_locomo
def test_real_file_memory_r1_split(real):
    parts = split_conversations(real)
    assert [c.sample_id for c in parts["train"]] == ["conv-26"]
    assert [c.sample_id for c in parts["validation"]] == ["conv-30"]
    assert [c.sample_id for c in parts["test"]] == [c.sample_id for c in real[2:]]
    assert sum(len(c.qa) for c in parts["train"]) == 152
    assert sum(len(c.qa) for c in parts["validation"]) == 81
    assert sum(len(c.qa) for c in parts["test"]) == 1307
    assert _per_category(parts["test"]) == {1: 239, 2: 258, 3: 83, 4: 727}


@needs_real_locomo
def test_real_file_quirks(real):
    conv26 = real[0]
    assert conv26.sample_id == "conv-26" and len(conv26.sessions) == 19
    answers = [qa for c in real for qa in c.qa]
    assert sum(qa.answer_from_adversarial for qa in answers) == 444
    assert sum(qa.evidence_raw == () for qa in answers) == 4
    assert "2022" in {qa.answer for qa in conv26.qa}
    dangling = {(c.sample_id, d) for c in real for _, d in c.dangling_evidence()}
    assert dangling == {("conv-42", "D10:19"), ("conv-47", "D4:36")}
    # "D30:05" and "D:11:26" are read as the turns they name.
    for raw, clean in (("D30:05", "D30:5"), ("D:11:26", "D11:26")):
        (qa,) = [qa for qa in answers if raw in qa.evidence_raw]
        assert clean in qa.evidence


@needs_real_locomo
def test_real_file_round_trips_through_the_writer(real, tmp_path):
    from memr1.data.locomo import dump_locomo

    assert load_locomo(dump_locomo(real, tmp_path / "again.json")) == real
