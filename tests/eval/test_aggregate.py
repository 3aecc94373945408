"""Per-category and overall tables under both labellings, on a hand-made set."""

from __future__ import annotations

import json

import pytest

from memr1.eval import aggregate as agg

RECORDS = [
    {"question_id": "q0", "category": 1, "f1": 1.0, "bleu1": 0.5, "em": 1.0, "j": None},
    {"question_id": "q1", "category": 1, "f1": 0.0, "bleu1": 0.25, "em": 0.0},
    {"question_id": "q2", "category": 2, "f1": 0.5, "bleu1": 0.5, "em": 0.0},
    {"question_id": "q3", "category": 4, "f1": 1 / 3, "bleu1": 1.0, "em": 1.0},
    {"question_id": "q4", "category": 3, "f1": 0.2, "bleu1": 0.1, "em": 0.0},
]


def row(summary, labelling, category):
    (found,) = [r for r in summary["by_category"][labelling]["rows"] if r["category"] == category]
    return found


def test_category_means_and_names_under_both_labellings():
    summary = agg.aggregate_scores(RECORDS)
    mem0, locomo = row(summary, "mem0", 1), row(summary, "locomo", 1)
    assert mem0["name"] == "single-hop" and locomo["name"] == "multi-hop"
    assert mem0["count"] == 2
    assert mem0["scores"] == {"f1": 0.5, "bleu1": 0.375, "j": None, "em": 0.5}
    assert mem0["scores"] == locomo["scores"]  # same questions, only the name differs
    assert row(summary, "mem0", 3)["name"] == "multi-hop"
    assert row(summary, "locomo", 3)["name"] == "open-domain"
    assert [r["category"] for r in summary["by_category"]["mem0"]["rows"]] == [1, 2, 3, 4]


def test_overall_is_the_plain_mean_over_questions():
    overall = agg.aggregate_scores(RECORDS)["overall"]
    assert overall["count"] == 5
    assert overall["scores"]["f1"] == pytest.approx((1 + 0 + 0.5 + 1 / 3 + 0.2) / 5)
    assert overall["scores"]["bleu1"] == pytest.approx(2.35 / 5)
    assert overall["scores"]["em"] == pytest.approx(0.4)
    assert overall["scores"]["j"] is None and overall["scored"]["j"] == 0
    # The mean of the four category means would be different (0.3833...): not what papers do.
    assert overall["scores"]["f1"] != pytest.approx((0.5 + 0.5 + 0.2 + 1 / 3) / 4)


def test_summary_is_json_serialisable():
    summary = agg.aggregate_scores(RECORDS)
    assert json.loads(json.dumps(summary)) == summary


def test_markdown_scales_by_100_and_shows_missing_judge_as_dash():
    text = agg.format_markdown(agg.aggregate_scores(RECORDS))
    assert "| Category | # | F1 | BLEU-1 | J | EM |" in text
    assert "| 1 single-hop | 2 | 50.00 | 37.50 | — | 50.00 |" in text
    assert "| 1 multi-hop | 2 | 50.00 | 37.50 | — | 50.00 |" in text
    assert "| Overall | 5 | 40.67 | 47.00 | — | 40.00 |" in text
    assert "mem0 labelling" in text and "locomo labelling" in text
    assert "1 single-hop, 2 temporal, 3 multi-hop, 4 open-domain" in text
    table_rows = [line for line in text.splitlines() if line.startswith("| ") and "#" not in line]
    assert len(table_rows) == 10  # 4 categories + Overall, in each of the two tables
    assert all(line.split(" | ")[4] == "—" for line in table_rows)  # J column, never 0.00


def test_judge_scores_when_present_and_partial_ones_are_flagged():
    full = [dict(r, j=float(i % 2 == 0)) for i, r in enumerate(RECORDS)]
    summary = agg.aggregate_scores(full)
    assert summary["overall"]["scores"]["j"] == pytest.approx(0.6)
    assert "| Overall | 5 | 40.67 | 47.00 | 60.00 | 40.00 |" in agg.format_markdown(summary)

    partial = [dict(r) for r in full]
    partial[1]["j"] = None  # judged 4 of 5: q0, q2, q4 correct, q3 wrong
    summary = agg.aggregate_scores(partial)
    assert summary["overall"]["scores"]["j"] == pytest.approx(0.75)
    assert summary["overall"]["scored"]["j"] == 4
    text = agg.format_markdown(summary)
    assert "| Overall | 5 | 40.67 | 47.00 | 75.00* | 40.00 |" in text
    assert "* mean over the questions that have that score" in text


def test_bad_records_name_the_record():
    with pytest.raises(ValueError, match="record 1 .*q9.*category"):
        agg.aggregate_scores([RECORDS[0], {"question_id": "q9", "f1": 1.0}])
    with pytest.raises(ValueError, match="record 0 .*category 7"):
        agg.aggregate_scores([{"category": 7, "f1": 1.0}])
    with pytest.raises(ValueError, match="record 0 .*'f1'.*'high'"):
        agg.aggregate_scores([{"category": 1, "f1": "high"}])
    with pytest.raises(ValueError, match="no records"):
        agg.aggregate_scores([])


def test_questions_without_locomo_categories_count_in_the_overall_row_only():
    from memr1.data.records import NO_CATEGORY

    records = [
        {"category": NO_CATEGORY, "em": 1.0},
        {"category": NO_CATEGORY, "em": 0.0},
        {"category": 2, "em": 1.0},
    ]
    out = agg.aggregate_scores(records, metrics=("em",))
    assert out["overall"]["count"] == 3 and out["overall"]["scores"]["em"] == pytest.approx(2 / 3)
    for table in out["by_category"].values():
        assert [row["category"] for row in table["rows"]] == [2]
