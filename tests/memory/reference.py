"""A pure-Python model of a memory bank, written from the spec and independent of the arrays.

It keeps memories in a dict keyed by id and the op log as an unbounded list, and truncates text
character by character, so it shares no code path with memr1.memory beyond the op kind numbers.
"""

from __future__ import annotations

import dataclasses

NOOP, ADD, UPDATE, DELETE = 0, 1, 2, 3
COUNTERS = ("adds", "updates", "deletes", "noops", "unknown_id", "evictions", "refused_full",
            "truncations", "empty_text", "bad_kind")  # fmt: skip


def truncate_chars(text: str, max_bytes: int) -> str:
    kept = ""
    for char in text:
        if len((kept + char).encode("utf-8")) > max_bytes:
            break
        kept += char
    return kept


@dataclasses.dataclass
class RefMemory:
    text: str
    emb: tuple
    owner: int
    created: int
    updated: int
    version: int
    last_used: int


class RefBank:
    def __init__(self, capacity: int, text_bytes: int, overflow: str):
        self.capacity, self.text_bytes, self.overflow = capacity, text_bytes, overflow
        self.memories: dict[int, RefMemory] = {}
        self.next_id = 0
        self.clock = 0
        self.counts = dict.fromkeys(COUNTERS, 0)
        self.log: list[dict] = []
        self.gone: set[int] = set()  # Ids deleted or evicted: they must never come back.

    def _log(self, kind, memory_id, turn, timestamp, old=None, new=None):
        self.log.append({"kind": kind, "id": memory_id, "turn": turn, "timestamp": timestamp,
                         "old_text": old, "new_text": new})  # fmt: skip

    def _victim(self) -> int:
        if self.overflow == "evict_oldest":
            return min(self.memories, key=lambda i: (self.memories[i].updated, i))
        return min(self.memories, key=lambda i: (self.memories[i].last_used, i))

    def apply(self, kind, target, text, emb, owner, timestamp, turn):
        self.clock += 1
        stored = truncate_chars(text, self.text_bytes)
        truncated = stored != text
        if kind == NOOP:
            self.counts["noops"] += 1
        elif kind == ADD:
            if not stored:
                self.counts["empty_text"] += 1
                return
            if len(self.memories) == self.capacity:
                if self.overflow == "raise":
                    self.counts["refused_full"] += 1
                    return
                victim = self._victim()
                self._log("EVICT", victim, turn, timestamp, old=self.memories.pop(victim).text)
                self.gone.add(victim)
                self.counts["evictions"] += 1
            self.memories[self.next_id] = RefMemory(
                stored, tuple(emb), owner, timestamp, timestamp, 1, self.clock
            )
            self._log("ADD", self.next_id, turn, timestamp, new=stored)
            self.next_id += 1
            self.counts["adds"] += 1
            self.counts["truncations"] += truncated
        elif kind in (UPDATE, DELETE):
            if target not in self.memories:
                self.counts["unknown_id"] += 1
                return
            memory = self.memories[target]
            if kind == DELETE:
                self._log("DELETE", target, turn, timestamp, old=memory.text)
                del self.memories[target]
                self.gone.add(target)
                self.counts["deletes"] += 1
                return
            if not stored:
                self.counts["empty_text"] += 1
                return
            self._log("UPDATE", target, turn, timestamp, old=memory.text, new=stored)
            memory.text, memory.emb, memory.updated = stored, tuple(emb), timestamp
            memory.version += 1
            memory.last_used = self.clock
            self.counts["updates"] += 1
            self.counts["truncations"] += truncated
        else:
            self.counts["bad_kind"] += 1

    def retrieve(self, ids):
        self.clock += 1
        for memory_id in ids:
            if memory_id in self.memories:
                self.memories[memory_id].last_used = self.clock

    def view(self) -> list[dict]:
        return [
            {
                "id": i,
                "text": m.text,
                "owner": m.owner,
                "created": m.created,
                "updated": m.updated,
                "version": m.version,
            }  # fmt: skip
            for i, m in sorted(self.memories.items())
        ]
