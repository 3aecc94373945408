"""Prints every backbone size's parameter count next to the published checkpoint's count.

  python tools/param_counts.py [--json OUT]

Counts come from `jax.eval_shape` of the model itself (no memory is allocated), so a wrong
shape anywhere in the model or the size table shows up as a mismatch here. Sizes without a
published checkpoint (tiny) show "-" in the published and match columns.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from memr1.atomic import write_json_atomic
from memr1.models.config import PUBLISHED_PARAM_COUNTS, SIZES
from memr1.models.transformer import abstract_model, count_params
from memr1.torchless import without_torch


def rows() -> list[dict]:
    """One record per size: counts, the published count, whether they match, and bytes."""
    out = []
    for name, cfg in SIZES.items():
        n = count_params(abstract_model(cfg)[1])
        published = PUBLISHED_PARAM_COUNTS.get(name)
        out.append(
            {
                "size": name,
                "params": n,
                "published": published,
                "match": None if published is None else n == published,
                "bytes_bf16": 2 * n,
                "bytes_fp32": 4 * n,
            }
        )
    return out


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def format_table(records: list[dict]) -> str:
    """A fixed-width text table of `rows()`."""
    head = ("size", "params", "published", "match", "bf16", "fp32")
    lines = [head]
    for r in records:
        mark = "-" if r["match"] is None else ("✓" if r["match"] else "✗")
        published = "-" if r["published"] is None else f"{r['published']:,}"
        lines.append(
            (
                r["size"],
                f"{r['params']:,}",
                published,
                mark,
                _gib(r["bytes_bf16"]),
                _gib(r["bytes_fp32"]),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths))
        )
        for line in lines
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    args = parser.parse_args(argv)
    records = rows()
    print(format_table(records))
    if args.json is not None:
        write_json_atomic(args.json, records)
    # A mismatch is a bug in the model or the size table: fail loudly for scripts and CI.
    return 1 if any(r["match"] is False for r in records) else 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
