"""``python -m memr1.tuples``: build Memory-R1 training tuples from a LoCoMo-schema file.

Examples::

    # LoCoMo's training conversation (conv-26), banks from the dataset's own facts:
    python -m memr1.tuples --config configs/memr1.py:dataset=locomo,backbone=qwen2.5-7b \\
        --config.data.path=locomo10.json --config.data.split=train --out tuples/train
    # A local checkpoint as the teacher manager, banks from the 24 turns before each turn:
    python -m memr1.tuples --config configs/memr1.py:dataset=locomo,backbone=qwen2.5-7b \\
        --config.data.path=locomo10.json --config.data.split=train \\
        --config.tuples.builder=teacher --config.tuples.window=24 \\
        --hf_dir ~/ckpt/Qwen2.5-7B-Instruct --out tuples/train-qwen

The settings come from the same config as ``memr1.train`` and ``memr1.evaluate``: its tuples
section (window W, builder, fact source; see ``configs/base.py``), the data section (which file
and split: LoCoMo's default split is evaluation's, ``test``, so training tuples ask for
``train``; synthloco files are one split each, ``all``), and the memory and agents settings that
evaluation uses too. Only paths are flags: ``--out``, ``--hf_dir`` (the teacher or extractor
model; default ``config.hf_dir``) and ``--embed_dir``. Bad input prints one ``error:`` line and
exits with status 2 without writing anything.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from memr1.data.errors import DataError

PROG = "python -m memr1.tuples"
DATASETS = ("locomo", "synthloco")


def _conversations(data: Any) -> list:
    """The conversations of `config.data` (LoCoMo-schema files only: their turns carry facts)."""
    from memr1.env.setup import load_conversations

    if data.kind not in DATASETS:
        raise ValueError(f"config data.kind={data.kind!r}: tuples are built from {DATASETS} files")
    return load_conversations(data)


def _policy(config: Any, hf_dir: str | None):
    from memr1.env.load import load_backbone, make_policy
    from memr1.sampling.engine import EngineSettings

    size = config.model.size
    backbone = load_backbone(
        hf_dir=hf_dir, size=size, tokenizer_dir=config.tokenizer_dir, seed=config.seed
    )
    name = Path(hf_dir).name if hf_dir else f"random-{size}"
    return make_policy(
        backbone,
        batch_size=config.agents.batch_size,
        max_prompt_tokens=config.agents.max_prompt_tokens,
        name=name,
        engine=EngineSettings.from_config(config),
    )


def run(
    config: Any,
    *,
    out: str | Path,
    overwrite: bool = False,
    hf_dir: str | None = None,
    embed_dir: str | None = None,
) -> dict:
    """Builds and writes the tuples of `config` into `out`; returns the counts."""
    from memr1.tuples import io

    t = config.tuples
    hf_dir = hf_dir or config.hf_dir
    needs_model = t.builder == "teacher" or t.fact_source == "llm"
    if needs_model and not (hf_dir or config.tokenizer_dir):
        raise ValueError(
            "config tuples.builder=teacher and tuples.fact_source=llm need a model: --hf_dir, "
            "or config.tokenizer_dir for a random one"
        )
    if not needs_model and (hf_dir or config.tokenizer_dir):
        raise ValueError(
            "--hf_dir / config.tokenizer_dir are only used by tuples.builder=teacher or "
            "tuples.fact_source=llm"
        )
    out = Path(out)
    io.check_destination(out, overwrite=overwrite)
    conversations = _conversations(config.data)
    # Heavy imports (JAX, the models) wait until the cheap checks have passed.
    import jax

    from memr1.embed import Encoder
    from memr1.tuples.build import TupleConfig, build_tuples

    cfg = TupleConfig.from_config(config)
    cfg.validate()
    policy = _policy(config, hf_dir) if needs_model else None
    encoder = Encoder.from_dir(embed_dir)
    tuples = build_tuples(
        conversations,
        embed=encoder.encode,
        dim=encoder.dim,
        cfg=cfg,
        teacher=policy if cfg.builder == "teacher" else None,
        extractor=policy,
        key=jax.random.key(config.seed),
        log=lambda line: print(line, file=sys.stderr),
    )
    data = config.data
    metadata = {
        "dataset": data.kind,
        "path": str(data.path),
        "split": data.split,
        "ratios": data.ratios,
        "sample_ids": [c.sample_id for c in conversations],
        "builder": cfg.builder,
        "teacher": None if policy is None else (hf_dir or f"random {config.model.size}"),
        "fact_source": cfg.fact_source,
        "window": cfg.window,
        "k_per_fact": cfg.k_per_fact,
        "k_per_speaker": cfg.k_per_speaker,
        "only_with_qa": cfg.only_with_qa,
        "capacity": cfg.bank.capacity,
        "embed_dir": embed_dir or "pinned MiniLM-L6-v2",
        "seed": config.seed,
        "counts": tuples.counts,
    }
    io.write_tuples(out, tuples.manager, tuples.answer, metadata, overwrite=overwrite)
    return tuples.counts


def format_counts(counts: dict, out: str) -> str:
    """The summary the CLI prints."""
    c = counts
    skipped = c["manager_with_qa"] + c["manager_without_qa"] - c["manager_written"]
    return "\n".join(
        [
            f"conversations {c['conversations']}, turns {c['turns']}, "
            f"turns with facts {c['turns_with_facts']}",
            f"manager tuples: {c['manager_written']} written; {c['manager_with_qa']} with linked "
            f"QA, {c['manager_without_qa']} without ({skipped} skipped)",
            f"answer tuples: {c['answer']}",
            f"mean bank size {c['mean_bank_size']:.1f} (manager tuples), mean retrieved "
            f"{c['mean_retrieved']:.1f}, mean final bank {c['mean_final_bank_size']:.1f}",
            f"wrote {out}",
        ]
    )


def main(
    config: Any,
    *,
    out: str | None,
    overwrite: bool = False,
    hf_dir: str | None = None,
    embed_dir: str | None = None,
) -> int:
    """The command line after flag parsing (`memr1.tuples.__main__`); returns the exit status."""
    from memr1.memory import BankOverflowError

    if not out:
        print(f"{PROG}: error: --out is required (the tuples folder to create)", file=sys.stderr)
        return 2
    try:
        counts = run(config, out=out, overwrite=overwrite, hf_dir=hf_dir, embed_dir=embed_dir)
    except (DataError, ValueError, OSError, BankOverflowError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    print(format_counts(counts, out))
    return 0
