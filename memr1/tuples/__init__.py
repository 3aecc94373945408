"""Memory-R1 training tuples (paper §3, Algorithm 1): what each agent's RL stage trains on.

* Manager tuples (``schema.ManagerTuple``): for each turn t with facts, the temporal memory bank
  built from the W turns before t, the facts of t, the speaker's memories retrieved for them (what
  the manager is shown), a full snapshot of the bank, and the questions citing t. By default only
  turns that some question cites are kept, as in the paper.
* Answer tuples (``schema.AnswerTuple``): each question with the top-k memories of each speaker
  from the bank built over the whole conversation, and its gold answer.

Bank builders (``build.TupleConfig.builder``, see ``banks``):

* ``observation``: the dataset's facts are ADDed as they are; no model. The default for both
  LoCoMo and synthloco, whose files carry per-turn observation facts.
* ``teacher`` with a policy (a local checkpoint as ``TextPolicy``): the paper's recipe (a teacher
  LLM, GPT-4o-mini there), run through ``env.ingest``.
* ``teacher`` with a callable ``teacher(facts, retrieved) -> list[ManagerOp]``: a rule-based
  manager, e.g. the CPU demo's Mem0-like teacher on synthloco.

Window W: the paper says 24 turns in its text and 50 in Algorithm 1; the config's
``tuples.window`` (``configs/base.py``) is 50. W = -1 builds each conversation's bank once and
reads it before every turn (the whole history so far), which costs one pass instead of one bank
per turn.

The manager's RL stage turns a tuple's snapshot back into a live bank with
``restore.restore_memory`` (ids remapped), applies candidate ops to it and answers ``qa`` over it.

Storage (``io``): a folder of array_record files (one JSON record per tuple) plus metadata.json,
written atomically; ``io.TupleReader`` reads it back by index. ``memr1.tuples.tfds_builder``
exposes the same folders to ``tfds.data_source`` (built by ``python -m memr1.tuples.to_tfds``), and
``io.open_tuples`` / ``read_tuples`` read either source. Command line: ``python -m memr1.tuples``.

Building needs JAX and the pipeline, so ``build`` is imported from its module
(``from memr1.tuples.build import build_tuples, TupleConfig``); reading only needs this
package.
"""

from memr1.tuples.io import TupleReader, open_tuples, read_metadata, read_tuples, write_tuples
from memr1.tuples.schema import (
    SCHEMA_VERSION,
    AnswerMemory,
    AnswerTuple,
    LinkedQA,
    ManagerTuple,
    MemoryRecord,
    SchemaError,
)

__all__ = [
    "SCHEMA_VERSION",
    "AnswerMemory",
    "AnswerTuple",
    "LinkedQA",
    "ManagerTuple",
    "MemoryRecord",
    "SchemaError",
    "TupleReader",
    "open_tuples",
    "read_metadata",
    "read_tuples",
    "write_tuples",
]
