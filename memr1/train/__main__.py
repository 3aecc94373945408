"""Train one Memory-R1 agent: SFT, GRPO or PPO on the answer or the manager stage.

  python -m memr1.train --config configs/memr1.py:stage=answer,algo=grpo,backbone=qwen2.5-7b \
      --hf_dir /ckpt/Qwen2.5-7B-Instruct --tuples tuples/locomo-train --workdir runs/answer-grpo

  python -m memr1.train --config configs/memr1.py:stage=manager,algo=grpo,runlocal \
      --config.tokenizer_dir synth/tokenizer --tuples synth/tuples \
      --answer_checkpoint runs/answer-grpo/checkpoints --workdir runs/manager-grpo

  python -m memr1.train --config configs/memr1.py:stage=answer,algo=sft --sft_data traces.jsonl ...

Training tuples come from `python -m memr1.tuples`; SFT data is JSONL of
{"messages": [...chat...], "target": "reply"} (e.g. a stronger model's traces: Memory-SFT),
optionally with "target_weights" (character spans of the target weighted in the loss), or of
{"prompt_ids": [...], "target_ids": [...]} (token ids as they are: another task's rows mixed
into the same batches; `memr1.train.sft.read_sft_pairs`).
The partner agent is frozen while one trains (the paper's choice): the manager stage's reward
comes from the Answer Agent of --answer_checkpoint (the backbone's own weights if unset).
Checkpoints (Orbax) go to WORKDIR/checkpoints, written asynchronously, and resume automatically;
metrics to WORKDIR/logs (TensorBoard + metrics.jsonl) and, with --config.train.wandb_project,
to Weights & Biases (files in WORKDIR/wandb; a restart resumes the same W&B run:
`memr1.train.wandb_log`).

Reward: --config.train.reward=em (the paper's, default) | em_normalized | f1 | judge scores the
Answer Agent's answers in both stages and in validation (`memr1.eval.reward`); judge takes the
config's `judge` section (an OpenAI-compatible server, or "local": a frozen copy of the
backbone's start weights through the project's sampler).

Validation: --config.train.eval_every=K with --val_tuples (tuples of the validation split:
`python -m memr1.tuples --config.data.split=validation`, or tfds:DATA_DIR:validation) for GRPO /
PPO, or --val_sft_data (JSONL like --sft_data) for SFT, scores the policy greedily before the
first step, every K steps and after the last (`val/...` in the logs, `memr1.train.validators`),
and keeps the best checkpoint by train.keep_best beside the last train.keep. Every checkpoint
flag (--init_checkpoint, --answer_checkpoint, memr1.evaluate's, tools/export_hf.py) takes DIR
(its latest step), DIR:STEP or DIR:best.

LoRA: --config.train.lora_rank=8 (with train.lora_alpha, train.lora_module_path) trains qwix
LoRA adapters on the policy and freezes its base weights (`memr1.train.lora`); the PPO critic is
still trained whole. Checkpoints of a LoRA run are merged into plain weights wherever they are
loaded as a model (--init_checkpoint, --answer_checkpoint, memr1.evaluate, tools/export_hf.py).

Exit status: 0 done; 2 bad input or settings (refused before any model is loaded where the
settings alone show it: loop sizes, the mesh against the model's shapes, memory sizes, the
reward, W&B); 3 stopped by the NaN/inf guard under train.on_nonfinite=stop (the last checkpoint
predates the bad step); 4 the judge reward's server still failed after its retries.
"""

from __future__ import annotations

import sys
from pathlib import Path

from absl import app, flags, logging
from ml_collections import config_flags

from memr1.env import load
from memr1.env.policy import agent_budget
from memr1.env.setup import check_memory_config
from memr1.eval.judge_backends import JudgeBackendError
from memr1.memory import BankOverflowError
from memr1.rl import grpo, ppo
from memr1.sampling.engine import EngineSettings
from memr1.torchless import without_torch
from memr1.train import faults, loop, lora, mesh, sft, validators, wandb_log
from memr1.train.checkpoint import Checkpointer
from memr1.train.faults import parse_faults
from memr1.train.metrics_log import MetricsWriter, NonFiniteError
from memr1.train.prepare import has_checkpoint, prepare_models
from memr1.train.stages import answer_reward, check_reward_config, reward_env, rl_states

_CONFIG = config_flags.DEFINE_config_file("config", "configs/memr1.py", "Experiment config.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (checkpoints, logs).")
_HF_DIR = flags.DEFINE_string("hf_dir", None, "Local HF checkpoint of the backbone.")
_TUPLES = flags.DEFINE_string("tuples", None, "python -m memr1.tuples output, or tfds:DATA_DIR.")
_SFT_DATA = flags.DEFINE_string(
    "sft_data", None, "JSONL of {messages, target} (or {prompt_ids, target_ids}) for SFT."
)
_INIT = flags.DEFINE_string(
    "init_checkpoint", None, "Start from this run's policy (e.g. SFT): DIR, DIR:STEP or DIR:best."
)
_ANSWER = flags.DEFINE_string(
    "answer_checkpoint",
    None,
    "Frozen Answer Agent for the manager stage's reward: DIR, DIR:STEP or DIR:best.",
)
_VAL_TUPLES = flags.DEFINE_string(
    "val_tuples", None, "Validation tuples (data.split=validation), or tfds:DATA_DIR:SPLIT."
)
_VAL_SFT = flags.DEFINE_string("val_sft_data", None, "JSONL of {messages, target}: SFT validation.")
_INJECT = flags.DEFINE_string(
    "inject_nonfinite",
    None,
    "Fault drills only: STEP[:loss|grads],... poisons these steps with a NaN loss (default) or "
    "inf gradients inside the real update, to exercise the NaN/inf guard.",
)


def check_settings(config, *, sft_data, tuples, val_tuples=None, val_sft_data=None) -> None:
    """Refuses settings that cannot work, before a model is loaded or compiled."""
    t = config.train
    mesh.resolve_micro_batches(config)
    if config.model.param_dtype != "float32":
        raise ValueError(
            f"config model.param_dtype={config.model.param_dtype!r}: training keeps float32 "
            "master weights (AdamW steps of lr ~1e-6 are below bfloat16's resolution and round "
            "away); use model.dtype=bfloat16 for bfloat16 compute"
        )
    if t.drop_zero_signal and config.algo != "grpo":
        raise ValueError(
            f"config train.drop_zero_signal=True is a GRPO option (algo={config.algo}: its "
            "advantages do not vanish with the group's reward spread)"
        )
    if t.width_classes != 1 and config.algo != "grpo":
        raise ValueError(
            f"config train.width_classes={t.width_classes!r} is a GRPO option (algo="
            f"{config.algo}: its rows are not packed in groups)"
        )
    if t.oversample != 1 and config.algo != "grpo":
        raise ValueError(
            f"config train.oversample={t.oversample!r} is a GRPO option (algo={config.algo})"
        )
    loop.LoopConfig.from_config(config)
    if isinstance(t.keep, bool) or not isinstance(t.keep, int) or t.keep < 1:
        raise ValueError(f"config train.keep={t.keep!r}: must be an integer >= 1")
    if t.rollout_batch_size < 0:
        raise ValueError(f"config train.rollout_batch_size={t.rollout_batch_size}: must be >= 0")
    lora.LoraConfig.from_config(config)  # refuses a bad rank, alpha or module regex
    if config.algo == "sft" and not sft_data:
        raise ValueError("algo=sft needs --sft_data (JSONL of {messages, target})")
    if config.algo != "sft" and not tuples:
        raise ValueError(f"algo={config.algo} needs --tuples (python -m memr1.tuples)")
    if config.algo != "sft" and config.stage == "manager":
        check_memory_config(config.memory)
    grpo.GRPOConfig.from_config(config)
    if config.algo != "sft":
        ppo.PPOConfig.from_config(config)
    validators.check_flags(config, tuples=tuples, val_tuples=val_tuples, val_sft_data=val_sft_data)
    check_reward_config(config)
    wandb_log.check(config)


def open_checkpoints(workdir: Path, config, models) -> Checkpointer:
    """The run's checkpoints: the last `train.keep` steps (and the best validated one), written
    while training continues; every read of the directory, the next save and the exit (also on
    an error) wait for an unfinished write (`memr1.train.checkpoint`)."""
    t = config.train
    return Checkpointer(
        workdir / "checkpoints",
        keep=t.keep,
        keep_best=bool(t.eval_every and t.keep_best),
        async_save=True,
        metadata=lora.checkpoint_metadata(models.lora),
    )


def train(
    config,
    *,
    workdir,
    hf_dir,
    tuples,
    sft_data,
    init_checkpoint,
    answer_checkpoint,
    inject_nonfinite=(),
    val_tuples=None,
    val_sft_data=None,
):
    # -- setup ------------------------------------------------------------------------------
    mesh.maybe_initialize_distributed()
    t = config.train
    check_settings(
        config, sft_data=sft_data, tuples=tuples, val_tuples=val_tuples, val_sft_data=val_sft_data
    )
    loop_cfg = loop.LoopConfig.from_config(config)
    val_records = validators.read_records(config, val_tuples)
    build_step = faults.wrapper(inject_nonfinite)
    rl = config.algo != "sft"
    # A served judge's settings (and key) are checked before any model loads; a local judge
    # samples from its own frozen copy of the start weights, loaded beside the policy.
    local = rl and t.reward == "judge" and config.judge.kind == "local"
    reward = answer_reward(config) if rl and not local else None
    wandb_run = wandb_log.open_run(config, workdir)
    try:
        return _train(
            config, t, loop_cfg, val_records, build_step, reward, wandb_run,
            workdir=workdir, hf_dir=hf_dir, tuples=tuples, sft_data=sft_data,
            init_checkpoint=init_checkpoint, answer_checkpoint=answer_checkpoint,
            val_sft_data=val_sft_data,
        )  # fmt: skip
    finally:
        if wandb_run is not None:  # a failure before the writer took it over
            wandb_run.finish(failed=True)


def _local_judge_reward(config, hf_dir):
    """The judge reward with judge.kind="local": a frozen copy of the backbone's start weights."""
    backbone = load.load_backbone(
        hf_dir=hf_dir or config.hf_dir,
        size=config.model.size,
        tokenizer_dir=config.tokenizer_dir,
        dtype=config.model.dtype,
        param_dtype=config.model.param_dtype,
        seed=config.seed,
        attention=config.model.attention,
    )
    return answer_reward(
        config,
        local_judge=load.local_judge(
            backbone,
            batch_size=config.agents.batch_size,
            engine=EngineSettings.from_config(config),
        ),
    )


def _train(
    config,
    t,
    loop_cfg,
    val_records,
    build_step,
    reward,
    wandb_run,
    *,
    workdir,
    hf_dir,
    tuples,
    sft_data,
    init_checkpoint,
    answer_checkpoint,
    val_sft_data,
):
    models = prepare_models(
        config,
        hf_dir=hf_dir or config.hf_dir,
        init_checkpoint=init_checkpoint,
        answer_checkpoint=answer_checkpoint,
        resuming=has_checkpoint(Path(workdir) / "checkpoints"),
    )
    if config.algo != "sft" and reward is None:
        reward = _local_judge_reward(config, hf_dir)
    backbone, setup, st = models.backbone, models.setup, models.state
    policy = load.make_policy(
        backbone,
        None if st is None else st.params,
        batch_size=config.agents.batch_size,
        max_prompt_tokens=config.agents.max_prompt_tokens,
        name=config.stage,
        engine=EngineSettings.from_config(config),
    )
    workdir = Path(workdir)
    with (
        open_checkpoints(workdir, config, models) as ckpt,
        MetricsWriter(workdir / "logs", wandb_run=wandb_run) as writer,
    ):
        run = dict(cfg=loop_cfg, pad_id=backbone.pad_id, checkpointer=ckpt, writer=writer)
        # -- SFT --------------------------------------------------------------------------------
        if config.algo == "sft":
            pairs = sft.read_sft_pairs(sft_data, policy)
            sft_cfg = sft.SFTConfig.from_config(config)
            step_fn = build_step(setup, sft.sft_spec(setup, sft_cfg))
            validate = validators.for_sft(config, setup, policy, val_sft_data, backbone.pad_id)
            return loop.run_sft(
                setup, st, step_fn, pairs, length=t.sft_length, validate=validate, **run
            )
        # -- RL data and rollout ---------------------------------------------------------------
        env = reward_env(config, models, reward) if config.stage == "manager" else None
        states, do_rollout = rl_states(config, models, policy, tuples, reward=reward, env=env)
        validate = validators.for_rl(config, policy, val_records, env, reward)
        if not states:
            raise ValueError(f"{tuples}: no {config.stage} tuples to train on")
        # -- update ------------------------------------------------------------------------------
        update = loop.make_rl_update(
            setup,
            config.algo,
            grpo_cfg=grpo.GRPOConfig.from_config(config),
            ppo_cfg=ppo.PPOConfig.from_config(config),
            ref_params=models.reference,
            build_step=build_step,
        )
        return loop.run_rl(
            setup,
            st,
            update,
            states,
            do_rollout,
            response_width=agent_budget(config, config.stage),
            validate=validate,
            **run,
        )


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)
    if not _WORKDIR.value:
        print("memr1.train: error: --workdir is required", file=sys.stderr)
        sys.exit(2)
    try:
        final = train(
            _CONFIG.value,
            workdir=_WORKDIR.value,
            hf_dir=_HF_DIR.value,
            tuples=_TUPLES.value,
            sft_data=_SFT_DATA.value,
            init_checkpoint=_INIT.value,
            answer_checkpoint=_ANSWER.value,
            inject_nonfinite=parse_faults(_INJECT.value),
            val_tuples=_VAL_TUPLES.value,
            val_sft_data=_VAL_SFT.value,
        )
    except NonFiniteError as err:
        with Checkpointer(Path(_WORKDIR.value) / "checkpoints") as ckpt:
            last = ckpt.latest_step()
        kept = (
            "no checkpoint was written" if last is None else f"the last checkpoint is step {last}"
        )
        print(
            f"memr1.train: stopped: {err} (train.on_nonfinite=stop); {kept} in "
            f"{_WORKDIR.value}/checkpoints, and the refused step is in logs/metrics.jsonl",
            file=sys.stderr,
        )
        sys.exit(3)
    except (ValueError, FileNotFoundError) as err:
        print(f"memr1.train: error: {err}", file=sys.stderr)
        sys.exit(2)
    except JudgeBackendError as err:
        print(
            f"memr1.train: error: the judge reward failed: {err} (config judge.base_url; the "
            f"last checkpoint in {_WORKDIR.value}/checkpoints is intact)",
            file=sys.stderr,
        )
        sys.exit(4)
    except BankOverflowError as err:
        # A sampled manager reply filled a candidate bank under memory.overflow=raise.
        print(
            f"memr1.train: error: {err}; raise config memory.capacity or set memory.overflow to "
            f"an evicting policy (the last checkpoint in {_WORKDIR.value}/checkpoints is intact)",
            file=sys.stderr,
        )
        sys.exit(2)
    print(f"trained to step {int(final.step)}; checkpoints in {_WORKDIR.value}/checkpoints")


if __name__ == "__main__":
    without_torch()
    app.run(main)
