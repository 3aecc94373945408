"""The op-sampling probe (experiments/cpu_demo/op_probe.py, tools/op_probe.py): categories of
parsed replies, the per-kind table and its gate on scripted replies, the collision proxy's
report, and the tool end to end on a real checkpoint of a quick demo folder."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from experiments.cpu_demo import op_probe
from memr1.env.manager_io import (
    ADD,
    DELETE,
    NOOP,
    UPDATE,
    ManagerOp,
    format_manager_output,
    parse_manager_output,
)
from tests.demo.turns import Turn

PLAN = "Andrew plans to go to a concert."
TURN = Turn(("Andrew cancelled going to the concert.",), ((7, PLAN), (3, "Andrew lives in Rome.")))


def _reply(ops):
    _, id_map = TURN.manager_input(style="compact")
    return format_manager_output(ops, id_map, style="compact")


def _category(text):
    _, id_map = TURN.manager_input(style="compact")
    return op_probe.sample_category(parse_manager_output(text, id_map, new_fact_count=1).ops)


FACT = TURN.facts[0]
REPLIES = {
    "ADD": _reply([ManagerOp(ADD, None, FACT)]),
    "UPDATE": _reply([ManagerOp(UPDATE, 7, FACT)]),
    "DELETE": _reply([ManagerOp(DELETE, 7, "")]),
    "DELETE+ADD": _reply([ManagerOp(DELETE, 7, ""), ManagerOp(ADD, None, FACT)]),
    "NONE": '{"memory": []}',
    "other": _reply([ManagerOp(UPDATE, 3, "Andrew lives in Oslo."), ManagerOp(ADD, None, FACT)]),
}


@pytest.mark.parametrize("category", sorted(REPLIES))
def test_each_reply_falls_in_its_category(category):
    assert _category(REPLIES[category]) == category


def test_none_invalid_and_malformed_replies():
    assert _category(_reply([ManagerOp(NOOP, 7, PLAN)])) == "NONE"  # an explicit NONE entry
    assert _category('{"memory": [{"id": "9", "text": "", "event": "DELETE"}]}') == "invalid"
    assert _category('{"memory": [{"id": "0", "text": "x", "event": "MERGE"}]}') == "invalid"
    assert _category("Andrew Andrew Andrew") == "malformed"
    assert _category('{"memory": [{"id": "0", "text": "Andrew can') == "malformed"  # cut off


def test_gold_kinds():
    kind = op_probe.gold_kind
    assert kind({"op": "ADD"}) == "new"
    assert kind({"op": "UPDATE", "delete_add_ok": True}) == "change"
    assert kind({"op": "UPDATE", "delete_add_ok": False}) == "list"
    assert kind({"op": "DELETE"}) == "cancel"
    assert kind({"op": "NOOP", "fact": "x"}) == "repeat"
    assert kind({"op": "NOOP", "fact": None}) == "small_talk"
    with pytest.raises(ValueError, match="'D9:9': unknown op 'MOVE'"):
        kind({"op": "MOVE", "dia_id": "D9:9"})


# One state of each gated kind, each with its right reply.
STATES = {
    "new": (Turn(("Andrew works as a baker.",), ((7, PLAN),), dia_id="D1:1"), "ADD"),
    "repeat": (Turn((PLAN,), ((7, PLAN),), dia_id="D1:2"), "NONE"),
    "change": (Turn(("Andrew moved from Rome to Oslo.",), ((3, "x"),), dia_id="D1:3"), "UPDATE"),
    "list": (Turn(("Andrew took up chess too.",), ((3, "x"),), dia_id="D1:4"), "UPDATE"),
    "cancel": (dataclasses.replace(TURN, dia_id="D1:5"), "DELETE"),
}
GOLD = {
    ("s", "D1:1"): {"op": "ADD"},
    ("s", "D1:2"): {"op": "NOOP", "fact": PLAN},
    ("s", "D1:3"): {"op": "UPDATE", "delete_add_ok": True},
    ("s", "D1:4"): {"op": "UPDATE", "delete_add_ok": False},
    ("s", "D1:5"): {"op": "DELETE"},
}


def _right_reply(state, category):
    _, id_map = state.manager_input(style="compact")
    target = next(iter(id_map.values()))
    ops = {
        "ADD": [ManagerOp(ADD, None, state.facts[0])],
        "NONE": [],
        "UPDATE": [ManagerOp(UPDATE, target, state.facts[0])],
        "DELETE": [ManagerOp(DELETE, target, "")],
    }[category]
    return format_manager_output(ops, id_map, style="compact")


def _scripted(right_of: dict[str, int], group=4):
    """A sampler whose G = 4 replies per state are `right_of[kind]` right ones, the rest ADDs
    (ADD-only where the kind is new: there the rest are NONE)."""
    kinds = {state.dia_id: kind for kind, (state, _) in STATES.items()}

    def sample(states):
        out = []
        for state in states:
            kind = kinds[state.dia_id]
            n = right_of[kind]
            wrong = "NONE" if kind == "new" else "ADD"
            out.append(
                [_right_reply(state, STATES[kind][1])] * n
                + [_right_reply(state, wrong)] * (group - n)
            )
        return out

    return sample


def test_the_table_counts_each_kinds_samples_and_the_gate_names_who_fails():
    states = [s for s, _ in STATES.values()]
    passing = {"new": 4, "repeat": 2, "change": 1, "list": 1, "cancel": 1}
    got = op_probe.probe_ops(states, GOLD, _scripted(passing), style="compact")
    assert got["states"] == 5 and got["group_size"] == 4
    table = got["kinds"]
    assert {k: t["right"] for k, t in table.items()} == {
        "new": 1.0,
        "repeat": 0.5,
        "change": 0.25,
        "list": 0.25,
        "cancel": 0.25,
    }
    assert table["cancel"]["share"]["DELETE"] == 0.25 and table["cancel"]["share"]["ADD"] == 0.75
    assert all(sum(t["share"].values()) == pytest.approx(1.0) for t in table.values())
    assert op_probe.gate_failures(table) == []

    # The warm start of issue 26: it ADDs at every collision and keeps one repeat in four out.
    add_only = {"new": 4, "repeat": 1, "change": 0, "list": 0, "cancel": 0}
    table = op_probe.probe_ops(states, GOLD, _scripted(add_only), style="compact")["kinds"]
    failures = op_probe.gate_failures(table)
    assert [f.split(":")[0] for f in failures] == ["repeat", "change", "list", "cancel"]
    assert "repeat: right op NONE 0.250 < 0.45" in failures
    # A kind with no state cannot pass.
    assert op_probe.gate_failures({}, {"cancel": 0.25})[0].startswith("cancel: no state")
    with pytest.raises(KeyError, match="s D1:1"):
        op_probe.probe_ops(states[:1], {}, _scripted(passing), style="compact")


def test_the_first_event_table_normalises_each_states_scores_and_groups_them_by_kind():
    states = [s for s, _ in STATES.values()]
    kinds = {state.dia_id: kind for kind, (state, _) in STATES.items()}
    seen = {}

    def score(chats, continuations):
        seen["continuations"] = list(continuations)
        # log-probs 2, 1, 0, 0 for the events, shifted per state (only ratios count), but
        # NONE is the most likely one at the repeat.
        out = []
        for chat in chats:
            repeat = f'- "{PLAN}"' in chat[-1]["content"]  # the fact the repeat restates
            out.append([2.0 - 9 * repeat, 1.0, 0.0, 2.0 + 9 * repeat])
        return out

    got = op_probe.first_event_table(states, GOLD, score, style="compact")
    assert seen["continuations"][1] == '{"memory": [{"event": "UPDATE", "id": "'
    assert {k: v["states"] for k, v in got.items()} == {k: 1 for k in kinds.values()}
    assert all(sum(v["p"].values()) == pytest.approx(1.0) for v in got.values())
    z = 2 * math.e**2 + math.e + 1
    assert got["new"]["p"]["ADD"] == pytest.approx(math.e**2 / z)
    assert got["new"]["p"]["DELETE"] == pytest.approx(1 / z)
    assert got["repeat"]["p"]["NONE"] > 0.99
    with pytest.raises(ValueError, match=r"score gave \(5, 3\)"):
        op_probe.first_event_table(states, GOLD, lambda c, e: [[0.0] * 3] * 5, style="compact")


@pytest.mark.parametrize("style", ["compact", "full"])
def test_event_continuations_are_the_op_first_replies_up_to_their_id(style):
    ends = op_probe.event_continuations(style)
    _, id_map = TURN.manager_input(style=style)
    reply = format_manager_output([ManagerOp(DELETE, 7, "")], id_map, style=style, op_first=True)
    assert reply.startswith(ends[2]) and ends[2].endswith('"DELETE", "id": "')
    assert [e.replace(word, "") for e, word in zip(ends, op_probe.EVENTS)] == [
        ends[0].replace("ADD", "")
    ] * 4


def test_the_collision_report_separates_the_kinds_it_is_given():
    states = [
        Turn(("Andrew works as a baker.",), ((7, PLAN),), dia_id="D1:1"),  # overlap 1/3
        Turn((PLAN,), ((7, PLAN),), dia_id="D1:2"),  # 1
        dataclasses.replace(TURN, dia_id="D1:5"),  # {andrew, concert} of 4: 0.5
    ]
    got = op_probe.collision_report(states, GOLD, threshold=0.4)
    assert got["kinds"]["new"] == {"states": 1, "mean_overlap": pytest.approx(1 / 3), "above": 0.0}
    assert got["kinds"]["repeat"]["above"] == 1.0 and got["kinds"]["cancel"]["above"] == 1.0
    assert got["chosen"] == 2 and got["precision"] == 1.0
    assert op_probe.collision_report(states, GOLD, threshold=0.3)["precision"] == pytest.approx(
        2 / 3
    )


def check_op_probe_on(quick_seed, capsys):
    """tools/op_probe.py end to end on a quick demo's seed folder (its real SFT warm start), and
    tools/demo_warm_start.py on the same folder: run by tests/demo/test_demo_quick.py on its own
    run, so that the warm start is trained once in the suite."""
    from memr1.train.checkpoint import resolve_checkpoint
    from tests.tool import load_tool

    # Every stage's output is there: the tool runs each stage's skip path and writes timings.
    assert load_tool("demo_warm_start").main([str(quick_seed), "--quick"]) == 0
    assert "warm start: " in capsys.readouterr().out
    assert (quick_seed / "timings.json").is_file() and (quick_seed / "rl_tuples").is_dir()
    main = load_tool("op_probe").main
    out = quick_seed / "probe.json"
    argv = [str(quick_seed), "--quick", "--max_states", "3", "--group_size", "2"]
    # The quick SFT's few steps teach no operation list: the gate fails and names the kinds.
    assert main([*argv, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "| gold kind | states | right | ADD |" in printed and "collision proxy" in printed
    got = json.loads(out.read_text())
    assert got["states"] == 3 == sum(k["states"] for k in got["kinds"].values())
    assert got["group_size"] == 2 and got["temperature"] == 1.0 and got["max_new_tokens"] == 32
    assert got["checkpoint"] == str(quick_seed / "sft" / "checkpoints")
    for kind in got["kinds"].values():
        assert kind["samples"] == 2 * kind["states"]
        assert sum(kind["share"].values()) == pytest.approx(1.0)
    assert sum(k["states"] for k in got["collision"]["kinds"].values()) == 3
    step = resolve_checkpoint(got["checkpoint"])[1]
    gated = [*argv, "--out", str(out), "--gate", "--checkpoint", f"{got['checkpoint']}:{step}"]
    assert main(gated) == 1
    err = capsys.readouterr().err
    assert "op probe gate failed" in err and "new: " in err and "cancel: " in err
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--checkpoint", str(quick_seed / "nowhere")])
    assert exit_info.value.code == 2 and "does not exist" in capsys.readouterr().err
    # Teacher-forced: per kind, the probability of each first event of an op-first reply.
    assert main([*argv, "--out", str(out), "--teacher_forced"]) == 0
    first = json.loads(out.read_text())["first_event"]
    assert sum(k["states"] for k in first.values()) == 3
    for kind in first.values():
        assert sum(kind["p"].values()) == pytest.approx(1.0)
    capsys.readouterr()
    plain = quick_seed.parent / "plain_replies.py"  # a config whose replies are not op-first
    plain.write_text(
        "from experiments.cpu_demo.config import get_config as demo\n\n\n"
        "def get_config(arg=None):\n"
        "    config = demo('quick')\n"
        "    with config.unlocked():\n"
        "        config.traces.op_first = False\n"
        "    return config\n"
    )
    with pytest.raises(SystemExit) as exit_info:
        main([str(quick_seed), "--config", str(plain), "--max_states", "3", "--teacher_forced"])
    assert exit_info.value.code == 2 and "traces.op_first is off" in capsys.readouterr().err
    _check_scorer_on(quick_seed, got["checkpoint"])


def _check_scorer_on(quick_seed, checkpoint):
    """The teacher-forced scorer of --teacher_forced on the quick run's real warm start: batched
    and padded to bucketed widths, it gives each (prompt, continuation) the summed log-prob it
    gives alone at its own width."""
    import numpy as np

    from experiments.cpu_demo.__main__ import read_config
    from experiments.cpu_demo.run import SeedRun
    from memr1.tuples import read_tuples
    from tests.tool import load_tool

    tool = load_tool("op_probe")
    run = SeedRun(read_config(None, quick=True), 0, quick_seed, algo="grpo", log=print)
    policy, _ = tool.load_policy(run, checkpoint)
    states = read_tuples(run.rl_tuples, "manager")[:3]
    chats = [TURN.manager_input(style="compact")[0]] + [
        t.manager_input(style="compact")[0] for t in states
    ]
    ends = op_probe.event_continuations("compact")
    batched = tool.continuation_scorer(policy, batch=3, width_step=64)(chats, ends)
    alone = tool.continuation_scorer(policy, batch=1, width_step=1)(chats, ends)
    assert batched.shape == (len(chats), len(ends)) and np.all(batched < 0)
    np.testing.assert_allclose(batched, alone, rtol=1e-4, atol=1e-4)
