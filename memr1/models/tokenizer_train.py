"""Training a small byte-level BPE tokenizer, saved in Hugging Face format.

The CPU default trains its own tokenizer on the synthetic corpus so that the tiny policies load
through exactly the code path a Qwen or LLaMA checkpoint uses (`AutoTokenizer` on a local
directory). Byte-level BPE matters: for a "qwen2" config transformers rebuilds the tokenizer as
Qwen2Tokenizer from tokenizer.json's vocabulary and merges, which reproduces only this kind.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

EOS = "<|endoftext|>"
PAD = "<|pad|>"
SPECIALS = (EOS, PAD)


def train_bpe_tokenizer(texts: Iterable[str], out_dir: str | Path, *, vocab_size: int = 2048):
    """Trains a byte-level BPE tokenizer on `texts` and saves it to `out_dir`.

    Returns:
      The transformers tokenizer (PreTrainedTokenizerFast) with EOS and PAD set. It has no chat
      template, so prompts use memr1's plain "System:/User:/Assistant:" layout.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIALS):
        raise ValueError(f"vocab_size={vocab_size} is below the 256 byte symbols + specials")
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, pad_token=PAD)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(out_dir))
    return tok
