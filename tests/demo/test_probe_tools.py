"""The probe tools refuse a seed folder they cannot read: name what is missing, write nothing."""

from __future__ import annotations

import pytest

from experiments.cpu_demo.run import check_seed_dir
from tests.tool import load_tool

NEEDED = ("base/config.json", "data/gold_ops.json")


def _touch(seed_dir, names):
    for name in names:
        (seed_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (seed_dir / name).write_text("{}")


def test_check_seed_dir_reads_the_seed_from_the_name_or_the_flag(tmp_path):
    seed_dir = tmp_path / "seed-7"
    with pytest.raises(ValueError, match="seed-7: no base/config.json"):
        check_seed_dir(seed_dir, NEEDED)
    _touch(seed_dir, NEEDED[:1])
    with pytest.raises(ValueError, match="no data/gold_ops.json"):
        check_seed_dir(seed_dir, NEEDED)
    _touch(seed_dir, NEEDED)
    assert check_seed_dir(seed_dir, NEEDED) == 7
    assert check_seed_dir(seed_dir, NEEDED, seed=3) == 3
    renamed = tmp_path / "run"
    seed_dir.rename(renamed)
    with pytest.raises(ValueError, match="cannot read the seed from the name; pass --seed"):
        check_seed_dir(renamed, NEEDED)
    assert check_seed_dir(renamed, NEEDED, seed=0) == 0


@pytest.mark.parametrize(
    "tool, needed, argv",
    [
        ("copy_probe", ("base/config.json", "data/metadata.json", "data/validation.json"), []),
        (
            "reward_probe",
            ("base/config.json", "data/gold_ops.json", "rl_tuples/metadata.json"),
            ["--answer", "sft"],
        ),
    ],
)
def test_probe_tool_names_what_is_missing(tmp_path, capsys, tool, needed, argv):
    main = load_tool(tool).main
    seed_dir = tmp_path / "seed-0"
    with pytest.raises(SystemExit) as exit_info:
        main([str(seed_dir), *argv])
    assert exit_info.value.code == 2 and "no base/config.json" in capsys.readouterr().err
    _touch(seed_dir, needed)
    with pytest.raises(SystemExit) as exit_info:
        main([str(seed_dir), *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "sft/checkpoints: not a directory" in err
    assert not list(seed_dir.glob("*_probe_*.json"))  # nothing written


@pytest.mark.parametrize("op_first", [False, True])
def test_copy_probe_scores_the_replies_in_the_runs_own_format(op_first):
    from types import SimpleNamespace

    from experiments.cpu_demo.probe import teacher_rows
    from tests.demo.turns import Turn

    turns = [Turn(("Ana moved to Austin last year.",), ()), Turn(("Ana likes jazz.",), ())]
    run = SimpleNamespace(
        seed=0,
        teacher_tuples=lambda split: SimpleNamespace(manager=turns, answer=[]),
        answer_teacher=lambda: None,
        c=SimpleNamespace(style="compact", traces=SimpleNamespace(op_first=op_first)),
    )
    rows = teacher_rows(run, "validation")["manager"]
    assert len(rows) == 2
    first = '{"memory": [{"event": "ADD"' if op_first else '{"memory": [{"id": "0"'
    assert all(r["target"].startswith(first) for r in rows), [r["target"] for r in rows]


def test_reward_probe_reads_the_runs_config_and_refuses_a_bad_one(tmp_path, capsys):
    main = load_tool("reward_probe").main
    seed_dir = tmp_path / "seed-0"
    _touch(seed_dir, ("base/config.json", "data/gold_ops.json", "rl_tuples/metadata.json"))
    with pytest.raises(SystemExit) as exit_info:
        main([str(seed_dir), "--config", str(tmp_path / "nowhere.py:ops")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "nowhere.py is not a Python config file" in err
    with pytest.raises(SystemExit) as exit_info:
        main([str(seed_dir), "--config", "experiments/cpu_demo/config.py:quick", "--quick"])
    assert exit_info.value.code == 2 and "pass one of them" in capsys.readouterr().err
    assert not list(seed_dir.glob("*_probe_*.json"))
