"""The warm start's data: the traces, and the copy pretraining task rehearsed after them.

SFT reads one JSONL file (memr1.train --sft_data). With ``sft.rehearsal_rows`` > 0 it is the
traces followed by that many rows of the copy task as token ids (pretrain.rehearsal_rows),
written once into the SFT folder; otherwise the traces themselves.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_collections

from memr1.atomic import write_text_atomic


def copy_task(config: ml_collections.ConfigDict, tok) -> dict:
    """The copy pretraining's token ids under a seed's tokenizer (pretrain.copy_rows): the
    copied ids run from after the specials to the last id but one, the separator; with several
    strings a prompt (pretrain.spans not (1, 1)) the two ids below it mark them."""
    sep = len(tok) - 1
    ids, marks = (max(tok.eos_token_id, tok.pad_token_id) + 1, sep), None
    if tuple(config.pretrain.spans) != (1, 1):
        marks, ids = (sep - 2, sep - 1), (ids[0], sep - 2)
    return {"ids": ids, "bos": tok.eos_token_id, "sep": sep, "marks": marks}


def rehearsed(
    config: ml_collections.ConfigDict, seed: int, traces: Path, base: Path, sft_dir: Path
) -> Path:
    """The SFT stage's data file: ``traces``, or with sft.rehearsal_rows > 0 ``sft_dir``/
    data.jsonl, the traces and then the copy task's rows (a function of the settings the SFT
    folder's build record holds; written atomically, once).

    Raises:
      ValueError: a negative row count, or rehearsal asked for while copy pretraining is off.
    """
    n = config.sft.rehearsal_rows
    if n < 0:  # an int: the locked ConfigDict refuses another type
        raise ValueError(f"sft.rehearsal_rows {n}: need a count of rows >= 0")
    if n == 0:
        return traces
    from experiments.cpu_demo import pretrain
    from memr1.models.tokenizer import load_tokenizer

    if config.pretrain.steps == 0:
        raise ValueError(f"sft.rehearsal_rows {n}: copy pretraining is off (pretrain.steps 0)")
    path = sft_dir / "data.jsonl"
    if not path.is_file():
        task = copy_task(config, load_tokenizer(base))
        rows = pretrain.rehearsal_rows(n, config.pretrain, **task, seed=seed)
        text = traces.read_text(encoding="utf-8")
        # never a half-written file read as the data
        write_text_atomic(path, text + "".join(json.dumps(r) + "\n" for r in rows))
    return path


def longest_row(path: Path, base: Path) -> int:
    """The longest SFT row of ``path`` (prompt + reply + EOS, or a token-id row) in tokens,
    rounded up to a multiple of 16: SFT pads every row to this length, so a tight bound is
    time saved on every step."""
    from memr1.env.prompts import to_prompt_text
    from memr1.models.tokenizer import load_tokenizer

    tok = load_tokenizer(base)
    longest = 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if "prompt_ids" in row:
                n = len(row["prompt_ids"]) + len(row["target_ids"])
            else:
                prompt, target = to_prompt_text(row["messages"]), row["target"]
                n = len(tok.encode(prompt)) + len(tok.encode(target)) + 1
            longest = max(longest, n)
    return -(-longest // 16) * 16
