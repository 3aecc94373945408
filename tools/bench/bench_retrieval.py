"""Retrieval and embedding benchmark: ScaNN vs exact NumPy vs exact JAX, Flax vs PyTorch MiniLM.

  python tools/bench/bench_retrieval.py [--sizes 1e3,1e4,1e5,1e6] [--dim 384] [--queries 200]
                                  [--json OUT]

Retrieval runs on random unit vectors (isotropic: the hardest case for a partition tree; real
embeddings cluster and need fewer leaves), plus one smaller run on real MiniLM embeddings of
generated memory-like sentences. For each size it reports build time, RSS growth, queries/s and
recall@k against exact NumPy; ScaNN's search-time settings are swept and the fastest setting that
reaches --target-recall is reported. Recorded results live in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the tools/bench/ modules imported below

import bench_memory
import retrieval_timing as rb

from memr1.atomic import write_json_atomic
from memr1.retrieval import ScannConfig

NAMES = "Caroline Melanie Jon Gina John Maria Andrew Audrey Tim Joanna Nate Evan".split()
DOINGS = [
    "adopted a puppy named {x}",
    "went camping near {x}",
    "started a pottery class with {x}",
    "painted a picture of {x}",
    "signed up for a charity run in {x}",
    "bought a vintage guitar from {x}",
    "visited an old friend in {x}",
    "cooked a new curry recipe for {x}",
]
THINGS = "Buddy Scout Lake Tahoe Paris the kids her mom Seattle the team Oscar Lisbon".split()
WHENS = ["yesterday", "last weekend", "on 7 May 2023", "in the summer of 2022", "two weeks ago"]


def sentences(rng: np.random.Generator, n: int, questions: bool = False) -> list[str]:
    """Memory-like statements (or questions about them) from templates, deterministic per rng."""
    out = []
    for _ in range(n):
        who, when = rng.choice(NAMES), rng.choice(WHENS)
        what = rng.choice(DOINGS).format(x=rng.choice(THINGS))
        out.append(f"When did {who} say they {what}?" if questions else f"{who} {what} {when}.")
    return out


def retrieval_rows(args, rng) -> list[dict]:
    rows = []
    fractions = tuple(float(x) for x in args.fractions.split(","))
    reorders = tuple(int(x) for x in args.reorders.split(","))
    for n in (int(float(s)) for s in args.sizes.split(",")):
        t0 = time.perf_counter()
        emb = rb.random_unit(rng, n, args.dim)
        q = rb.random_unit(rng, args.queries, args.dim)
        repeats = 3 if n <= 100_000 else 1
        r, build = rb.build_measured("exact_numpy", emb)
        base, truth = rb.search_measured(r, q, args.k, None, repeats)
        rows.append({"n": n, "backend": "exact_numpy", "recall": 1.0, **build, **base})
        del r
        r, build = rb.build_measured("exact_jax", emb)
        m, _ = rb.search_measured(r, q, args.k, truth, repeats)
        rows.append({"n": n, "backend": "exact_jax", **build, **m})
        del r
        r, build = rb.build_measured("scann", emb, config=ScannConfig())
        mode = next(iter(r.index_kinds().values()))
        # Search settings only matter for a tree; brute force is measured once.
        grid = (fractions, reorders) if mode == "tree_ah" else ((1.0,), reorders[:1])
        sweep = rb.scann_sweep(r, q, args.k, truth, *grid, repeats)
        best = rb.best_point(sweep, args.target_recall)
        pick = best or max(sweep, key=lambda row: (row["recall"], row["qps"]))
        rows.append(
            {
                "n": n,
                "backend": "scann",
                "mode": mode,
                "target_reached": best is not None,
                **build,
                **pick,
                "sweep": sweep,
            }
        )
        del r
        for row in rows[-3:]:
            row["speedup_vs_numpy"] = row["qps"] / base["qps"]
        print(f"  n={n:,} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return rows


def real_minilm(args, rng, encoder) -> tuple[dict, np.ndarray, np.ndarray]:
    """Exact vs ScaNN (tree forced) on MiniLM embeddings of generated sentences."""
    t = time.perf_counter()
    emb = encoder.encode(sentences(rng, args.real_n))
    q = encoder.encode(sentences(rng, args.queries, questions=True))
    encode_s = time.perf_counter() - t
    row = scann_vs_exact(args, emb, q, (0.02, 0.05, 0.1, 0.2, 0.35), (250, 500, 1000))
    return {"n": args.real_n, "encode_s": encode_s, **row}, emb, q


def scann_vs_exact(args, emb, q, fractions, reorders) -> dict:
    """Exact NumPy as truth, then a ScaNN tree (forced even for small N) swept over settings."""
    r, build = rb.build_measured("exact_numpy", emb)
    base, truth = rb.search_measured(r, q, args.k, None, 3)
    del r
    s, sbuild = rb.build_measured("scann", emb, config=ScannConfig(brute_force_below=1_000))
    sweep = rb.scann_sweep(s, q, args.k, truth, fractions, reorders, 3)
    best = rb.best_point(sweep, args.target_recall)
    return {
        "exact_numpy_qps": base["qps"],
        "exact_numpy_rss_mb": build["rss_delta_mb"],
        "scann_build_s": sbuild["build_s"],
        "scann_rss_mb": sbuild["rss_delta_mb"],
        "scann_best": best,
        "speedup_at_target": None if best is None else best["qps"] / base["qps"],
        "sweep": sweep,
    }


def clustered_proxy(args, rng, anchors, q, sigma: float) -> dict:
    """A 1e6-point stand-in for real embeddings: MiniLM sentence vectors plus Gaussian noise.

    Each point is a random anchor (a real embedding) plus noise of std ``sigma`` per dimension,
    renormalised; queries are real question embeddings. With 384 dimensions, sigma 0.04 leaves
    a point at cosine ~0.79 from its anchor (tight topics), sigma 0.08 at ~0.54 (loose ones).
    Encoding a million real sentences would take an hour here; this keeps the clustered shape
    of real data at scale.
    """
    n = args.clustered_n
    emb = np.empty((n, anchors.shape[1]), np.float32)
    for s in range(0, n, 1 << 18):
        m = min(1 << 18, n - s)
        x = anchors[rng.integers(0, len(anchors), m)]
        x = x + sigma * rng.standard_normal(x.shape, dtype=np.float32)
        emb[s : s + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    row = scann_vs_exact(args, emb, q, (0.01, 0.02, 0.05, 0.1, 0.2), (250, 500, 1000))
    return {"n": n, "sigma": sigma, **row}


def embedding_throughput(args, rng, encoder) -> dict:
    """Sentences/s of the Flax encoder vs transformers' BertModel (PyTorch, CPU), same batches."""
    import torch
    from transformers import BertModel

    from memr1.embed import default_model_dir

    texts = sentences(rng, args.embed_sentences)
    encoder.encode(texts)  # compiles every bucket these texts need
    flax_s, ours = rb.timed(lambda: encoder.encode(texts), 2)

    model = BertModel.from_pretrained(str(default_model_dir()), local_files_only=True).eval()
    ids = encoder.tokenize(texts)
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    bs = args.embed_batch

    def run_torch():
        out = np.zeros((len(ids), encoder.dim), np.float32)
        with torch.inference_mode():
            for s in range(0, len(order), bs):
                rows = order[s : s + bs]
                width = max(len(ids[i]) for i in rows)
                x = torch.zeros((len(rows), width), dtype=torch.long)
                mask = torch.zeros_like(x)
                for j, i in enumerate(rows):
                    x[j, : len(ids[i])] = torch.tensor(ids[i])
                    mask[j, : len(ids[i])] = 1
                h = model(input_ids=x, attention_mask=mask).last_hidden_state
                v = (h * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
                out[rows] = torch.nn.functional.normalize(v, dim=1).numpy()
        return out

    # PyTorch's intra-op threads stall badly when the cores are shared with other processes
    # (element-wise ops wait at barriers), so it is timed both with its default thread count
    # and single-threaded, and the better figure is the one compared.
    threads = torch.get_num_threads()
    torch_rates = {}
    for n_threads in sorted({threads, 1}):
        torch.set_num_threads(n_threads)
        run_torch()
        torch_s, ref = rb.timed(run_torch, 2)
        torch_rates[n_threads] = len(texts) / torch_s
    torch.set_num_threads(threads)
    best_torch = max(torch_rates.values())
    return {
        "sentences": len(texts),
        "batch": bs,
        "mean_tokens": float(np.mean([len(s) for s in ids])),
        "flax_sentences_per_s": len(texts) / flax_s,
        "torch_sentences_per_s_by_threads": torch_rates,
        "flax_speedup_vs_best_torch": len(texts) / flax_s / best_torch,
        "min_cosine_flax_vs_torch": float((ours * ref).sum(1).min()),
    }


def memory_bank_ops() -> dict:
    """The memory-bank op throughput (tools/bench/bench_memory.py at its default sizes)."""
    return {"function": "bench_bank_ops", "result": bench_memory.bench_bank_ops()}


def print_table(report: dict) -> None:
    print(f"\nretrieval, random unit vectors, dim {report['args']['dim']}, k={report['args']['k']}")
    head = f"{'N':>9} {'backend':<12} {'mode':<12} {'build s':>8} {'RSS MB':>8} {'q/s':>9} "
    print(head + f"{'recall':>7} {'x numpy':>8}  setting")
    for row in report["retrieval"]:
        setting = ""
        if row["backend"] == "scann" and row["mode"] == "tree_ah":
            setting = f"leaves {row['leaves_fraction']:.2f} reorder {row['reorder']}"
            setting += "" if row["target_reached"] else "  (target recall NOT reached)"
        print(
            f"{row['n']:>9,} {row['backend']:<12} {row.get('mode', 'exact'):<12} "
            f"{row['build_s']:>8.2f} {row['rss_delta_mb']:>8.0f} {row['qps']:>9.1f} "
            f"{row['recall']:>7.3f} {row['speedup_vs_numpy']:>8.1f}  {setting}"
        )
    for key in ("real_minilm", "clustered_minilm", "updates", "embedding", "memory_bank"):
        for part in report.get(key, []) if key == "clustered_minilm" else [report.get(key)]:
            if part is not None:
                shown = {k: v for k, v in part.items() if k != "sweep"}
                print(f"\n{key}: {json.dumps(shown, default=float)}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", default="1e3,1e4,1e5,1e6", help="bank sizes N, comma-separated")
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--k", type=int, default=60)
    p.add_argument("--target-recall", type=float, default=0.95)
    p.add_argument("--fractions", default="0.05,0.1,0.2,0.35,0.5,0.75,1.0")
    p.add_argument("--reorders", default="500,1000,2000")
    p.add_argument("--real-n", type=int, default=10_000, help="MiniLM-embedded bank (0: skip)")
    p.add_argument("--clustered-n", type=int, default=1_000_000, help="noisy-MiniLM bank (0: skip)")
    p.add_argument("--clustered-sigmas", default="0.04,0.08", help="noise levels, comma-separated")
    p.add_argument("--updates-n", type=int, default=50_000, help="update-policy bank (0: skip)")
    p.add_argument("--embed-sentences", type=int, default=512, help="0: skip the encoder race")
    p.add_argument("--embed-batch", type=int, default=32)
    p.add_argument("--machine", default=f"{platform.machine()}, {os.cpu_count()} CPUs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, help="write the full report here")
    args = p.parse_args(argv)
    rng = np.random.default_rng(args.seed)

    report = {"date": datetime.date.today().isoformat(), "machine": args.machine}
    report["args"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}

    def save() -> None:
        # Saved after every stage, so an interrupted run keeps what it measured.
        if args.json:
            write_json_atomic(args.json, report, indent=1, default=float)

    t0 = time.perf_counter()
    report["retrieval"] = retrieval_rows(args, rng)
    save()
    if args.updates_n:
        cfg = ScannConfig(brute_force_below=1_000)
        report["updates"] = rb.update_policy(
            rng, args.updates_n, args.dim, args.updates_n // 2, args.k, cfg
        )
        save()
    if args.real_n or args.embed_sentences:
        from memr1.embed import Encoder

        encoder = Encoder.from_dir(batch_size=args.embed_batch)
        if args.real_n:
            report["real_minilm"], anchors, q = real_minilm(args, rng, encoder)
            save()
            if args.clustered_n:
                for sigma in (float(x) for x in args.clustered_sigmas.split(",")):
                    row = clustered_proxy(args, rng, anchors, q, sigma)
                    report.setdefault("clustered_minilm", []).append(row)
                    save()
        if args.embed_sentences:
            report["embedding"] = embedding_throughput(args, rng, encoder)
    report["memory_bank"] = memory_bank_ops()
    report["total_s"] = time.perf_counter() - t0
    save()
    print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
