"""A stand-in for a ManagerTuple's turn: the fields the demo's probes read off a state."""

from __future__ import annotations

import dataclasses

from memr1.env.manager_io import render_manager_input


@dataclasses.dataclass(frozen=True)
class Turn:
    """The fields of a ManagerTuple the probes write replies from and sample on."""

    facts: tuple[str, ...]
    retrieved: tuple[tuple[int, str], ...]
    sample_id: str = "s"
    dia_id: str = "D1:1"

    def manager_input(self, style="full"):
        return render_manager_input(self.facts, self.retrieved, style=style)
