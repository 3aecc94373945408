"""A small reader of XLA's HLO text: computations, instructions, and what a while loop runs.

Enough structure to ask of a compiled program "which all-gathers or converts run inside the
decode loop, and of what shapes", without depending on XLA's instruction numbering.
"""

from __future__ import annotations

import dataclasses
import math
import re

_COMPUTATION = re.compile(r"^(ENTRY )?%?([\w.\-]+) .*\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.*)$")
_OPCODE = re.compile(r"\s*([\w\-]+)\((.*)$")
_ARRAY = re.compile(r"\b(pred|[subf]\d+|bf16|f8\w*)\[([\d,]*)\]")
_CALLED = re.compile(
    r"\b(?:calls|to_apply|body|condition|branch_computations)="
    r"(?:\{([%\w.\-, ]+)\}|(%[\w.\-]+))"
)


@dataclasses.dataclass(frozen=True)
class Instruction:
    name: str
    result: str  # the result type text, e.g. "bf16[8,16]{1,0}" or a tuple "(s32[], ...)"
    op: str
    rest: str  # operands and attributes

    def arrays(self) -> list[tuple[str, tuple[int, ...]]]:
        """(dtype, shape) of every array in the result type."""
        return [
            (dtype, tuple(int(d) for d in dims.split(",") if d))
            for dtype, dims in _ARRAY.findall(self.result)
        ]

    def called(self) -> list[str]:
        """Names of the computations this instruction calls (fusions, loops, reductions)."""
        out = []
        for match in _CALLED.finditer(self.rest):
            names = match.group(1) or match.group(2)
            out += [n.strip().lstrip("%") for n in names.split(",") if n.strip()]
        return out


def _split_result(text: str) -> tuple[str, str]:
    if text.startswith("("):
        depth = 0
        for i, ch in enumerate(text):
            depth += (ch == "(") - (ch == ")")
            if depth == 0:
                return text[: i + 1], text[i + 1 :]
    head, _, tail = text.partition(" ")
    return head, " " + tail


@dataclasses.dataclass
class Module:
    computations: dict[str, list[Instruction]]
    entry: str

    @classmethod
    def parse(cls, text: str) -> Module:
        comps: dict[str, list[Instruction]] = {}
        current, entry = None, ""
        for line in text.splitlines():
            if current is None:
                match = _COMPUTATION.match(line)
                if match and not line.startswith(" "):
                    current = match.group(2)
                    comps[current] = []
                    entry = current if match.group(1) else entry
                continue
            if line.startswith("}"):
                current = None
                continue
            match = _INSTRUCTION.match(line)
            if match:
                result, rest = _split_result(match.group(2))
                op = _OPCODE.match(rest)
                if op:
                    comps[current].append(Instruction(match.group(1), result, *op.groups()))
        return cls(comps, entry)

    def instructions(self, names=None):
        for name in self.computations if names is None else names:
            yield from self.computations.get(name, ())

    def reachable(self, roots) -> set[str]:
        seen, todo = set(), list(roots)
        while todo:
            name = todo.pop()
            if name in seen or name not in self.computations:
                continue
            seen.add(name)
            for inst in self.computations[name]:
                todo += inst.called()
        return seen

    def loops(self) -> list[Instruction]:
        return [i for i in self.instructions() if i.op == "while"]

    def loop_computations(self, loop: Instruction) -> set[str]:
        """What a while loop runs each iteration: its body and condition, and their callees."""
        return self.reachable(loop.called())


def elements(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
