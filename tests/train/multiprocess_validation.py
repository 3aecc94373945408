"""Run as one of two processes by test_validators.py: a validation pass over a set that does not
split evenly (3 answer states), each process scoring its own share and the gathered means the
same on both.

    python -m tests.train.multiprocess_validation OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax

from memr1.torchless import without_torch
from memr1.train import mesh, validators
from tests.train.test_validators import PEOPLE, REPLIES, Scripted, answer_states


def main(out_dir: Path) -> None:
    assert mesh.maybe_initialize_distributed(), "the launcher's environment was not recognised"
    assert jax.process_count() == 2
    policy = Scripted(lambda prompt: next(v for k, v in REPLIES.items() if k in prompt))
    validate = validators.answer_validator(
        policy, answer_states(PEOPLE), max_new_tokens=8, style="compact", distill=True
    )
    got = validate(None, 0)
    p = jax.process_index()
    (out_dir / f"val-p{p}.json").write_text(json.dumps({"scores": got, "calls": policy.calls}))


if __name__ == "__main__":
    without_torch()
    main(Path(sys.argv[1]))
