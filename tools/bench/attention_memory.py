"""XLA's temporary bytes of prefill and update with the einsum and the chunked attention kernels.

  python tools/bench/attention_memory.py [--size qwen2.5-3b] [--layers 2] [--batch 2]
                                   [--lengths 1024,4096] [--vocab V] [--json OUT] [--machine TEXT]

Compiles (never runs) two programs on one CPU device at the widths of `--size` (its vocabulary
unless `--vocab` is given) with `--layers` blocks and bfloat16 compute, and prints
`compiled.memory_analysis().temp_size_in_bytes` for each attention kernel and prompt length:

  prefill  the sampler's prefill: `--batch` left-padded prompts of T tokens written into a
           T-slot KV cache, and the last position's logits (bfloat16 parameters).
  update   loss and gradient of the summed log-probs of `--batch` rows of T tokens
           (`memr1.rl.logprobs.sequence_logprobs`), float32 master weights, `scan_layers`
           and `remat` on (what bounds activations on XLA:CPU, see docs/benchmarks.md).

The einsum kernel materialises float32 scores [B, K, T*G, S] per layer; the chunked kernel
[B, K, chunk*G, S] (`model.attention_chunk`). Parameters are arguments, not temporaries, so
the figures are what attention and activations add on top of the weights. Results:
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
from pathlib import Path

from memr1.torchless import without_torch

KERNELS = ("einsum", "chunked")


def prefill_temp_bytes(cfg, batch: int, length: int) -> int:
    """Temporary bytes of the compiled prefill of `batch` prompts of `length` tokens."""
    import jax
    import jax.numpy as jnp

    from memr1.models import masks, transformer

    graphdef, abstract = transformer.abstract_model(cfg)

    def prefill(params, tokens_BT, valid_BT):
        cache = transformer.init_cache(cfg, batch, length)
        h_BTD, cache = transformer.forward(
            graphdef,
            params,
            tokens_BT,
            masks.positions_from_valid(valid_BT),
            masks.causal_mask(valid_BT),
            cache,
            0,
        )
        return transformer.logits_fn(graphdef, params, h_BTD[:, -1:]), cache

    tokens = jax.ShapeDtypeStruct((batch, length), jnp.int32)
    valid = jax.ShapeDtypeStruct((batch, length), bool)
    compiled = jax.jit(prefill).lower(abstract, tokens, valid).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def update_temp_bytes(cfg, batch: int, length: int) -> int:
    """Temporary bytes of the compiled loss-and-gradient of summed sequence log-probs."""
    import jax
    import jax.numpy as jnp

    from memr1.models import transformer
    from memr1.rl.logprobs import sequence_logprobs

    graphdef, abstract = transformer.abstract_model(cfg)

    def loss(params, tokens_BT, valid_BT):
        logp_BT, _ = sequence_logprobs(graphdef, params, tokens_BT, valid_BT)
        return -logp_BT.sum()

    tokens = jax.ShapeDtypeStruct((batch, length), jnp.int32)
    valid = jax.ShapeDtypeStruct((batch, length), bool)
    step = jax.jit(jax.value_and_grad(loss))
    return step.lower(abstract, tokens, valid).compile().memory_analysis().temp_size_in_bytes


def measure(
    size: str, layers: int, batch: int, lengths: list[int], chunk: int, vocab: int | None = None
) -> list[dict]:
    """One row per (program, length): temporary bytes of each kernel and their ratio."""
    from memr1.models.config import get_size

    base = get_size(size, n_layers=layers, dtype="bfloat16", attention_chunk=chunk)
    if vocab:
        base = base.replace(vocab_size=vocab)
    programs = {
        "prefill": (prefill_temp_bytes, base.replace(param_dtype="bfloat16")),
        "update": (update_temp_bytes, base.replace(remat=True, scan_layers=True)),
    }
    rows = []
    for program, (fn, cfg) in programs.items():
        for length in lengths:
            temp = {k: fn(cfg.replace(attention=k), batch, length) for k in KERNELS}
            rows.append(
                {
                    "program": program,
                    "length": length,
                    "temp_bytes": temp,
                    "einsum_over_chunked": temp["einsum"] / temp["chunked"],
                }
            )
            gib = {k: v / 2**30 for k, v in temp.items()}
            print(
                f"{program:<8}{length:>7}{gib['einsum']:>12.2f} GiB{gib['chunked']:>12.2f} GiB"
                f"{rows[-1]['einsum_over_chunked']:>9.1f}x",
                flush=True,
            )
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size", default="qwen2.5-3b", help="widths from memr1.models.config.SIZES")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--batch", type=int, default=2, help="rows (prompts)")
    p.add_argument("--lengths", default="1024,4096", help="comma-separated tokens per row")
    p.add_argument("--chunk", type=int, default=None, help="attention_chunk (default: config's)")
    p.add_argument(
        "--vocab",
        type=int,
        default=None,
        help="vocabulary size (default: the size's); XLA:CPU computes bfloat16 matmuls in "
        "float32, so a real vocabulary adds a float32 copy of the embedding to every figure",
    )
    p.add_argument("--json", type=Path, help="also write the table here")
    p.add_argument("--machine", default=platform.processor() or platform.machine())
    args = p.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    if not lengths or min(lengths) < 2 or args.layers < 1 or args.batch < 1:
        p.error("need lengths >= 2, --layers >= 1 and --batch >= 1")
    if args.vocab is not None and args.vocab < 1:
        p.error(f"--vocab {args.vocab}: must be >= 1")

    import jax

    from memr1.atomic import write_json_atomic
    from memr1.models.config import get_size

    chunk = args.chunk or get_size(args.size).attention_chunk
    vocab = args.vocab or get_size(args.size).vocab_size
    print(
        f"{args.size} widths, vocab {vocab}, {args.layers} layers, batch {args.batch}, "
        f"chunk {chunk}, bf16 compute, jax {jax.__version__} on {jax.default_backend()}"
    )
    print(f"{'program':<8}{'T':>7}{'einsum':>16}{'chunked':>16}{'ratio':>10}")
    rows = measure(args.size, args.layers, args.batch, lengths, chunk, args.vocab)
    if args.json:
        out = {
            "date": datetime.date.today().isoformat(),
            "machine": args.machine,
            "jax": jax.__version__,
            "args": vars(args) | {"json": str(args.json), "chunk": chunk},
            "rows": rows,
        }
        write_json_atomic(args.json, out)
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
