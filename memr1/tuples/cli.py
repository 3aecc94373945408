"""``python -m memr1.tuples``: build Memory-R1 training tuples from a LoCoMo-schema file.

Examples::

    # LoCoMo's training conversation (conv-26), banks from the dataset's own facts:
    python -m memr1.tuples --dataset locomo --path locomo10.json --out tuples/train
    # A local checkpoint as the teacher manager, banks from the 24 turns before each turn:
    python -m memr1.tuples --dataset locomo --path locomo10.json --builder teacher \\
        --hf_dir ~/ckpt/Qwen2.5-7B-Instruct --window 24 --out tuples/train-qwen

The split defaults to Memory-R1's ``train`` for LoCoMo and to ``all`` for synthloco, whose
files are already one split each. Bad input prints one ``error:`` line and exits with status 2
without writing anything.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from memr1.data.errors import WHOLE_FILE, DataError
from memr1.data.locomo import load_locomo
from memr1.data.split import SPLITS, parse_ratios, split_conversations

PROG = "python -m memr1.tuples"
DATASETS = ("locomo", "synthloco")
DEFAULT_SPLIT = {"locomo": "train", "synthloco": "all"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Write Memory-R1 manager and answer tuples.")
    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--path", required=True, help="the LoCoMo-schema JSON file")
    p.add_argument("--split", choices=(*SPLITS, "all"), help="default: train (locomo), all")
    p.add_argument("--ratios", default="1:1:8", help="train:validation:test, by conversation")
    p.add_argument("--max_conversations", type=int, default=-1, help="-1: every one")
    p.add_argument("--builder", default="observation", choices=("observation", "teacher"))
    p.add_argument("--window", type=int, default=50, help="W turns before t; -1: all of them")
    p.add_argument("--k_per_fact", type=int, default=5)
    p.add_argument("--k_per_speaker", type=int, default=30)
    p.add_argument("--all_turns", action="store_true", help="keep turns no question cites")
    p.add_argument("--fact_source", default="observation", choices=("observation", "turn", "llm"))
    p.add_argument("--capacity", type=int, default=1024, help="memories per conversation bank")
    p.add_argument("--embed_dir", help="sentence encoder folder (default: the pinned MiniLM)")
    model = p.add_argument_group("teacher / extractor model (teacher builder, --fact_source llm)")
    model.add_argument("--hf_dir", help="a local Hugging Face checkpoint folder")
    model.add_argument("--tokenizer_dir", help="without --hf_dir: a random model, this tokenizer")
    model.add_argument("--size", default="tiny", help="size of the random model")
    model.add_argument("--max_new_tokens", type=int, default=512)
    model.add_argument("--temperature", type=float, default=0.0)
    model.add_argument("--batch_size", type=int, default=8)
    model.add_argument("--max_prompt_tokens", type=int, default=4096)
    model.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="the tuples folder to create")
    p.add_argument("--overwrite", action="store_true", help="replace an existing tuples folder")
    return p


def _conversations(args) -> tuple[list, str]:
    conversations = load_locomo(args.path, source=args.dataset)
    split = args.split or DEFAULT_SPLIT[args.dataset]
    if split == "all":
        chosen = split_conversations(conversations, (1,), names=("all",))["all"]
    else:
        chosen = split_conversations(conversations, parse_ratios(args.ratios))[split]
    chosen = list(chosen if args.max_conversations < 0 else chosen[: args.max_conversations])
    if not chosen:
        raise DataError(args.path, WHOLE_FILE, "split", f"split {split!r} has no conversation")
    return chosen, split


def _policy(args):
    from memr1.env.load import load_backbone, make_policy

    backbone = load_backbone(
        hf_dir=args.hf_dir, size=args.size, tokenizer_dir=args.tokenizer_dir, seed=args.seed
    )
    name = Path(args.hf_dir).name if args.hf_dir else f"random-{args.size}"
    return make_policy(
        backbone, batch_size=args.batch_size, max_prompt_tokens=args.max_prompt_tokens, name=name
    )


def run(args) -> dict:
    """Builds and writes the tuples for parsed arguments; returns the counts."""
    from memr1.tuples import io

    needs_model = args.builder == "teacher" or args.fact_source == "llm"
    if needs_model and not (args.hf_dir or args.tokenizer_dir):
        raise ValueError(
            "the teacher builder and --fact_source llm need --hf_dir or --tokenizer_dir"
        )
    if not needs_model and (args.hf_dir or args.tokenizer_dir):
        raise ValueError("--hf_dir/--tokenizer_dir are only used by --builder teacher or llm facts")
    out = Path(args.out)
    io.check_destination(out, overwrite=args.overwrite)
    conversations, split = _conversations(args)
    # Heavy imports (JAX, the models) wait until the cheap checks have passed.
    import jax

    from memr1.embed import Encoder
    from memr1.env.memory_store import BankSpec
    from memr1.env.policy import SamplingConfig
    from memr1.tuples.build import TupleConfig, build_tuples

    sampling = SamplingConfig(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    cfg = TupleConfig(
        builder=args.builder,
        window=args.window,
        k_per_fact=args.k_per_fact,
        k_per_speaker=args.k_per_speaker,
        only_with_qa=not args.all_turns,
        fact_source=args.fact_source,
        bank=BankSpec(args.capacity, 512, 4096, overflow="raise", retriever="exact_numpy"),
        style="full",
        teacher_sampling=sampling,
        extract_sampling=sampling,
        jobs_per_batch=32,
    )
    cfg.validate()
    policy = _policy(args) if needs_model else None
    encoder = Encoder.from_dir(args.embed_dir)
    tuples = build_tuples(
        conversations,
        embed=encoder.encode,
        dim=encoder.dim,
        cfg=cfg,
        teacher=policy if args.builder == "teacher" else None,
        extractor=policy,
        key=jax.random.key(args.seed),
        log=lambda line: print(line, file=sys.stderr),
    )
    metadata = {
        "dataset": args.dataset,
        "path": str(args.path),
        "split": split,
        "ratios": args.ratios,
        "sample_ids": [c.sample_id for c in conversations],
        "builder": args.builder,
        "teacher": None if policy is None else (args.hf_dir or f"random {args.size}"),
        "fact_source": args.fact_source,
        "window": args.window,
        "k_per_fact": args.k_per_fact,
        "k_per_speaker": args.k_per_speaker,
        "only_with_qa": not args.all_turns,
        "capacity": args.capacity,
        "embed_dir": args.embed_dir or "pinned MiniLM-L6-v2",
        "seed": args.seed,
        "counts": tuples.counts,
    }
    io.write_tuples(out, tuples.manager, tuples.answer, metadata, overwrite=args.overwrite)
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


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    args = _parser().parse_args(argv)
    from memr1.memory import BankOverflowError

    try:
        counts = run(args)
    except (DataError, ValueError, OSError, BankOverflowError) as err:
        print(f"{PROG}: error: {err}", file=sys.stderr)
        return 2
    print(format_counts(counts, args.out))
    return 0
