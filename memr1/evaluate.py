"""Evaluate a memory system on a benchmark and write its results to a work directory.

  python -m memr1.evaluate --config configs/memr1.py:system=mem0,dataset=locomo \
      --config.data.path ../shared/data/locomo10.json --hf_dir /ckpt/Qwen2.5-7B-Instruct \
      --workdir runs/mem0-qwen7b

  python -m memr1.evaluate --config configs/memr1.py:system=memory_r1,dataset=synthloco \
      --config.data.path synth/test.json --config.data.gold_ops synth/gold_ops.json \
      --config.tokenizer_dir synth/tokenizer --manager_checkpoint runs/manager/ckpt \
      --answer_checkpoint runs/answer/ckpt --workdir runs/r1-tiny

A checkpoint flag names a training run's checkpoint directory: DIR (its latest step), DIR:STEP
or DIR:best (the best validated step, `memr1.train.checkpoint.resolve_checkpoint`); results.json
records the step each agent was loaded from. Outputs are described in `memr1.env.outputs`.
Bad input (a missing file, a malformed dataset, an unknown system, a missing checkpoint step or
best) ends with one message naming what is wrong and exit code 2, and nothing is written.
"""

from __future__ import annotations

import sys

import jax
from absl import app, flags, logging
from ml_collections import config_flags
from tqdm import tqdm

from memr1.data.errors import DataError
from memr1.env import load, outputs, setup, systems
from memr1.env.memory_store import BankSpec
from memr1.eval.judge import LocomoJudge
from memr1.eval.judge_backends import backend_from_config
from memr1.eval.longmemeval_judge import (
    LongMemEvalItem,
    LongMemEvalJudge,
    summarize_longmemeval,
)
from memr1.models.hf_io import CheckpointError
from memr1.sampling.engine import EngineSettings
from memr1.torchless import without_torch

_CONFIG = config_flags.DEFINE_config_file("config", "configs/memr1.py", "Experiment config.")
_HF_DIR = flags.DEFINE_string("hf_dir", None, "Local HF checkpoint of the backbone.")
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint",
    None,
    "memr1 training checkpoint for both agents (memory_r1 / memory_sft): DIR, DIR:STEP, DIR:best.",
)
_MANAGER_CKPT = flags.DEFINE_string(
    "manager_checkpoint", None, "Checkpoint of the manager: DIR, DIR:STEP or DIR:best."
)
_ANSWER_CKPT = flags.DEFINE_string(
    "answer_checkpoint", None, "Checkpoint of the answer agent: DIR, DIR:STEP or DIR:best."
)
_EMBED_DIR = flags.DEFINE_string("embed_dir", None, "Sentence-encoder dir (default: MiniLM).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Output directory.")
_OVERWRITE = flags.DEFINE_bool("overwrite", False, "Replace an existing non-empty workdir.")


def _agent_params(backbone, spec):
    """(parameters, step) of a checkpoint spec (DIR, DIR:STEP, DIR:best), or (None, None)."""
    if not spec:
        return None, None
    from memr1.train.checkpoint import resolve_checkpoint, restore_params

    directory, step = resolve_checkpoint(spec)
    return restore_params(f"{directory}:{step}", backbone.params), step


def judge_backend(config, backbone):
    """The LLM judge of `config.judge` (None for kind "none"); "local" judges with the backbone."""
    if config.judge.kind != "local":
        return backend_from_config(config.judge)
    local = load.local_judge(
        backbone, batch_size=config.agents.batch_size, engine=EngineSettings.from_config(config)
    )
    return backend_from_config(config.judge, local=local)


def judge_scores(dataset: str, run, backend) -> tuple[list[float], dict | None]:
    """Per-prediction judge scores (1.0 correct), with the benchmark's own judge and summary.

    LongMemEval is judged with its own prompts (per question type, abstention aware) and
    summarised as its paper reports it; every other dataset with the LoCoMo judge.
    """
    preds = run.predictions
    if dataset != "longmemeval":
        result = LocomoJudge(backend).judge(
            [p.question for p in preds], [p.gold for p in preds], [p.answer for p in preds]
        )
        return list(map(float, result.scores)), None
    qa_of = {(c.sample_id, i): qa for c in run.conversations for i, qa in enumerate(c.qa)}
    items = []
    for p in preds:
        qa = qa_of[(p.sample_id, p.question_index)]
        items.append(
            LongMemEvalItem(
                qa.question_id or p.sample_id, qa.question_type, p.question, p.gold, p.answer
            )
        )
    verdicts = LongMemEvalJudge(backend).judge(items)
    summary = summarize_longmemeval(items, verdicts)
    if summary["unparseable"]:
        logging.warning(
            "LongMemEval judge: %d of %d replies unparseable (scored as wrong)",
            summary["unparseable"],
            len(verdicts),
        )
    return [float(v.correct) for v in verdicts], summary


def evaluate(config, *, hf_dir, manager_ckpt, answer_ckpt, embed_dir, workdir, overwrite):
    """Runs one system end to end and writes its outputs; returns the results dict."""
    from memr1.embed import Encoder

    if not workdir:
        raise ValueError("--workdir is required")
    setup.check_memory_config(config.memory)
    conversations = setup.load_conversations(config.data)
    gold_ops = setup.load_gold_ops(config.data.gold_ops)
    backbone = load.load_backbone(
        hf_dir=hf_dir or config.hf_dir,
        size=config.model.size,
        tokenizer_dir=config.tokenizer_dir,
        dtype=config.model.dtype,
        param_dtype=config.model.param_dtype,
        seed=config.seed,
        attention=config.model.attention,
    )
    trained = config.system in ("memory_r1", "memory_sft")
    manager_params, manager_step = _agent_params(backbone, manager_ckpt if trained else None)
    answer_params, answer_step = _agent_params(backbone, answer_ckpt if trained else None)
    a = config.agents

    def policy(params, name):
        return load.make_policy(
            backbone,
            params,
            batch_size=a.batch_size,
            max_prompt_tokens=a.max_prompt_tokens,
            name=name,
            engine=EngineSettings.from_config(config),
        )

    encoder = Encoder.from_dir(embed_dir)
    spec = systems.SystemSpec.from_config(config)
    questions = len(systems.questions_of(conversations, config.data.max_questions))
    total = sum(c.num_turns for c in conversations) + questions
    with tqdm(total=total, desc=f"{config.system}", unit="item", dynamic_ncols=True) as bar:
        run = systems.run_system(
            spec,
            conversations,
            embed=encoder.encode,
            dim=encoder.dim,
            bank=BankSpec.from_config(config),
            manager=policy(manager_params, "manager"),
            answerer=policy(answer_params, "answer"),
            extractor=policy(None, "extractor"),
            key=jax.random.key(config.seed),
            max_questions=config.data.max_questions,
            progress=lambda what, n: bar.update(n),
        )
    meta = {
        "dataset": f"{config.data.kind}:{config.data.path} ({config.data.split})",
        "backbone": backbone.source,
        "manager_checkpoint": manager_ckpt if trained else None,
        "answer_checkpoint": answer_ckpt if trained else None,
        "checkpoint_steps": {"manager": manager_step, "answer": answer_step},
        "config": config.to_dict(),
    }
    scores = None
    backend = judge_backend(config, backbone)
    if backend is not None:
        scores, summary = judge_scores(config.data.kind, run, backend)
        if summary is not None:
            meta["longmemeval_judge"] = summary
    return outputs.write_run(
        workdir, run, meta, judge_scores=scores, gold_ops=gold_ops, overwrite=overwrite
    )


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    # Orbax logs every file rename at INFO; keep the console to warnings and the progress bar.
    logging.set_verbosity(logging.WARNING)
    both = _CHECKPOINT.value
    try:
        results = evaluate(
            _CONFIG.value,
            hf_dir=_HF_DIR.value,
            manager_ckpt=_MANAGER_CKPT.value or both or _CONFIG.value.agents.manager_checkpoint,
            answer_ckpt=_ANSWER_CKPT.value or both or _CONFIG.value.agents.answer_checkpoint,
            embed_dir=_EMBED_DIR.value,
            workdir=_WORKDIR.value,
            overwrite=_OVERWRITE.value,
        )
    except (DataError, CheckpointError, FileNotFoundError, FileExistsError, ValueError) as err:
        print(f"memr1.evaluate: error: {err}", file=sys.stderr)
        sys.exit(2)
    overall = results["scores"]["overall"]["scores"]
    print(
        f"{results['system']}: {results['num_questions']} questions, "
        + ", ".join(f"{k} {v:.4f}" for k, v in overall.items() if v is not None)
        + f"\nwrote {_WORKDIR.value}/results.md"
    )


if __name__ == "__main__":
    without_torch()
    app.run(main)
