"""Stage timings (p50 / p95 per call), token throughput, and counters of what the agents did."""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Iterator

import numpy as np


class StageStats:
    """Wall time of every call per stage, plus named counters."""

    def __init__(self):
        self.seconds: dict[str, list[float]] = collections.defaultdict(list)
        self.items: dict[str, int] = collections.Counter()
        self.tokens: dict[str, int] = collections.Counter()
        self.counters: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

    @contextlib.contextmanager
    def time(self, stage: str, items: int = 1) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage].append(time.perf_counter() - start)
            self.items[stage] += items

    def add_tokens(self, stage: str, n: int) -> None:
        self.tokens[stage] += int(n)

    def count(self, group: str, key: str, n: int = 1) -> None:
        self.counters[group][key] += n

    def summary(self) -> dict:
        """Per stage: calls, items, total seconds, p50/p95 seconds per call, generated tok/s."""
        out = {}
        for stage, secs in self.seconds.items():
            arr = np.asarray(secs)
            total = float(arr.sum())
            out[stage] = {
                "calls": len(secs),
                "items": int(self.items[stage]),
                "seconds": round(total, 4),
                "p50_s": round(float(np.percentile(arr, 50)), 4),
                "p95_s": round(float(np.percentile(arr, 95)), 4),
            }
            if self.tokens.get(stage):
                out[stage]["generated_tokens"] = int(self.tokens[stage])
                out[stage]["tokens_per_s"] = round(self.tokens[stage] / max(total, 1e-9), 1)
        return {"stages": out, "counters": {k: dict(v) for k, v in self.counters.items()}}
