"""Buffer planning: give every value a kernel writes a slot, reusing slots whose values are dead.

Values live from the first kernel that writes them to the last kernel that reads them. A slot is
reused only by a value of the same element count and dtype, so no reshaping of storage is needed.
Writes that nobody reads any more (a duplicated kernel re-writing a dead value) get a scratch slot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Step:
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class MemoryPlan:
    slot_of: tuple[dict[int, int], ...]         # per step: value id -> slot it writes / reads
    slots: tuple[tuple[int, str], ...]         # slot -> (numel, dtype)
    output_values: frozenset[int]              # graph outputs: fresh tensors each call, never slots

    @property
    def nslots(self) -> int:
        return len(self.slots)


def plan_memory(steps: Sequence[Step], types: dict[int, tuple[int, str]], external: set[int],
                outputs: set[int]) -> MemoryPlan:
    """``types[v] = (numel, dtype)``; ``external`` are graph inputs and constants (never slotted);
    graph ``outputs`` are returned to the user and so are allocated per call, not slotted."""
    last_read: dict[int, int] = {}
    for i, s in enumerate(steps):
        for v in s.inputs:
            last_read[v] = i
    free: dict[tuple[int, str], list[int]] = {}
    slots: list[tuple[int, str]] = []
    live: dict[int, int] = {}
    per_step: list[dict[int, int]] = []

    def take(v: int) -> int:
        key = types[v]
        pool = free.get(key)
        if pool:
            return pool.pop()
        slots.append(key)
        return len(slots) - 1

    for i, s in enumerate(steps):
        m: dict[int, int] = {}
        for v in s.inputs:
            if v in live:
                m[v] = live[v]
        scratch = []
        for v in s.outputs:
            if v in external or v in outputs:
                continue
            if v in live:
                m[v] = live[v]
            elif last_read.get(v, -1) > i:
                live[v] = m[v] = take(v)
            else:
                m[v] = take(v)
                scratch.append(v)
        per_step.append(m)
        for v in scratch:
            free.setdefault(types[v], []).append(m[v])
        for v in set(s.inputs):
            if v in live and last_read[v] == i:
                free.setdefault(types[v], []).append(live.pop(v))
    return MemoryPlan(tuple(per_step), tuple(slots), frozenset(outputs))
