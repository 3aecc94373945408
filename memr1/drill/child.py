"""The drill's side of its subprocesses: their marker lines, collected with arrival times."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}


class Child:
    """A subprocess whose stdout lines are collected, with their arrival time, by a thread."""

    def __init__(self, cmd: list[str], log: Path, env: dict | None = None):
        self.log = open(log, "a", encoding="utf-8")
        self.proc = subprocess.Popen(
            cmd, cwd=REPO, env=env or ENV, stdout=subprocess.PIPE, stderr=self.log, text=True
        )
        self.lines: list[tuple[float, str]] = []
        self._new: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            item = (time.monotonic(), line.strip())
            self.lines.append(item)
            self._new.put(item)
        self._new.put(None)

    def wait_for(self, tag: str, at_least: int, timeout_s: float = 600) -> float | None:
        """Waits for a line "TAG n" with n >= at_least; its arrival time, or None at exit."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                item = self._new.get(timeout=1)
            except queue.Empty:
                continue
            if item is None:
                return None
            word, _, n = item[1].partition(" ")
            if word == tag and n.lstrip("-").isdigit() and int(n) >= at_least:
                return item[0]
        raise TimeoutError(f"no {tag} >= {at_least} within {timeout_s} s")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.finish()

    def finish(self, timeout_s: float = 900) -> int:
        rc = self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=30)  # the pipe ends with the process: every line is in
        self.proc.stdout.close()
        self.log.close()
        return rc

    def markers(self, tag: str) -> list[int]:
        """The numbers of every "TAG n" line so far, in order."""
        return [int(line.split()[1]) for _, line in self.lines if line.startswith(tag + " ")]

    def times(self, tag: str) -> dict[int, float]:
        """Arrival time of each "TAG n" line, by n (the last one of each n)."""
        return {int(line.split()[1]): t for t, line in self.lines if line.startswith(tag + " ")}


def open_save(child: Child) -> int | None:
    """The step of a save this process began and never finished, if any."""
    begun, ended = child.markers("SAVE-BEGIN"), set(child.markers("SAVE-END"))
    return next((k for k in reversed(begun) if k not in ended), None)
