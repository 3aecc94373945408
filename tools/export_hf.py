"""Exports a parameter directory as a Hugging Face checkpoint (config.json + safetensors).

  python tools/export_hf.py --src DIR --out DIR [--backbone NAME] [--tokenizer_dir DIR]
                            [--dtype bfloat16] [--overwrite]
  python tools/export_hf.py --train_checkpoint RUN/checkpoints --hf_dir BASE --out DIR
  python tools/export_hf.py --train_checkpoint RUN/checkpoints:best --hf_dir BASE --out DIR

Sources are pluggable (`SOURCES`): an HF checkpoint directory (re-exported, e.g. to change the
dtype or re-shard), an Orbax checkpoint of memr1's parameter tree (`nnx.to_pure_dict(params)`
saved with `orbax.checkpoint.StandardCheckpointer`), whose shapes come from `--backbone`, or a
training run's checkpoint directory (`python -m memr1.train`; the policy of its latest step, of
`DIR:STEP` or of its best validated step `DIR:best`, LoRA adapters merged into the weights),
whose shapes, config and tokenizer come from the HF directory of the backbone it was trained
from (`--hf_dir`).
Exits 1 with a message naming the file on bad input; an existing output directory is refused
without --overwrite, and the output appears (by a rename) only once it is complete.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from memr1.models.hf_export import MAX_SHARD_BYTES, export_hf
from memr1.models.hf_io import CheckpointError
from memr1.torchless import without_torch

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


def _from_train(src: Path, args: argparse.Namespace):
    import jax

    from memr1.models.hf_io import config_from_hf
    from memr1.models.transformer import abstract_model
    from memr1.train.checkpoint import Checkpointer, resolve_checkpoint, restore_params

    if not args.hf_dir:
        raise CheckpointError(
            f"{src}: a training checkpoint needs --hf_dir, the HF directory of its backbone "
            "(for the model config and the tokenizer)"
        )
    directory, step = resolve_checkpoint(src)  # DIR (latest), DIR:STEP or DIR:best
    with Checkpointer(directory) as ckpt:
        saved = ckpt.param_metadata(step)
    # The weights as trained (float32 master weights, usually), unless told otherwise.
    stored = saved[("embed",)].dtype if ("embed",) in saved else None
    cfg = config_from_hf(args.hf_dir, param_dtype=args.param_dtype or str(stored or "float32"))
    _, abstract = abstract_model(cfg)
    device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    like = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device), abstract)
    try:
        params = restore_params(f"{directory}:{step}", like)
    except (FileNotFoundError, ValueError):
        raise
    except Exception as e:  # orbax raises several types for shape and key mismatches
        raise CheckpointError(
            f"{src}: cannot restore as the model of {args.hf_dir}/config.json ({e})"
        ) from e
    return cfg, params


SOURCES: dict[str, Callable] = {"hf": _from_hf, "orbax": _from_orbax, "train": _from_train}


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
    parser.add_argument("--src", type=Path, default=None, help="parameter directory")
    parser.add_argument(
        "--train_checkpoint",
        type=Path,
        default=None,
        help="a training run's checkpoint directory, DIR[:STEP|:best] (the source; needs --hf_dir)",
    )
    parser.add_argument("--hf_dir", type=Path, default=None, help="base HF dir, for --train_*")
    parser.add_argument("--out", type=Path, required=True, help="HF directory to create")
    parser.add_argument("--format", choices=["auto", *SOURCES], default="auto")
    parser.add_argument("--backbone", default=None, help="size name, for Orbax sources")
    parser.add_argument("--tokenizer_dir", type=Path, default=None)
    parser.add_argument("--param_dtype", default=None, help="dtype to load the source in")
    parser.add_argument("--dtype", default=None, help="dtype of the written weights")
    parser.add_argument("--max_shard_bytes", type=int, default=MAX_SHARD_BYTES)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    if (args.src is None) == (args.train_checkpoint is None):
        parser.error("give exactly one of --src and --train_checkpoint")
    try:
        src = args.src or args.train_checkpoint
        if args.train_checkpoint is not None:
            from memr1.train.checkpoint import split_spec

            if not Path(split_spec(src)[0]).is_dir():
                raise CheckpointError(f"{split_spec(src)[0]}: source directory not found")
        elif not src.is_dir():
            raise CheckpointError(f"{src}: source directory not found")
        if args.train_checkpoint is not None:
            kind = "train"
        else:
            kind = detect_format(src) if args.format == "auto" else args.format
        cfg, params = SOURCES[kind](src, args)
        tokenizer_dir = args.tokenizer_dir or {"hf": src, "train": args.hf_dir}.get(kind)
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
    without_torch()
    sys.exit(main())
