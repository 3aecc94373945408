"""The demo's config (experiments/cpu_demo/config.py) and the stage command lines derived from it.

The expected flags are those the demo ran with when its README numbers were measured: a change
here changes the demo's numbers, so it must come with a new measurement (docs/demo.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.cpu_demo.__main__ import parse_args, read_config
from experiments.cpu_demo.commands import config_flags, load_config, stage_overrides
from experiments.cpu_demo.config import get_config, synth_config
from experiments.cpu_demo.run import SeedRun

SHARED = [
    "--config.seed=0",
    "--config.agents.style=compact",
    "--config.agents.batch_size={batch}",
    "--config.agents.max_prompt_tokens=512",
    "--config.agents.manager_max_new_tokens=64",
    "--config.agents.answer_max_new_tokens=40",
    "--config.memory.capacity=128",
    "--config.memory.text_bytes=256",
    "--config.memory.retriever=exact_numpy",
    "--config.memory.fact_source=observation",
    "--config.memory.k_per_fact=3",
    "--config.memory.k_per_speaker=1",
    "--config.train.kl_beta={kl_beta}",
    "--config.train.keep=1",
]


def _flags(stage: str, algo: str | None) -> list[str]:
    overrides = stage_overrides(get_config(), 0, stage=stage, algo=algo)
    return config_flags("ARG", overrides)[1:]


def _shared(batch: int, kl_beta: float = 0.0) -> list[str]:
    return [f.format(batch=batch, kl_beta=kl_beta) for f in SHARED]


def test_the_full_demo_stages_run_with_these_flags():
    assert _flags("sft", None) == _shared(8) + [
        "--config.train.warmup_steps=50",
        "--config.train.steps=2000",
        "--config.train.batch_size=8",
        "--config.train.lr=0.001",
        "--config.train.checkpoint_every=2000",
        # Batches of rows of similar length padded to one of 8 widths, a cosine decay.
        "--config.train.sft_group_by_length=16",
        "--config.train.sft_buckets=8",
        "--config.train.lr_decay=cosine",
    ]
    answer = [
        "--config.train.warmup_steps=5",
        "--config.train.steps=90",
        "--config.train.batch_size=16",
        "--config.train.lr=0.0003",
        "--config.train.checkpoint_every=90",
        # Validation changes no update (it only reads the weights): the numbers stand.
        "--config.train.eval_every=15",
        "--config.train.group_size=8",
        "--config.train.rollout_batch_size=16",
    ]
    assert _flags("answer", "grpo") == _shared(16) + answer
    assert _flags("answer", "ppo") == _shared(16) + answer + [
        f"--config.train.critic_lr={10 * 3e-4}"
    ]
    manager = [
        "--config.train.warmup_steps=5",
        "--config.train.steps=60",
        "--config.train.batch_size=8",
        "--config.train.lr=0.0002",
        "--config.train.checkpoint_every=60",
        "--config.train.eval_every=10",
        # Every turn with a linked question; its reward reads the questions answerable at its
        # turn and those about the memories shown to the manager.
        "--config.train.min_overlap=0.0",
        "--config.train.linked_qa=shown",
        "--config.train.oversample=1",
        "--config.train.group_size=8",
        "--config.train.rollout_batch_size=8",
    ]
    # The manager stage's own KL weight to the warm start (config.manager.kl_beta).
    assert _flags("manager", "grpo") == _shared(8, kl_beta=0.1) + manager
    ppo = _shared(8, kl_beta=0.1) + manager + ["--config.train.critic_lr=0.002"]
    assert _flags("manager", "ppo") == ppo
    assert _flags("eval", None) == _shared(8) + ["--config.train.warmup_steps=5"]
    # Dynamic sampling in the answer stage, off by default (config.answer.oversample).
    config = get_config()
    with config.unlocked():
        config.answer.oversample = 2
    assert stage_overrides(config, 0, stage="answer")["train.oversample"] == 2
    with pytest.raises(ValueError, match="unknown stage 'copy'"):
        stage_overrides(get_config(), 0, stage="copy")


@pytest.mark.parametrize("arg, answer, manager", [(None, 40, 64), ("quick", 24, 32)])
def test_each_agent_keeps_the_budget_the_demo_measured_with(arg, answer, manager):
    """The RL stages trained at train.max_new_tokens, which the demo set to the agent's budget:
    with one budget per agent, each stage's rollouts, and the manager stage's frozen answerer,
    read the same numbers as before (40 / 64, quick 24 / 32)."""
    from memr1.env.answer import AnswerConfig
    from memr1.env.policy import SamplingConfig

    c = get_config(arg)
    for stage, want in (("answer", answer), ("manager", manager)):
        config = load_config(f"stage={stage},runlocal", stage_overrides(c, 0, stage=stage))
        assert SamplingConfig.from_config(config, "rollout").max_new_tokens == want
        assert SamplingConfig.from_config(config, stage).max_new_tokens == want
        assert AnswerConfig.from_config(config).sampling.max_new_tokens == answer


@pytest.mark.parametrize("arg", [None, "quick"])
@pytest.mark.parametrize(
    "stage, algo",
    [("sft", None), ("answer", "grpo"), ("answer", "ppo"), ("manager", "grpo"), ("eval", None)],
)
def test_every_override_is_a_field_of_configs_memr1(arg, stage, algo):
    overrides = stage_overrides(get_config(arg), 3, stage=stage, algo=algo)
    config = load_config(
        f"stage={'manager' if stage == 'manager' else 'answer'},runlocal", overrides
    )
    for dotted, value in overrides.items():
        section = config
        for part in dotted.split("."):
            section = section[part]
        assert section == value, dotted


def test_quick_shrinks_the_world_and_the_stages_only():
    full, quick = get_config().to_dict(), get_config("quick").to_dict()
    changed = {k for k in full if full[k] != quick[k]}
    assert changed == {
        "synth",
        "vocab_size",
        "traces",
        "pretrain",
        "sft",
        "answer",
        "manager",
        "group_size",
    }
    assert synth_config(get_config("quick"), 5).splits == (
        ("train", 2),
        ("validation", 1),
        ("test", 1),
    )
    assert synth_config(get_config(), 5).seed == 5


def test_the_config_is_locked_and_its_arg_checked():
    config = get_config()
    with pytest.raises(AttributeError):
        config.answer.new_field = 2
    with pytest.raises(ValueError, match="unknown config arg key 'fast'"):
        get_config("fast")


def test_the_cli_reads_a_config_file_or_the_quick_shortcut(tmp_path):
    path = str(Path(__file__).resolve().parents[2] / "experiments" / "cpu_demo" / "config.py")
    assert read_config(f"{path}:quick") == get_config("quick")
    assert read_config(path) == get_config()
    assert read_config(None, quick=True) == get_config("quick")
    with pytest.raises(ValueError, match="not a Python config file"):
        read_config(str(tmp_path / "missing.py"))
    with pytest.raises(SystemExit):
        parse_args(["--quick", "--config", path])


def test_the_banks_of_each_stage_are_named_and_checked(tmp_path):
    run = SeedRun(get_config(), 0, tmp_path, algo="grpo", log=print)
    assert run.bank_dirs("answer") == [tmp_path / "tuples", tmp_path / "careful_tuples"]
    assert run.bank_dirs("manager") == [tmp_path / "careful_tuples"]
    config = get_config()
    with config.unlocked():
        config.banks.manager = "gold"
    bad = SeedRun(config, 0, tmp_path, algo="grpo", log=print)
    with pytest.raises(ValueError, match=r"config.banks.manager: .*\('gold',\)"):
        bad.bank_dirs("manager")


def test_the_manager_stage_reads_one_kind_of_bank(tmp_path):
    config = get_config()
    with config.unlocked():
        # A config file that gives the manager stage two kinds of bank (ConfigDict keeps a
        # field's type, so the whole section is replaced).
        config.banks = dict(answer=("teacher",), manager=("teacher", "careful"))
    run = SeedRun(config, 0, tmp_path, algo="grpo", log=print)
    with pytest.raises(ValueError, match="config.banks.manager: name one kind of bank"):
        run.make_rl_tuples()
    assert not run.rl_tuples.exists()  # nothing half written


def test_rl_tuples_built_with_other_settings_are_not_reused(tmp_path):
    import json

    run = SeedRun(get_config(), 0, tmp_path, algo="grpo", log=print)
    run.rl_tuples.mkdir()
    built = run.rl_tuple_settings()
    assert built["renamed_copies"] == 3 and built["oversample_copies"] == 2
    built = json.loads(json.dumps(built))  # as recorded
    meta = run.rl_tuples / "metadata.json"
    meta.write_text(json.dumps({"build": built}))
    run.make_rl_tuples()  # the same settings: reused as it is
    assert json.loads(meta.read_text()) == {"build": built}
    config = get_config()
    with config.unlocked():
        config.answer.oversample_copies = 0
    other = SeedRun(config, 0, tmp_path, algo="grpo", log=print)
    with pytest.raises(ValueError, match=r"rl_tuples was built with .*oversample_copies: built 2"):
        other.make_rl_tuples()
    assert json.loads(meta.read_text()) == {"build": built}  # the folder is left as it was


def test_the_world_and_the_tuples_are_reused_only_as_configured(tmp_path):
    import json

    from experiments.cpu_demo.seed_tuples import record_build

    def run_of(config):
        return SeedRun(config, 0, tmp_path, algo="grpo", log=print)

    run = run_of(get_config("quick"))
    run.make_data()  # the quick world, generated
    train = (run.data / "train.json").read_text()
    run.make_data()  # the same world: reused
    fewer_cities, two_read = get_config("quick"), get_config("quick")
    with fewer_cities.unlocked():
        fewer_cities.synth.num_cities = 4
    with two_read.unlocked():
        two_read.memory.k_per_speaker = 2
    with pytest.raises(ValueError, match=r"data was built with .*num_cities: built 6, config 4"):
        run_of(fewer_cities).make_data()
    assert (run.data / "train.json").read_text() == train  # left as it was

    val = {"split": "validation", "answer_from": ["teacher", "careful"], "manager_from": "careful"}
    folders = {
        "make_tuples": (run.tuples, {}),
        "make_careful_tuples": (run.careful_tuples, {}),
        "make_val_tuples": (run.val_tuples, val),
    }
    for make, (folder, extra) in folders.items():
        record_build(folder, {**extra, **run.bank_settings()})
        getattr(run, make)()  # built with these settings: reused, nothing rebuilt
        assert sorted(p.name for p in folder.iterdir()) == ["metadata.json"]
        with pytest.raises(ValueError, match=rf"{folder.name} was built .*k_per_speaker: built 1"):
            getattr(run_of(two_read), make)()
        record_build(folder, extra)  # a folder from before the record: the retrieval unknown
        with pytest.raises(ValueError, match=r"memory.k_per_fact: built '\(none\)', config 3"):
            getattr(run, make)()
        assert json.loads((folder / "metadata.json").read_text()) == {"build": extra}
    # The traces are written from the tuples: another retrieval refuses them too.
    assert run_of(two_read).trace_settings()["memory"]["k_per_speaker"] == 2
    assert run.trace_settings()["memory"] == run.bank_settings()["memory"]


def test_read_config_refuses_quick_beside_a_config_file():
    with pytest.raises(ValueError, match="pass one of them"):
        read_config("experiments/cpu_demo/config.py", quick=True)


def test_traces_and_sft_built_with_other_settings_are_not_reused(tmp_path):
    from experiments.cpu_demo.seed_tuples import record_build

    run = SeedRun(get_config(), 0, tmp_path, algo="grpo", log=print)
    run.sft_data.parent.mkdir()
    run.sft_data.write_text('{"messages": [], "target": "x"}\n')
    mix = run.sft_data.with_name("manager_mix.json")
    mix.write_text('{"ADD": 1}\n')
    with pytest.raises(ValueError, match=r"traces holds no record of the settings"):
        run.make_traces()  # a folder from before the settings were recorded
    record_build(run.sft_data.parent, run.trace_settings())
    run.make_traces()  # the same settings: reused, its op mix read back
    assert run.trace_mix == {"ADD": 1}
    one_draw = get_config()
    with one_draw.unlocked():
        one_draw.traces.draws_per_turn, one_draw.sft.steps = 1, 1400
    other = SeedRun(one_draw, 0, tmp_path, algo="grpo", log=print)
    with pytest.raises(ValueError, match=r"traces.draws_per_turn: built 4, config 1"):
        other.make_traces()
    assert run.sft_data.read_text() == '{"messages": [], "target": "x"}\n'  # left as it was
    unit, weighted = get_config(), get_config()
    unit.traces.event_weight, weighted.traces.event_weight = 1.0, 4.0
    record_build(
        run.sft_data.parent, SeedRun(unit, 0, tmp_path, algo="grpo", log=print).trace_settings()
    )
    heavy = SeedRun(weighted, 0, tmp_path, algo="grpo", log=print)
    with pytest.raises(ValueError, match=r"traces.event_weight: built '\(none\)', config 4.0"):
        heavy.make_traces()  # unit weights record no key: a build from before it is reusable

    record_build(run.sft, run.sft_settings())
    with pytest.raises(ValueError, match=r"sft.steps: built 2000, config 1400"):
        other.train_sft()  # refused before any step would resume
    run.sft_data.write_text('{"messages": [], "target": "y"}\n')  # the traces rebuilt
    with pytest.raises(ValueError, match=r"sft was built with .*traces_sha256"):
        run.train_sft()
    assert sorted(p.name for p in run.sft.iterdir()) == ["metadata.json"]


def test_the_manager_stage_kl_weight_is_its_own_and_the_answer_stage_keeps_the_shared_one():
    config = get_config()
    assert config.manager.kl_beta == 0.1 and config.kl_beta == 0.0
    assert stage_overrides(config, 0, stage="manager")["train.kl_beta"] == 0.1
    assert stage_overrides(config, 0, stage="answer", algo="grpo")["train.kl_beta"] == 0.0
    with config.unlocked():
        config.manager.kl_beta = None  # None: the shared config.kl_beta
    assert stage_overrides(config, 0, stage="manager")["train.kl_beta"] == 0.0


def _run_with(tmp_path, answer="last", manager="last"):
    config = get_config()
    with config.unlocked():
        config.answer.checkpoint, config.manager.checkpoint = answer, manager
    return SeedRun(config, 0, tmp_path, algo="grpo", log=print)


def test_each_rl_stage_names_the_checkpoint_that_later_stages_read(tmp_path):
    run = _run_with(tmp_path, answer="best")
    assert run.checkpoint_of(run.rl_answer) == f"{run.rl_answer / 'checkpoints'}:best"
    assert run.checkpoint_of(run.rl_manager) == str(run.rl_manager / "checkpoints")
    assert run.checkpoint_of(run.sft) == str(run.sft / "checkpoints")  # SFT: always its last
    bad = _run_with(tmp_path, manager="newest")
    with pytest.raises(ValueError, match=r"config.manager.checkpoint: .*'newest'"):
        bad.checkpoint_of(bad.rl_manager)


def _with_traces(run):
    run.sft_data.parent.mkdir(parents=True, exist_ok=True)
    run.sft_data.write_text('{"messages": [], "target": "x"}\n')
    return run


def test_an_evaluation_is_reused_only_if_it_read_what_the_config_names(tmp_path, monkeypatch):
    import json

    import memr1.evaluate

    calls = []

    def fake_evaluate(config, **kw):
        calls.append(kw)
        results = {"fresh": len(calls)}
        (Path(kw["workdir"]) / "results.json").parent.mkdir(parents=True, exist_ok=True)
        (Path(kw["workdir"]) / "results.json").write_text(json.dumps(results))
        return results

    monkeypatch.setattr(memr1.evaluate, "evaluate", fake_evaluate)
    run = _with_traces(_run_with(tmp_path))
    assert run.evaluate("memory_r1", "validation") == {"fresh": 1}
    assert run.evaluate("memory_r1", "validation") == {"fresh": 1}  # reused
    assert run.evaluate("locomo_rag", "validation") == {"fresh": 2}
    out = run.root / "eval" / "validation" / "memory_r1"
    record = json.loads((out / "metadata.json").read_text())["build"]
    assert record["answer"]["checkpoint"] == "last" and record["system"] == "memory_r1"
    best = _run_with(tmp_path, answer="best")  # another Answer Agent checkpoint: evaluated again
    assert best.evaluate("memory_r1", "validation") == {"fresh": 3}
    assert calls[-1]["answer_ckpt"].endswith("answer_grpo/checkpoints:best")
    assert calls[-1]["manager_ckpt"] == str(best.rl_manager / "checkpoints")
    slower = _run_with(tmp_path, answer="best")
    with slower.c.unlocked():
        slower.c.answer.lr = 1e-4  # another answer stage: memory_r1 read it, locomo_rag did not
    assert slower.evaluate("memory_r1", "validation") == {"fresh": 4}
    assert slower.evaluate("locomo_rag", "validation") == {"fresh": 2}


def test_an_rl_stage_is_reused_only_as_configured(tmp_path):
    import json

    trained = []

    def run_of(**changes):
        run = _with_traces(_run_with(tmp_path, answer=changes.pop("pick", "last")))
        with run.c.unlocked():
            run.c.answer.update(changes)
        run._train = lambda arg, overrides, workdir, **kw: trained.append(workdir.name)
        return run

    run = run_of()
    run.train_answer()  # new folders: their settings recorded
    run.train_manager()
    run_of().train_manager()  # the same settings: resumed or reused
    assert trained == ["answer_grpo", "manager_grpo", "manager_grpo"]
    record = json.loads((run.rl_manager / "metadata.json").read_text())["build"]
    assert record["answer"]["stage"]["command"]["train.lr"] == 3e-4
    faster = run_of(lr=1e-3)
    with pytest.raises(ValueError, match=r"answer_grpo was built .*train.lr: built 0.0003"):
        faster.train_answer()
    with pytest.raises(ValueError, match=r"manager_grpo was built .*lr: built 0.0003"):
        faster.train_manager()  # rewarded through another Answer Agent
    with pytest.raises(ValueError, match=r"answer.checkpoint: built 'last', config 'best'"):
        run_of(pick="best").train_manager()
    run.sft_data.write_text('{"messages": [], "target": "y"}\n')  # another warm start
    with pytest.raises(ValueError, match=r"answer_grpo was built .*sft.traces_sha256"):
        run.train_answer()
    assert len(trained) == 3  # nothing trained on a refused folder
    # A folder from before the settings were recorded (the reader alone) is refused too.
    legacy = run_of()
    (legacy.rl_manager / "metadata.json").write_text('{"build": {"answer_checkpoint": "last"}}')
    with pytest.raises(ValueError, match=r"manager_grpo was built .*algo: built '\(none\)'"):
        legacy.train_manager()


def test_the_warm_start_export_follows_its_sft(tmp_path, monkeypatch):
    import shutil
    from types import SimpleNamespace

    import memr1.env.load
    import memr1.models.hf_export
    import memr1.train.checkpoint
    from experiments.cpu_demo import sft_data

    exported = []

    def fake_export(cfg, params, out, **kw):
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text("{}")
        exported.append(out)

    monkeypatch.setattr(sft_data, "rehearsed", lambda *a: tmp_path / "data.jsonl")
    monkeypatch.setattr(sft_data, "longest_row", lambda *a: 64)
    backbone = SimpleNamespace(cfg=None, params=None)
    monkeypatch.setattr(memr1.env.load, "load_backbone", lambda **kw: backbone)
    monkeypatch.setattr(memr1.train.checkpoint, "restore_params", lambda *a: None)
    monkeypatch.setattr(memr1.models.hf_export, "export_hf", fake_export)

    def run_of(steps):
        run = _with_traces(_run_with(tmp_path))
        with run.c.unlocked():
            run.c.sft.steps = steps
        run._train = lambda *a, **kw: None
        return run

    run_of(3000).train_sft()
    run_of(3000).train_sft()  # the same warm start: its export reused
    assert len(exported) == 1
    shutil.rmtree(tmp_path / "sft")  # the warm start retrained under other settings
    run_of(1400).train_sft()
    assert len(exported) == 2  # the baselines' export follows it


@pytest.mark.parametrize("threshold, cached", [(None, True), ("1", False)])
def test_the_demo_process_caches_every_compiled_program(tmp_path, threshold, cached):
    """The demo process imports JAX before it sets up the cache (its evaluations run in it):
    the setup reaches JAX's config, every program is cached however fast it compiled, and a
    threshold the user set is kept."""
    code = (
        "import sys; from pathlib import Path; "
        "from experiments.cpu_demo.__main__ import _setup_environment; "
        "assert 'jax' in sys.modules; _setup_environment(Path(sys.argv[1])); "
        "import jax, jax.numpy as jnp; "
        "jax.jit(lambda x: x * 2 + 1)(jnp.ones(3)).block_until_ready()"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    if threshold is not None:
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = threshold
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, cwd=root, check=True)
    entries = list((tmp_path / ".jax_cache").glob("jit__lambda-*"))
    assert bool(entries) == cached
