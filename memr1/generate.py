"""Generates a continuation of one prompt with a local HF checkpoint, through memr1's rollout
engine (`memr1.sampling.engine`).

  python -m memr1.generate --hf_dir DIR --prompt "TEXT" --max_new_tokens 32 --temperature 0

`--chat` wraps the prompt as a user turn in the tokenizer's chat template; without it the raw
text is continued. `--json` prints the prompt ids, generated ids and text as one JSON line (the
tests compare these ids with transformers' own greedy `generate`). Bad input (a missing
directory, a corrupt file, an unsupported architecture) exits with status 1 and a message that
names the file and key.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from memr1.models.hf_io import CheckpointError
from memr1.torchless import without_torch


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m memr1.generate", description=__doc__)
    parser.add_argument("--hf_dir", required=True, help="local HF checkpoint directory")
    parser.add_argument("--prompt", required=True, help="prompt text")
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.0, help="0 means greedy")
    parser.add_argument("--top_k", type=int, default=None)
    parser.add_argument("--top_p", type=float, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chat", action="store_true", help="apply the chat template")
    parser.add_argument("--dtype", default=None, help="compute dtype (default: param dtype)")
    parser.add_argument("--param_dtype", default=None, help="default: the checkpoint's dtype")
    parser.add_argument("--json", action="store_true", help="print ids and text as JSON")
    return parser.parse_args(argv)


def generate(args: argparse.Namespace) -> dict:
    """Loads the checkpoint and tokenizer, samples once, and returns ids and text."""
    import jax

    from memr1.models.hf_io import load_hf
    from memr1.models.tokenizer import encode_prompt, load_tokenizer, special_ids
    from memr1.sampling.engine import Engine

    cfg, graphdef, params = load_hf(args.hf_dir, dtype=args.dtype, param_dtype=args.param_dtype)
    tok = load_tokenizer(args.hf_dir)
    ids = special_ids(tok, args.hf_dir)
    prompt = encode_prompt(tok, args.prompt, chat=args.chat)
    if not prompt:
        raise ValueError("the prompt encodes to no tokens; give some text")
    too_big = [t for t in prompt if t >= cfg.vocab_size]
    if too_big:
        raise CheckpointError(
            f"{args.hf_dir}: the tokenizer produced id {too_big[0]} but config.json has "
            f"vocab_size={cfg.vocab_size}"
        )
    engine = Engine(cfg, graphdef, pad_id=ids.pad_id)
    out = engine.generate(
        params,
        [prompt],
        key=jax.random.key(args.seed),
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        eos_ids=ids.eos_ids,
    )
    length = int(out.lengths[0])
    new_ids = [int(t) for t in out.tokens[0, :length]]
    return {
        "prompt_ids": prompt,
        "ids": new_ids,
        "stopped": bool(out.done[0]),
        "text": tok.decode(new_ids, skip_special_tokens=True),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the CLI; returns the process exit status."""
    args = parse_args(argv)
    try:
        result = generate(args)
    except (CheckpointError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(json.dumps(result) if args.json else result["text"])
    return 0


if __name__ == "__main__":
    without_torch()
    sys.exit(main())
