"""Exports a parameter directory as a Hugging Face checkpoint (config.json + safetensors).

  python tools/export_hf.py --src DIR --out DIR [--backbone NAME] [--tokenizer_dir DIR]
                            [--dtype bfloat16] [--overwrite]

Sources are pluggable (`SOURCES`): an HF checkpoint directory (re-exported, e.g. to change the
dtype or re-shard) or an Orbax checkpoint of memr1's parameter tree (`nnx.to_pure_dict(params)`
saved with `orbax.checkpoint.StandardCheckpointer`), whose shapes come from `--backbone`.
The training checkpoints will register their own reader here. Exits 1 with a message naming the
file on bad input; the output directory appears only once it is complete.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from memr1.models.hf_export import MAX_SHARD_BYTES, export_hf
from memr1.models.hf_io import CheckpointError

# Files whose presence identifies an Orbax checkpoint directory.
_ORBAX_MARKERS = ("_CHECKPOINT_METADATA", "_METADATA", "manifest.ocdbt")


def _from_hf(src: Path, args: argparse.Namespace):
    from memr1.models.hf_io import load_hf

    cfg, _, params = load_hf(src, param_dtype=args.param_dtype)
    return cfg, params


def _from_orbax(src: Path, args: argparse.Namespace):
    import orbax.checkpoint as ocp
    from flax import nnx

    from memr1.models.config import get_size
    from memr1.models.transformer import abstract_model

    if not args.backbone:
        raise CheckpointError(f"{src}: an Orbax parameter tree needs --backbone to know its shapes")
    overrides = {"param_dtype": args.param_dtype} if args.param_dtype else {}
    cfg = get_size(args.backbone, **overrides)
    _, params = abstract_model(cfg)
    try:
        restored = ocp.StandardCheckpointer().restore(src.resolve(), nnx.to_pure_dict(params))
    except Exception as e:  # orbax raises several types for missing keys and bad metadata
        raise CheckpointError(f"{src}: cannot restore as a {args.backbone} tree ({e})") from e
    nnx.replace_by_pure_dict(params, restored)
    return cfg, params


SOURCES: dict[str, Callable] = {"hf": _from_hf, "orbax": _from_orbax}


def detect_format(src: Path) -> str:
    """Names the source format of `src` from the files it holds."""
    if (src / "config.json").is_file():
        return "hf"
    if any((src / m).exists() for m in _ORBAX_MARKERS):
        return "orbax"
    raise CheckpointError(
        f"{src}: neither an HF checkpoint (no config.json) nor an Orbax checkpoint "
        f"(none of {list(_ORBAX_MARKERS)})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=Path, required=True, help="parameter directory")
    parser.add_argument("--out", type=Path, required=True, help="HF directory to create")
    parser.add_argument("--format", choices=["auto", *SOURCES], default="auto")
    parser.add_argument("--backbone", default=None, help="size name, for Orbax sources")
    parser.add_argument("--tokenizer_dir", type=Path, default=None)
    parser.add_argument("--param_dtype", default=None, help="dtype to load the source in")
    parser.add_argument("--dtype", default=None, help="dtype of the written weights")
    parser.add_argument("--max_shard_bytes", type=int, default=MAX_SHARD_BYTES)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    try:
        if not args.src.is_dir():
            raise CheckpointError(f"{args.src}: source directory not found")
        kind = detect_format(args.src) if args.format == "auto" else args.format
        cfg, params = SOURCES[kind](args.src, args)
        tokenizer_dir = args.tokenizer_dir or (args.src if kind == "hf" else None)
        out = export_hf(
            cfg,
            params,
            args.out,
            tokenizer_dir,
            dtype=args.dtype,
            overwrite=args.overwrite,
            max_shard_bytes=args.max_shard_bytes,
        )
    except (CheckpointError, FileExistsError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({cfg.family}, {kind} source)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
