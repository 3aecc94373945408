"""XLA's temporary bytes of the compiled SFT step, by depth, with and without remat and scan.

  python tools/bench/remat_memory.py [--layers 4,8] [--d-model 512] [--batch 4] [--length 1024]

Compiles (never runs) the real jitted SFT step on one device for a tiny-family model widened to
the given shape and prints `compiled.memory_analysis().temp_size_in_bytes` for each depth and
setting: the plain layer loop, the loop with `remat`, and `scan_layers` with and without
`remat`. The last column pair says how much one more layer adds. A layer's stored input is
rows x length x d_model x 4 bytes; its weights (float32) come back as a gradient, and under
`scan_layers` also as a stacked copy and a stacked gradient. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from memr1.torchless import without_torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # configs/, as a script

SETTINGS = {
    "loop": {},
    "loop + remat": {"remat": True},
    "scan_layers": {"scan_layers": True},
    "scan_layers + remat": {"remat": True, "scan_layers": True},
}


def sft_temp_bytes(cfg, rows: int, length: int, chunk: int = 128) -> int:
    """XLA's temporary bytes of the compiled SFT step of `cfg` (nothing is allocated or run)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    from configs import memr1 as memr1_config
    from memr1.train import mesh, sft, state

    # The SFT step of the default config (one micro-batch), nothing allocated.
    config = memr1_config.get_config("algo=sft")
    m = mesh.build_mesh(1, 1, 1, model_cfgs=[cfg])
    optim = state.OptimConfig.from_config(config)
    setup, _ = state.create_train_state(m, cfg, optim, materialize=False)
    step_cfg = dataclasses.replace(sft.SFTConfig.from_config(config), logprob_chunk=chunk)
    step = sft.make_sft_step(setup, step_cfg)
    sharding = NamedSharding(m, PartitionSpec())
    batch = {
        name: jax.ShapeDtypeStruct((rows, length), dtype, sharding=sharding)
        for name, dtype in [("tokens", jnp.int32), ("valid", bool), ("loss_mask", bool)]
    }
    compiled = step.lower(setup.abstract_state, batch).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--layers", default="4,8", help="comma-separated depths (at least two)")
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--batch", type=int, default=4, help="rows")
    p.add_argument("--length", type=int, default=1024, help="tokens per row")
    p.add_argument("--json", type=Path, help="also write the table here")
    args = p.parse_args(argv)
    depths = sorted({int(x) for x in args.layers.split(",")})
    if len(depths) < 2 or depths[0] < 1:
        p.error(f"--layers {args.layers!r}: give at least two depths >= 1")

    from flax import nnx

    from memr1.models.config import get_size
    from memr1.models.transformer import abstract_model, count_params

    base = get_size(
        "tiny",
        d_model=args.d_model,
        n_heads=args.heads,
        n_kv_heads=args.kv_heads,
        head_dim=args.d_model // args.heads,
        d_ff=args.d_ff,
        vocab_size=args.vocab,
        max_position=max(args.length, 4096),
    )
    mib = lambda b: b / 2**20
    rows = []
    print(f"{'setting':<22}" + "".join(f"{f'{d} layers':>13}" for d in depths) + "  per layer")
    for name, overrides in SETTINGS.items():
        temp = [
            sft_temp_bytes(base.replace(n_layers=d, **overrides), args.batch, args.length)
            for d in depths
        ]
        per_layer = (temp[-1] - temp[0]) / (depths[-1] - depths[0])
        rows.append(
            {"setting": name, "temp_bytes": dict(zip(depths, temp)), "per_layer": per_layer}
        )
        cells = "".join(f"{mib(t):>9,.0f} MiB" for t in temp)
        print(f"{name:<22}{cells}  {mib(per_layer):,.1f} MiB", flush=True)
    residual = args.batch * args.length * args.d_model * 4
    layer = 4 * count_params(nnx.state(abstract_model(base)[1])["layers"][0])
    print(f"one layer's input [B, T, D] in float32: {mib(residual):,.1f} MiB")
    print(f"one layer's weights in float32: {mib(layer):,.1f} MiB")
    if args.json:
        from memr1.atomic import write_json_atomic

        write_json_atomic(args.json, {"args": vars(args) | {"json": str(args.json)}, "rows": rows})
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
