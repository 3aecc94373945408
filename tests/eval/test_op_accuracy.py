"""Operation accuracy of a manager against synthloco's gold labels."""

import pytest

from memr1.eval import op_accuracy


def _gold(dia_id, op, *, fact="f", delete_add_ok=False):
    return {"dia_id": dia_id, "op": op, "fact": fact, "delete_add_ok": delete_add_ok}


def _pred(dia_id, *kinds):
    return {"dia_id": dia_id, "ops": [{"kind": k} for k in kinds]}


def test_predicted_label_collapses_op_lists():
    assert op_accuracy.predicted_label([]) == "NOOP"
    assert op_accuracy.predicted_label(["NOOP", "NOOP"]) == "NOOP"
    assert op_accuracy.predicted_label(["ADD"]) == "ADD"
    assert op_accuracy.predicted_label(["NOOP", "UPDATE", "ADD"]) == "UPDATE"
    assert op_accuracy.predicted_label(["DELETE", "ADD"]) == "DELETE+ADD"
    assert op_accuracy.predicted_label(["DELETE"]) == "DELETE"


def test_accuracy_hand_computed():
    gold = [
        _gold("D1:1", "ADD"),
        _gold("D1:2", "UPDATE"),  # list merge: DELETE+ADD is wrong here
        _gold("D1:3", "UPDATE", delete_add_ok=True),  # single value: DELETE+ADD accepted
        _gold("D1:4", "DELETE"),
        _gold("D1:5", "NOOP"),
        _gold("D1:6", "NOOP", fact=None),  # small talk: not scored
    ]
    preds = [
        _pred("D1:1", "ADD"),
        _pred("D1:2", "DELETE", "ADD"),
        _pred("D1:3", "DELETE", "ADD"),
        # D1:4 never reached the manager (no facts): counts as NOOP, which is wrong.
        _pred("D1:5", "NOOP"),
    ]
    out = op_accuracy.score(gold, preds)
    assert out["scored"] == 5
    assert out["accuracy"] == pytest.approx(3 / 5)
    assert out["per_gold_op"]["UPDATE"] == {"n": 2, "correct": 1, "accuracy": 0.5}
    assert out["confusion"]["DELETE"]["NOOP"] == 1
    assert out["confusion"]["UPDATE"]["DELETE+ADD"] == 2


def test_unknown_gold_op_is_an_error():
    with pytest.raises(ValueError, match="gold op"):
        op_accuracy.score([_gold("D1:1", "MERGE")], [])
