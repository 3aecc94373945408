"""Which operations does a manager checkpoint sample? The op-sampling probe of
experiments/cpu_demo/op_probe.py.

  python tools/op_probe.py work/demo/seed-0                          # the SFT warm start
  python tools/op_probe.py work/demo/seed-0 --gate                   # exit 1 below issue 26's bar
  python tools/op_probe.py work/demo/seed-0 --checkpoint DIR:best   # another checkpoint
  python tools/op_probe.py work/demo/seed-0 --group_size 16 --max_states 100 --out ops.json
  python tools/op_probe.py work/demo/seed-0 --teacher_forced         # + p(first event) per kind

On the manager stage's own states (train turns with linked questions, the careful banks before
the turn), samples G replies per state at the rollout temperature and budget of the demo's
manager stage, parses them with the manager's parser and prints, per gold kind of the turn (new
fact, repeat, changed value, list item, cancelled plan: synthloco's labels, used only to group
the report), the share of samples of each category and the share with the right operation; then
the label-free collision proxy (word overlap of the fact with its top shown memory) per kind.
``--gate`` exits 1, naming each failing kind, when the right-op shares miss issue 26's
thresholds (collision kinds >= 0.25, repeats NONE >= 0.45, new facts ADD >= 0.85). Writes JSON
(--out; default SEED_DIR/op_probe.json) before gating. ``--teacher_forced`` adds, per kind,
the checkpoint's probability of each first event of an op-first reply on the same states
(op_probe.first_event_table): the same mix for every kind is a warm start that does not read
which collision a fact is. docs/demo.md has its tables.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from experiments.cpu_demo import op_probe
from experiments.cpu_demo.__main__ import read_config
from experiments.cpu_demo.run import SeedRun, check_seed_dir
from memr1.atomic import write_json_atomic
from memr1.torchless import without_torch

NEEDED = ("base/config.json", "data/gold_ops.json", "rl_tuples/metadata.json")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("seed_dir", type=Path, help="a demo seed folder (work/demo/seed-N)")
    parser.add_argument("--seed", type=int, default=None, help="default: from the folder name")
    parser.add_argument(
        "--checkpoint", default=None, help="DIR, DIR:STEP or DIR:best (default: SEED_DIR/sft)"
    )
    parser.add_argument("--group_size", type=int, default=None, help="G (default: the demo's)")
    parser.add_argument("--max_states", type=int, default=None, help="default: all")
    parser.add_argument("--threshold", type=float, default=op_probe.COLLIDES)
    parser.add_argument("--gate", action="store_true", help="exit 1 below issue 26's thresholds")
    parser.add_argument("--sample_seed", type=int, default=0, help="the sampling key's seed")
    parser.add_argument("--quick", action="store_true", help="the folder is a --quick demo's")
    parser.add_argument("--config", default=None, help="the demo's config as FILE[:ARG]")
    parser.add_argument(
        "--teacher_forced",
        action="store_true",
        help="also p(first event) per kind, teacher-forced (op-first replies only)",
    )
    parser.add_argument("--out", type=Path, default=None)
    return parser, parser.parse_args(argv)


def sampler(run, checkpoint: str, group_size: int, key_seed: int):
    """The probe's sampler: the checkpoint's policy at the demo manager stage's rollout settings."""
    import jax

    policy, sampling = load_policy(run, checkpoint)
    sample = op_probe.policy_sampler(
        policy.decode_copy(),
        sampling,
        group_size=group_size,
        style=run.c.style,
        key=jax.random.key(key_seed),
    )
    return sample, sampling, policy


def continuation_scorer(policy, batch: int = 32, width_step: int = 64):
    """``score(chats, continuations)`` for op_probe.first_event_table: the summed log-probs of
    each continuation after each chat's rendered prompt, teacher-forced, ``batch`` rows a pass
    padded to a multiple of ``width_step`` tokens (a compiled program per width)."""
    import jax.numpy as jnp
    import numpy as np

    from memr1.rl.logprobs import sequence_logprobs
    from memr1.train.sft import sft_batch

    def score(chats, continuations):
        ends = [policy.tokenizer.encode(c, add_special_tokens=False) for c in continuations]
        pairs = [
            (prompt, end)
            for chat in chats
            for prompt in [policy.encode(policy.render(chat))[0].tolist()]
            for end in ends
        ]
        sums = []
        for i in range(0, len(pairs), batch):
            chunk = pairs[i : i + batch]
            chunk += [chunk[-1]] * (batch - len(chunk))  # one batch shape; the copies dropped
            width = -(-max(len(a) + len(b) for a, b in chunk) // width_step) * width_step
            b = sft_batch([a for a, _ in chunk], [t for _, t in chunk], width, policy.pad_id)
            tokens, valid = jnp.asarray(b["tokens"]), jnp.asarray(b["valid"])
            logp, _ = sequence_logprobs(policy.graphdef, policy.params, tokens, valid)
            sums += list((np.asarray(logp) * (b["loss_mask"] & b["valid"])).sum(axis=1))
        return np.asarray(sums[: len(pairs)]).reshape(len(chats), len(continuations))

    return score


def load_policy(run, checkpoint: str):
    """The checkpoint's policy and the demo manager stage's rollout sampling settings."""
    from experiments.cpu_demo.reward_probe import checkpoint_policy, rollout_sampling

    return checkpoint_policy(run, checkpoint, batch_size=8), rollout_sampling(run)


def print_tables(result) -> None:
    cats = op_probe.CATEGORIES
    print(
        f"op probe of {result['checkpoint']} ({result['states']} manager-stage states, "
        f"G {result['group_size']}, temperature {result['temperature']})"
    )
    print("| gold kind | states | right | " + " | ".join(cats) + " |")
    print("|---|---|---|" + "---|" * len(cats))
    for kind, k in result["kinds"].items():
        cells = " | ".join(f"{k['share'][c]:.3f}" for c in cats)
        print(f"| {kind} | {k['states']} | {k['right']:.3f} | {cells} |")
    proxy = result["collision"]
    print("\ncollision proxy: word overlap of the fact with its top shown memory")
    print(f"| gold kind | states | mean overlap | share >= {proxy['threshold']} |")
    print("|---|---|---|---|")
    for kind, k in proxy["kinds"].items():
        print(f"| {kind} | {k['states']} | {k['mean_overlap']:.3f} | {k['above']:.3f} |")
    if "first_event" in result:
        events = op_probe.EVENTS
        print("\nteacher-forced p(first event) of an op-first reply")
        print("| gold kind | states | " + " | ".join(events) + " |")
        print("|---|---|" + "---|" * len(events))
        for kind, k in result["first_event"].items():
            cells = " | ".join(f"{k['p'][e]:.3f}" for e in events)
            print(f"| {kind} | {k['states']} | {cells} |")
    if proxy["precision"] is not None:
        print(
            f"states at or above it: {proxy['chosen']}, collisions among them "
            f"{proxy['precision']:.3f}"
        )


def main(argv=None) -> int:
    parser, args = parse_args(argv)
    try:
        seed = check_seed_dir(args.seed_dir, NEEDED, args.seed)
        config = read_config(args.config, quick=args.quick)
    except ValueError as e:
        parser.error(str(e))
    if args.teacher_forced and not config.traces.op_first:
        parser.error("--teacher_forced reads op-first replies: the config's traces.op_first is off")
    run = SeedRun(config, seed, args.seed_dir, algo="grpo", log=print)
    checkpoint = args.checkpoint or str(args.seed_dir / "sft" / "checkpoints")
    group_size = args.group_size or config.group_size
    if group_size < 1:
        parser.error(f"--group_size must be at least 1, got {group_size}")
    try:
        sample, sampling, policy = sampler(run, checkpoint, group_size, args.sample_seed)
    except FileNotFoundError as e:  # no such directory, step or best record
        parser.error(str(e))

    from experiments.cpu_demo.reward_probe import gold_index
    from memr1.tuples import read_tuples

    states = [t for t in read_tuples(run.rl_tuples, "manager") if t.has_qa]
    states = states[: args.max_states] if args.max_states else states
    gold = gold_index(run.data / "gold_ops.json")
    result = {
        "checkpoint": checkpoint,
        "temperature": sampling.temperature,
        "max_new_tokens": sampling.max_new_tokens,
        **op_probe.probe_ops(states, gold, sample, style=config.style),
        "collision": op_probe.collision_report(states, gold, threshold=args.threshold),
    }
    if args.teacher_forced:
        score = continuation_scorer(policy)
        result["first_event"] = op_probe.first_event_table(states, gold, score, style=config.style)
    failures = op_probe.gate_failures(result["kinds"])
    result["gate"] = {"thresholds": op_probe.GATE, "failures": failures}
    print_tables(result)
    out = args.out or args.seed_dir / "op_probe.json"
    write_json_atomic(out, result, indent=1)
    print(f"wrote {out}")
    if args.gate and failures:
        print("op probe gate failed:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
