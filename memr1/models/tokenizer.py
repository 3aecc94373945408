"""Tokenizers of local HF checkpoints: loading, prompt encoding and the special ids we rely on.

Generation needs two special ids: the end-of-sequence ids that stop a row (checkpoints such as
LLaMA-3.1-Instruct list several in generation_config.json, e.g. <|eot_id|> and <|end_of_text|>)
and a padding id for left-padded batches. A tokenizer without a pad token pads with its eos
token, which is safe because padded slots are masked out; one without any eos id is rejected,
since nothing could end a sampled answer.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memr1.models.hf_io import CheckpointError, read_json

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SpecialIds:
    """Token ids generation needs: every id that ends a row, and the id used for padding."""

    eos_ids: tuple[int, ...]
    pad_id: int


def load_tokenizer(hf_dir: str | Path) -> Any:
    """Loads the tokenizer stored in `hf_dir` (local files only; nothing is downloaded)."""
    hf_dir = Path(hf_dir)
    if not hf_dir.is_dir():
        raise CheckpointError(f"{hf_dir}: tokenizer directory not found")
    from transformers import AutoTokenizer  # deferred: importing transformers costs seconds

    try:
        return AutoTokenizer.from_pretrained(str(hf_dir), local_files_only=True)
    except Exception as e:  # transformers raises many types for missing or malformed files
        files = sorted(p.name for p in hf_dir.glob("*token*"))
        raise CheckpointError(
            f"{hf_dir}: could not load a tokenizer from {files or 'no tokenizer files'} ({e})"
        ) from e


def encode_prompt(tok: Any, text: str, chat: bool) -> list[int]:
    """Token ids of a prompt.

    Args:
      tok: a transformers tokenizer.
      text: the prompt text.
      chat: wrap `text` as one user turn in the tokenizer's chat template and append the
        assistant header; otherwise encode the raw text (with the tokenizer's own BOS, if any).

    Returns:
      The prompt ids [T].
    """
    if not chat:
        return list(tok.encode(text))
    if not getattr(tok, "chat_template", None):
        where = getattr(tok, "name_or_path", "") or "the tokenizer"
        raise CheckpointError(
            f"{where}: a chat prompt was requested but the tokenizer has no chat template "
            "(tokenizer_config.json key 'chat_template' or chat_template.jinja)"
        )
    # Rendering to text and encoding without extra specials keeps the template's own BOS and
    # avoids a second one being added.
    rendered = tok.apply_chat_template(
        [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
    )
    return list(tok.encode(rendered, add_special_tokens=False))


def _as_ids(value: Any) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]


def special_ids(tok: Any, hf_dir: str | Path | None = None) -> SpecialIds:
    """The eos ids (generation_config.json's eos_token_id, then the tokenizer's) and pad id.

    Raises:
      CheckpointError: when neither the generation config nor the tokenizer defines an eos id.
    """
    eos: list[int] = []
    gen_path = Path(hf_dir) / "generation_config.json" if hf_dir is not None else None
    if gen_path is not None and gen_path.is_file():
        eos += _as_ids(read_json(gen_path).get("eos_token_id"))
    eos += [i for i in _as_ids(getattr(tok, "eos_token_id", None)) if i not in eos]
    if not eos:
        where = hf_dir or getattr(tok, "name_or_path", "the tokenizer")
        raise CheckpointError(
            f"{where}: no end-of-sequence token (looked for 'eos_token_id' in "
            "generation_config.json and 'eos_token' in the tokenizer files), so generation "
            "could never stop"
        )
    pad = getattr(tok, "pad_token_id", None)
    if pad is None:
        pad = eos[0]
        log.warning("tokenizer has no pad token; padding with the eos id %d", pad)
    return SpecialIds(eos_ids=tuple(eos), pad_id=int(pad))
