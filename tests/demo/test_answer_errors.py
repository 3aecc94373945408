"""The answer-error classes of experiments/cpu_demo/answer_errors.py and tools/answer_errors.py."""

import json

import pytest

from experiments.cpu_demo import answer_errors as ae
from tests.tool import load_tool

MARCH = "5:25 pm on 6 March, 2023"
DECEMBER = "6:00 pm on 29 December, 2022"
# Synthloco's own sentences: a value that changed (the newer memory holds) and a pet.
SHOWN = {
    "Andrew": [
        {"when": MARCH, "text": "Andrew moved to Denver today."},
        {"when": DECEMBER, "text": "Andrew lives in Portland."},
    ],
    "Priya": [{"when": DECEMBER, "text": "Priya adopted a rabbit named Toby last year."}],
}


def row(question, gold, answer, em, retrieved=SHOWN, **extra):
    return {"question": question, "gold": gold, "answer": answer, "em": em,
            "retrieved": retrieved, **extra}  # fmt: skip


@pytest.mark.parametrize(
    "case, expected",
    [
        (row("Where does Andrew live?", "Denver", "Denver", 1.0), "right"),
        # The newest memory is readable: the stale value, a hedge and nothing are the agent's.
        (row("Where does Andrew live?", "Denver", "Portland", 0.0), "wrong"),
        (row("Where does Andrew live?", "Denver", "Portland or Denver", 0.0), "hedged"),
        (row("Where does Andrew live?", "Denver", "", 0.0), "empty"),
        (row("Where does Andrew live?", "Denver", "Denver", 0.0, used_fallback=True), "empty"),
        # Only Priya's memories shown: no reader could answer where Andrew lives.
        (
            row("Where does Andrew live?", "Denver", "Portland", 0.0, {"Priya": SHOWN["Priya"]}),
            "beyond",
        ),
        # Shown, but the gold is not what the memories say: beyond any reader too.
        (row("Where does Andrew live?", "Austin", "Denver", 0.0), "beyond"),
        # The date is worked out from the memory's timestamp ("today").
        (row("When did Andrew move to Denver?", "6 March 2023", "March 2023", 0.0), "wrong"),
        # A gold answer with " or " in it: an answer with one is not a hedge.
        (row("What is Zed?", "tea or coffee", "tea or milk", 0.0), "beyond"),
    ],
)
def test_classes(case, expected):
    assert ae.Classifier().classify(case) == expected


def test_question_groups():
    assert ae.question_group("When did Andrew move to Denver?") == "date"
    assert ae.question_group("Which gift would suit Priya better, a cat toy or a dog toy?") == (
        "choice"
    )
    assert ae.question_group("How many pets do Priya and Andrew have in total?") == "count"
    assert ae.question_group("What kind of pet does Priya have?") == "value"
    assert ae.question_group("What is the capital of France?") == "other"


def test_tally_counts_readable_misses_by_group():
    rows = [
        row("Where does Andrew live?", "Denver", "Denver", 1.0),
        row("Where does Andrew live?", "Denver", "Portland", 0.0),
        row("When did Andrew move to Denver?", "6 March 2023", "", 0.0),
        row("What kind of pet does Priya have?", "rabbit", "dog", 0.0),
        row("What kind of pet does Andrew have?", "dog", "rabbit", 0.0),  # none shown: beyond
    ]
    t = ae.tally(rows)
    assert t["n"] == 5
    assert t["classes"] == {"right": 1, "beyond": 1, "hedged": 0, "empty": 1, "wrong": 2}
    assert t["misses_by_group"] == {"date": 1, "choice": 0, "count": 0, "value": 2, "other": 0}


def test_read_predictions_names_the_bad_line(tmp_path):
    path = tmp_path / "predictions.jsonl"
    good = json.dumps(row("Where does Andrew live?", "Denver", "Denver", 1.0))
    path.write_text(good + "\n{oops\n")
    with pytest.raises(ValueError, match=r"predictions.jsonl:2: not JSON"):
        ae.read_predictions(path)
    path.write_text(good + "\n" + json.dumps({"question": "q", "gold": "g"}) + "\n")
    with pytest.raises(ValueError, match=r":2: the row lacks retrieved, answer, em"):
        ae.read_predictions(path)
    path.write_text("\n")
    with pytest.raises(ValueError, match="no predictions"):
        ae.read_predictions(path)


def test_tool_on_a_seed_folder(tmp_path, capsys):
    tool = load_tool("answer_errors")
    for system, answer in (("memory_sft", "Portland or Denver"), ("memory_r1", "Denver")):
        folder = tmp_path / "seed-0" / "eval" / "validation" / system
        folder.mkdir(parents=True)
        em = float(answer == "Denver")
        rows = [row("Where does Andrew live?", "Denver", answer, em),
                row("What kind of pet does Priya have?", "rabbit", "dog", 0.0)]  # fmt: skip
        (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert tool.main([str(tmp_path / "seed-0")]) == 0
    out = json.loads((tmp_path / "seed-0" / "answer_errors_validation.json").read_text())
    assert out["systems"]["memory_sft"]["classes"]["hedged"] == 1
    assert out["systems"]["memory_r1"]["classes"] == {
        "right": 1, "beyond": 0, "hedged": 0, "empty": 0, "wrong": 1}  # fmt: skip
    assert "| memory_r1 | 2 | 50.0 | 0.0 | 0.0 | 0.0 | 50.0 |" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        tool.main([str(tmp_path / "seed-0"), "--split", "test"])
    assert e.value.code == 2
    assert "no evaluations of split 'test'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        tool.main([str(tmp_path / "seed-0"), "--systems", "mem0"])
    assert "mem0/predictions.jsonl" in capsys.readouterr().err
