"""The steps a view plan is made of, and what each means: the shape after it, the index map it
stands for (rebuilt with ``kernorch.ir.layout``'s constructors, the independent check of a
recognized plan), its NumPy execution, and the flat index tables that prove two maps equal.

``kernorch.providers.views`` recognizes plans; exporters and executors run their steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.layout import IndexMap


@dataclass(frozen=True)
class Step:
    """One tensor operation. ``op`` and its fields:

    - ``reshape``: ``shape``
    - ``transpose``: ``perm``
    - ``slice``: ``starts, steps, counts`` per dim (``out[i] = in[start + step*i]``, steps may be < 0)
    - ``expand``: ``shape`` (size-1 dims grow)
    - ``pad``: ``begins, ends`` (>= 0), ``mode`` (constant / reflect / edge), ``value``
    - ``upsample``: ``shape`` holds an integer factor per dim (nearest neighbour: out[i] = in[i // f])
    - ``gather``: ``table`` (int64, out shape: flat input offsets), ``mask`` (bool or None), ``value``
    """

    op: str
    shape: tuple[int, ...] = ()
    perm: tuple[int, ...] = ()
    starts: tuple[int, ...] = ()
    steps: tuple[int, ...] = ()
    counts: tuple[int, ...] = ()
    begins: tuple[int, ...] = ()
    ends: tuple[int, ...] = ()
    mode: str = "constant"
    value: float = 0.0
    table: np.ndarray | None = field(default=None, compare=False, repr=False)
    mask: np.ndarray | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ViewPlan:
    """``kind`` names the recognized map (identity, reshape, permute, reshape-permute, broadcast,
    slice, pad-constant, pad-reflect, pad-edge, box, box-pad, upsample, upsample-pad-reflect,
    upsample-pad-edge, gather); ``steps`` apply in order."""

    kind: str
    steps: tuple[Step, ...]


# ---------------------------------------------------------------------------------------------
# Flat tables: the proof of equality
# ---------------------------------------------------------------------------------------------

def flat_table(m: IndexMap) -> np.ndarray:
    """Flat input offset of every output element (the reference's clipping applied), -1 where
    the mask fails; shape ``m.out_shape``."""
    out = m.out_shape
    grid = list(np.indices(out, dtype=np.int64)) if out else []
    flat = np.zeros(out, dtype=np.int64)
    stride = 1
    for d in reversed(range(len(m.in_shape))):
        n = m.in_shape[d]
        v = np.broadcast_to(np.asarray(ix.evaluate(m.index[d], grid), dtype=np.int64), out)
        flat = flat + np.clip(v, 0, max(n - 1, 0)) * stride
        stride *= n
    if m.mask:
        ok = np.ones(out, dtype=bool)
        for c in m.mask:
            v = np.asarray(ix.evaluate(c.expr, grid))
            ok &= (v >= c.lo) & (v < c.hi)
        flat = np.where(ok, flat, -1)
    return flat


def same(m: IndexMap, cand: IndexMap, table: np.ndarray) -> bool:
    if cand.out_shape != m.out_shape or cand.in_shape != m.in_shape:
        return False
    if (table < 0).any() and not same_value(m.pad, cand.pad):
        return False
    return np.array_equal(flat_table(cand), table)


def same_value(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def tidy(shape: tuple[int, ...], steps: list[Step]) -> list[Step]:
    """Merge consecutive reshapes and drop the ones that change nothing."""
    out: list[Step] = []
    start = shape
    for st in steps:
        if st.op == "reshape" and out and out[-1].op == "reshape":
            out.pop()
            shape = _shape_before(start, out)
        if st.op == "reshape" and st.shape == shape:
            continue
        out.append(st)
        shape = shape_after(shape, st)
    return out


def _shape_before(start: tuple[int, ...], steps: list[Step]) -> tuple[int, ...]:
    for st in steps:
        start = shape_after(start, st)
    return start


def shape_after(shape: tuple[int, ...], st: Step) -> tuple[int, ...]:
    if st.op in ("reshape", "expand"):
        return st.shape
    if st.op == "transpose":
        return tuple(shape[p] for p in st.perm)
    if st.op == "slice":
        return st.counts
    if st.op == "pad":
        return tuple(n + b + e for n, b, e in zip(shape, st.begins, st.ends))
    if st.op == "upsample":
        return tuple(n * f for n, f in zip(shape, st.shape))
    return st.table.shape


def replay(in_shape: tuple[int, ...], steps: list[Step]) -> IndexMap | None:
    """Rebuild an index map from steps with layout's constructors (the independent check)."""
    m = layout.identity(in_shape)
    shape = in_shape
    for st in steps:
        if st.op == "reshape":
            nxt = layout.reshape(shape, st.shape)
        elif st.op == "transpose":
            nxt = layout.permute(shape, st.perm)
        elif st.op == "expand":
            nxt = layout.broadcast(shape, st.shape)
        elif st.op == "slice":
            nxt = layout.slice_(shape, st.starts, st.steps, st.counts)
        elif st.op == "pad":
            nxt = layout.pad(shape, st.begins, st.ends, st.mode, st.value)
        elif st.op == "upsample":
            out = shape_after(shape, st)
            nxt = IndexMap(out, shape, tuple(ix.floordiv(ix.var(d), f, out) if f > 1 else ix.var(d)
                                             for d, f in enumerate(st.shape)))
        else:
            return None
        m = nxt.compose(m)
        if m is None:
            return None
        shape = m.out_shape
    return m


def slice_bounds(start: int, step: int, count: int) -> tuple[int, int | None, int]:
    """Python ``slice`` arguments for ``start + step*i, i < count`` (stop None: to the front)."""
    stop = start + step * (count - 1) + (1 if step > 0 else -1)
    return start, (stop if stop >= 0 else None), step


def apply_numpy(plan: ViewPlan, x: np.ndarray) -> np.ndarray:
    """Run a plan with NumPy (tests and the torch provider's reference of the steps)."""
    for st in plan.steps:
        if st.op == "reshape":
            x = x.reshape(st.shape)
        elif st.op == "transpose":
            x = x.transpose(st.perm)
        elif st.op == "expand":
            x = np.broadcast_to(x, st.shape)
        elif st.op == "slice":
            x = x[tuple(slice(*slice_bounds(s, a, c)) for s, a, c in zip(st.starts, st.steps, st.counts))]
        elif st.op == "pad":
            kw = {"constant_values": st.value} if st.mode == "constant" else {}
            x = np.pad(x, list(zip(st.begins, st.ends)), mode=st.mode, **kw)
        elif st.op == "upsample":
            for d, f in enumerate(st.shape):
                x = x.repeat(f, axis=d) if f > 1 else x
        elif st.op == "gather":
            y = x.reshape(-1)[st.table] if x.size else np.zeros(st.table.shape, x.dtype)
            x = y if st.mask is None else np.where(st.mask, y, np.array(st.value).astype(x.dtype))
    return np.array(x)
