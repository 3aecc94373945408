"""One conversation's memory: an array bank (the source of truth) mirrored into a retriever.

Both speakers share one `MemoryBank` whose `owner` field says whose memory a row is (0 =
speaker_a, 1 = speaker_b): retrieval filters by owner, so "one bank per speaker" (Mem0's
harness) and "all banks of a user" are the same data seen through different owner filters.
The manager of speaker s only ever sees, and so can only ever touch, ids retrieved from owner s.

After each batch of operations the changed rows (found by diffing ids / validity / version, so
evictions are caught too) are upserted into or deleted from the retriever, whose ids are the
bank's stable memory ids. Updates and deletes are therefore visible to the very next query.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import datetime, timezone

import jax
import numpy as np

from memr1 import memory as mem
from memr1.data.locomo import format_locomo_date
from memr1.env.manager_io import ManagerOp
from memr1.retrieval import make_retriever

EmbedFn = Callable[[Sequence[str]], np.ndarray]
_apply_op = jax.jit(mem.apply_op)


@dataclasses.dataclass(frozen=True)
class Hit:
    """One retrieved memory."""

    memory_id: int
    text: str
    owner: int
    updated: int  # seconds since the epoch (the session date of its last change)
    score: float

    @property
    def when(self) -> str:
        return format_locomo_date(datetime.fromtimestamp(self.updated, tz=timezone.utc))


@dataclasses.dataclass(frozen=True)
class BankSpec:
    """A conversation bank's rows, text bytes, op log, overflow policy and retriever: the
    config's memory section (`from_config`)."""

    capacity: int
    text_bytes: int
    log_capacity: int
    overflow: str
    retriever: str

    @classmethod
    def from_config(cls, config) -> BankSpec:
        m = config.memory
        return cls(
            capacity=m.capacity,
            text_bytes=m.text_bytes,
            log_capacity=m.log_capacity,
            overflow=m.overflow,
            retriever=m.retriever,
        )


# The op log stores a turn as one sortable integer: session * TURN_BASE + index (both 1-based).
TURN_BASE = 10_000


def turn_number(session: int, index: int) -> int:
    """The op-log number of turn `index` of session `session`."""
    return session * TURN_BASE + index


def to_timestamp(when: datetime) -> int:
    """Seconds since the epoch of a naive session date, read as UTC."""
    return int(when.replace(tzinfo=timezone.utc).timestamp())


def host_arrays(bank) -> dict[str, np.ndarray]:
    """The host copy of a bank's arrays that reading needs (one device-to-host fetch)."""
    return {
        "ids": np.asarray(bank.ids_M),
        "valid": np.asarray(bank.valid_M),
        "version": np.asarray(bank.version_M),
        "owner": np.asarray(bank.owner_M),
        "updated": np.asarray(bank.updated_M),
        "length": np.asarray(bank.length_M),
        "text": np.asarray(bank.text_MC),
        "emb": np.asarray(bank.emb_ME),
    }


class BankView:
    """Read access to one bank: its host arrays and a retriever keyed by its memory ids.

    This is what answering (Algorithm 3) reads, whether the bank is a conversation's live memory
    (`ConversationMemory`) or one of the candidate banks the manager stage's reward builds.
    """

    def __init__(self, speakers: Sequence[str], host: dict[str, np.ndarray], retriever):
        self.speakers = tuple(speakers)
        self.host = host
        self.retriever = retriever

    @classmethod
    def index(cls, speakers: Sequence[str], host: dict[str, np.ndarray], kind: str) -> BankView:
        """A view whose `kind` retriever indexes the valid rows of `host` from scratch."""
        retriever = make_retriever(kind, host["emb"].shape[-1])
        ok = host["valid"]
        if ok.any():
            retriever.upsert(host["ids"][ok].astype(np.int64), host["emb"][ok], host["owner"][ok])
        return cls(speakers, host, retriever)

    def hit(self, slot: int, score: float) -> Hit:
        h = self.host
        return Hit(
            memory_id=int(h["ids"][slot]),
            text=mem.decode_text(h["text"][slot], h["length"][slot]),
            owner=int(h["owner"][slot]),
            updated=int(h["updated"][slot]),
            score=float(score),
        )

    def memories(self, owner: int | None = None) -> list[Hit]:
        """All valid memories (of one owner, or all), in id order."""
        h = self.host
        rows = [s for s in np.flatnonzero(h["valid"]) if owner is None or h["owner"][s] == owner]
        return sorted((self.hit(s, 0.0) for s in rows), key=lambda hit: hit.memory_id)

    def search(self, query_QE: np.ndarray, owner: int, k: int) -> list[list[Hit]]:
        """Top-k memories of `owner` for each query (fewer when the owner has fewer)."""
        if len(query_QE) == 0:
            return []
        ids, scores = self.retriever.search(np.asarray(query_QE, np.float32), k, owner=owner)
        h = self.host
        slot_of = {int(i): s for s, i in enumerate(h["ids"]) if h["valid"][s]}
        return [
            [self.hit(slot_of[int(i)], sc) for i, sc in zip(row_ids, row_sc) if int(i) >= 0]
            for row_ids, row_sc in zip(ids, scores)
        ]


class ConversationMemory:
    """The bank of one conversation plus its retrieval index."""

    def __init__(self, sample_id: str, speakers: Sequence[str], spec: BankSpec, dim: int):
        self.sample_id = sample_id
        self.speakers = tuple(speakers)
        self.spec = spec
        self.bank = mem.empty_bank(
            spec.capacity, spec.text_bytes, dim, spec.log_capacity, overflow=spec.overflow
        )
        self.view = BankView(
            self.speakers, host_arrays(self.bank), make_retriever(spec.retriever, dim)
        )

    def owner_of(self, speaker: str) -> int:
        if speaker not in self.speakers:
            raise KeyError(f"{self.sample_id}: {speaker!r} is not one of {self.speakers}")
        return self.speakers.index(speaker)

    # -- reading -------------------------------------------------------------------------------

    def memories(self, owner: int | None = None) -> list[Hit]:
        """All valid memories (of one owner, or all), in id order."""
        return self.view.memories(owner)

    def search(self, query_QE: np.ndarray, owner: int, k: int) -> list[list[Hit]]:
        """Top-k memories of `owner` for each query (fewer when the owner has fewer)."""
        return self.view.search(query_QE, owner, k)

    def neighbours(self, fact_emb_QE: np.ndarray, owner: int, k: int) -> list[tuple[int, str]]:
        """What the manager is shown for a turn's facts: the top `k` of `owner`'s memories per
        fact, merged rank by rank (every fact's best, then every fact's second, ...), each memory
        once, as (memory id, text)."""
        hits = self.search(fact_emb_QE, owner, k)
        seen, retrieved = set(), []
        for row in zip(*hits) if hits else ():
            for hit in row:
                if hit.memory_id not in seen:
                    seen.add(hit.memory_id)
                    retrieved.append((hit.memory_id, hit.text))
        return retrieved

    # -- writing -------------------------------------------------------------------------------

    def apply(
        self,
        ops: Sequence[ManagerOp],
        *,
        owner: int,
        timestamp: int,
        turn: int,
        embed: EmbedFn,
    ) -> None:
        """Applies validated manager ops (in order) for `owner`, then syncs the retriever."""
        changing = [op for op in ops if op.invalid is None and op.kind != "NOOP"]
        texts = [op.text for op in changing if op.kind in ("ADD", "UPDATE")]
        embs = iter(embed(texts)) if texts else iter(())
        for op in changing:
            emb = next(embs) if op.kind in ("ADD", "UPDATE") else None
            target = -1 if op.target is None else int(op.target)
            if op.kind in ("UPDATE", "DELETE") and not self._owns(target, owner):
                # Defence in depth: parsed ids already come from this owner's retrieved set.
                raise ValueError(f"{self.sample_id}: op {op} targets a memory not owned by {owner}")
            arr = mem.make_op(
                self.bank,
                op.kind,
                text=op.text,
                emb=emb,
                target=target,
                owner=owner,
                timestamp=timestamp,
                turn=turn,
            )
            self.bank = _apply_op(self.bank, arr)
        if changing:
            mem.raise_if_overflowed(self.bank)
            self._sync()

    def add_texts(self, texts: Sequence[str], *, owner: int, timestamp: int, turn: int, embed):
        """Adds raw texts as memories with no manager in between (the LoCoMo-RAG baseline)."""
        ops = [ManagerOp(kind="ADD", text=t) for t in texts if t.strip()]
        self.apply(ops, owner=owner, timestamp=timestamp, turn=turn, embed=embed)

    def _owns(self, memory_id: int, owner: int) -> bool:
        h = self.view.host
        hit = (h["ids"] == memory_id) & h["valid"]
        return bool(hit.any()) and int(h["owner"][np.argmax(hit)]) == owner

    def _sync(self) -> None:
        old, new = self.view.host, host_arrays(self.bank)
        before = {
            int(i): int(v) for i, v, ok in zip(old["ids"], old["version"], old["valid"]) if ok
        }
        after = {int(i): s for s, (i, ok) in enumerate(zip(new["ids"], new["valid"])) if ok}
        gone = np.array([i for i in before if i not in after], np.int64)
        changed = [s for i, s in after.items() if before.get(i) != int(new["version"][s])]
        if gone.size:
            self.view.retriever.delete(gone)
        if changed:
            slots = np.array(changed)
            self.view.retriever.upsert(
                new["ids"][slots].astype(np.int64), new["emb"][slots], new["owner"][slots]
            )
        self.view.host = new
