"""traces.weigh_events: the operation words of the teacher's manager replies weighted in the
SFT loss (traces.event_weight), read back onto exactly those tokens by read_sft_pairs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from experiments.cpu_demo import traces
from memr1.env.manager_io import ADD, DELETE, ManagerOp, format_manager_output
from memr1.models.tokenizer_train import train_bpe_tokenizer
from memr1.train.sft import read_sft_pairs

ID_MAP = {0: 7, 1: 2}


def _row(ops, op_first=True, style="compact"):
    target = format_manager_output(ops, ID_MAP, style=style, op_first=op_first)
    return {"messages": [{"role": "user", "content": "Facts: ..."}], "target": target}


@pytest.mark.parametrize("op_first", [True, False])
@pytest.mark.parametrize("style", ["compact", "full"])
def test_every_entrys_event_word_is_weighted(op_first, style):
    ops = [ManagerOp(DELETE, 7), ManagerOp(ADD, None, "Ana lives in Rome.")]
    (row,) = traces.weigh_events([_row(ops, op_first, style)], 6.0)
    words = [row["target"][a:b] for a, b, w in row["target_weights"] if w == 6.0]
    assert words == ["DELETE", "ADD"]


def test_unit_weight_and_rows_without_an_event_are_unchanged():
    rows = [_row([ManagerOp(ADD, None, "Ana lives in Rome.")]), {"messages": [], "target": "Rome"}]
    assert traces.weigh_events(rows, 1.0) == rows
    assert traces.weigh_events(rows, 3.0)[1] == rows[1]
    with pytest.raises(ValueError, match="traces.event_weight must be >= 0"):
        traces.weigh_events(rows, -1.0)
    spaced = {"messages": [], "target": '{"memory": [{"event" : "ADD", "text": "x"}]}'}
    with pytest.raises(ValueError, match="an event word _EVENT does not match"):
        traces.weigh_events([spaced], 3.0)  # never a silently unweighted reply


def test_the_weighted_tokens_read_back_are_the_event_words(tmp_path):
    rows = traces.weigh_events(
        [_row([ManagerOp(DELETE, 7)]), _row([ManagerOp(ADD, None, "Ana lives in Rome.")])], 5.0
    )
    tok = train_bpe_tokenizer([r["target"] for r in rows] * 20, tmp_path / "tok", vocab_size=300)
    policy = SimpleNamespace(
        tokenizer=tok,
        render=lambda messages: messages[-1]["content"],
        encode=lambda text: (np.asarray(tok.encode(text, add_special_tokens=False)), None),
        eos_ids=[tok.eos_token_id],
    )
    path = tmp_path / "sft.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for (_, ids, weights), word in zip(read_sft_pairs(str(path), policy), ("DELETE", "ADD")):
        heavy = tok.decode([i for i, w in zip(ids, weights) if w == 5.0])
        assert heavy.strip(' "') == word
