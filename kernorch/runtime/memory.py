"""Buffer planning: give every value a kernel writes a slot, reusing slots whose values are dead.

Values live from the first kernel that writes them to the last kernel that reads them. Slots are
bytes: a value takes the smallest dead slot that holds it (any dtype), else the largest dead slot,
grown to fit, else a new one. Why: slots keyed by exact element count and dtype gave MobileNetV3's
plan 44 slots and a 13 MB arena, most slots touched once per call, so an early layer's 3.2 MB
output was written to lines the weights had long evicted (every store a read from memory first);
reused bytes stay hot in cache, as onnxruntime's memory planner keeps them. Writes that nobody
reads any more (a duplicated kernel re-writing a dead value) get a scratch slot.
A kernel may write an output over an input whose last reader it is (``Step.overwrites``, found by
inplace.py): the output takes the input's slot, so a residual add reads and writes the same lines.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Step:
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    overwrites: tuple[tuple[int, int], ...] = ()  # (output, input): may be written over that input


@dataclass(frozen=True)
class MemoryPlan:
    slot_of: tuple[dict[int, int], ...]         # per step: value id -> slot it writes / reads
    slots: tuple[int, ...]                     # slot -> capacity in bytes
    output_values: frozenset[int]              # graph outputs: fresh tensors each call, never slots

    @property
    def nslots(self) -> int:
        return len(self.slots)


def plan_memory(steps: Sequence[Step], nbytes: dict[int, int], external: set[int],
                outputs: set[int]) -> MemoryPlan:
    """``nbytes[v]``: the size of value ``v``; ``external`` are graph inputs and constants (never
    slotted); graph ``outputs`` are returned to the user and so are allocated per call, not slotted."""
    last_read: dict[int, int] = {}
    for i, s in enumerate(steps):
        for v in s.inputs:
            last_read[v] = i
    free: list[int] = []  # dead slots, most recently freed last
    slots: list[int] = []
    live: dict[int, int] = {}
    per_step: list[dict[int, int]] = []

    def take(v: int) -> int:
        need = nbytes[v]
        fits = [k for k, s in enumerate(free) if slots[s] >= need]
        if fits:  # the smallest that holds it; of equal ones the most recently freed (hottest)
            k = min(fits, key=lambda k: (slots[free[k]], -k))
        elif free:  # the largest, grown
            k = max(range(len(free)), key=lambda k: (slots[free[k]], k))
        else:
            slots.append(need)
            return len(slots) - 1
        s = free.pop(k)
        slots[s] = max(slots[s], need)
        return s

    for i, s in enumerate(steps):
        m: dict[int, int] = {}
        for v in s.inputs:
            if v in live:
                m[v] = live[v]
        scratch = []
        over = {o: u for o, u in s.overwrites
                if u in live and last_read[u] == i and u not in s.outputs and slots[live[u]] >= nbytes[o]}
        for v in s.outputs:
            if v in external or v in outputs:
                continue
            if v in live:
                m[v] = live[v]
            elif v in over and last_read.get(v, -1) > i:
                live[v] = m[v] = live.pop(over[v])  # the input's slot, handed over: not freed below
            elif last_read.get(v, -1) > i:
                live[v] = m[v] = take(v)
            else:
                m[v] = take(v)
                scratch.append(v)
        per_step.append(m)
        for v in scratch:
            free.append(m[v])
        for v in set(s.inputs):
            if v in live and last_read[v] == i:
                free.append(live.pop(v))
    return MemoryPlan(tuple(per_step), tuple(slots), frozenset(outputs))
