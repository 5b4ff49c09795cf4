"""Recognize what a VIEW prim's index map does, as a short list of ordinary tensor steps.

Exporters (ONNX) and executors (PyTorch) cannot read index expressions; they can run reshape,
transpose, slice, expand and pad. ``plan_view`` proves a map equal to such a chain by comparing
flat index tables (every output element's flat input offset, -1 where masked) with the table of a
map built by ``kernorch.ir.layout``'s constructors, and otherwise falls back to a generic gather
with a constant index table (plus a mask), so every view has a plan.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

from kernorch.ir import index as ix
from kernorch.ir import layout
from kernorch.ir.layout import IndexMap
from kernorch.providers.view_steps import (Step, ViewPlan, apply_numpy, flat_table, replay, same, shape_after,
                                           slice_bounds, tidy)

__all__ = ["Step", "ViewPlan", "apply_numpy", "flat_table", "plan_view", "shape_after", "slice_bounds"]


def _strided(table: np.ndarray) -> tuple[list[tuple[int, int]], int] | None:
    """Write a flat table as nested strided loops: ``[(length, stride)]`` outermost first and an
    offset, or None. Greedy from the innermost loop; merged loops are fine."""
    base = table.reshape(-1)
    dims: list[tuple[int, int]] = []
    while base.size > 1:
        s = int(base[1] - base[0])
        bad = np.nonzero(np.diff(base) != s)[0]
        n = int(bad[0]) + 1 if bad.size else base.size
        if base.size % n:
            return None
        rows = base.reshape(-1, n)
        if not np.array_equal(rows - rows[:, :1], np.broadcast_to(np.arange(n, dtype=np.int64) * s, rows.shape)):
            return None
        dims.append((n, s))
        base = rows[:, 0]
    dims.reverse()
    return dims, int(base[0]) if base.size else 0


def _permutation_plan(m: IndexMap, table: np.ndarray) -> ViewPlan | None:
    """reshape -> transpose -> (unsqueeze -> expand) -> reshape: identity, reshape, permute,
    broadcast and their compositions (flatten after transpose, pixel/channel shuffle)."""
    if (table < 0).any() or table.size == 0:
        return None
    found = _strided(table)
    if found is None:
        return None
    dims, offset = found
    live = [(k, n, s) for k, (n, s) in enumerate(dims) if s != 0]
    if offset != 0 or any(s < 0 for _, _, s in live):
        return None
    order = sorted(live, key=lambda t: -t[2])
    expect = 1
    for _, n, s in reversed(order):
        if s != expect:
            return None
        expect *= n
    if expect != math.prod(m.in_shape):
        return None
    steps: list[Step] = []
    shape = tuple(n for _, n, _ in order)
    if shape != m.in_shape:
        steps.append(Step("reshape", shape=shape))
    perm = tuple(order.index(t) for t in live)
    if perm != tuple(range(len(perm))):
        steps.append(Step("transpose", perm=perm))
        shape = tuple(shape[p] for p in perm)
    broadcasting = len(live) != len(dims)
    if broadcasting:
        unit = tuple(n if s != 0 else 1 for n, s in dims)
        if unit != shape:
            steps.append(Step("reshape", shape=unit))
        shape = tuple(n for n, _ in dims)
        steps.append(Step("expand", shape=shape))
    if shape != m.out_shape:
        steps.append(Step("reshape", shape=m.out_shape))
    steps = tidy(m.in_shape, steps)
    cand = replay(m.in_shape, steps)
    if cand is None or not same(m, cand, table):
        return None
    ops = {s.op for s in steps}
    kind = ("identity" if not steps else "broadcast" if "expand" in ops
            else "permute" if ops == {"transpose"} and len(steps) == 1
            else "reshape-permute" if "transpose" in ops else "reshape")
    return ViewPlan(kind, tuple(steps))


def _simple_plan(m: IndexMap, table: np.ndarray) -> ViewPlan | None:
    """One step, proven against the matching layout constructor: identity, reshape, permute
    (the permutation read off the index expressions), broadcast."""
    if m.mask:
        return None
    size = math.prod(m.in_shape)
    if size == table.size and np.array_equal(table.reshape(-1), np.arange(size)):
        if m.out_shape == m.in_shape:
            return ViewPlan("identity", ())
        if same(m, layout.reshape(m.in_shape, m.out_shape), table):
            return ViewPlan("reshape", (Step("reshape", shape=m.out_shape),))
    if len(m.in_shape) != len(m.out_shape):
        return None
    perm: list[int | None] = [None] * len(m.out_shape)
    for d, e in enumerate(_unit_free(m)):
        a = e.as_atom()
        if isinstance(a, ix.Var):
            perm[a.i] = d
    rest = iter(d for d in range(len(m.in_shape)) if d not in perm)
    perm = [p if p is not None else next(rest, -1) for p in perm]
    if sorted(perm) == list(range(len(perm))) and same(m, layout.permute(m.in_shape, perm), table):
        return ViewPlan("permute", (Step("transpose", perm=tuple(perm)),))
    if all(a in (1, b) for a, b in zip(m.in_shape, m.out_shape)) and same(m, layout.broadcast(m.in_shape, m.out_shape), table):
        return ViewPlan("broadcast", (Step("expand", shape=m.out_shape),))
    return None


def _unit_free(m: IndexMap) -> tuple:
    """Index expressions with the variables of size-1 output dims set to 0."""
    vals = [ix.const(0) if n == 1 else ix.var(k) for k, n in enumerate(m.out_shape)]
    return tuple(ix.substitute(e, vals, m.out_shape) for e in m.index)


def _slice_plan(m: IndexMap, table: np.ndarray) -> ViewPlan | None:
    """Each input dim reads a constant or ``a*i_k + c`` for its own output dim k: slice (any step),
    then transpose / unsqueeze / expand into place."""
    if m.mask:
        return None
    exprs = _unit_free(m)
    starts, steps_, counts, var_of = [], [], [], []
    for d, e in enumerate(exprs):
        if e.is_const:
            starts.append(e.const), steps_.append(1), counts.append(1), var_of.append(None)
            continue
        if len(e.terms) != 1 or not isinstance(e.terms[0][0], ix.Var):
            return None
        k, a = e.terms[0][0].i, e.terms[0][1]
        starts.append(e.const), steps_.append(a), counts.append(m.out_shape[k]), var_of.append(k)
    used = [k for k in var_of if k is not None]
    if len(set(used)) != len(used):
        return None
    for d, n in enumerate(m.in_shape):
        last = starts[d] + steps_[d] * (counts[d] - 1)
        if not (0 <= starts[d] < n and 0 <= last < n):
            return None
    steps: list[Step] = []
    shape = tuple(counts)
    if shape != m.in_shape or any(s != 0 for s in starts) or any(s != 1 for s in steps_):
        steps.append(Step("slice", starts=tuple(starts), steps=tuple(steps_), counts=shape))
    dims = list(range(len(exprs)))
    moving = iter(sorted((d for d in dims if var_of[d] is not None), key=lambda d: var_of[d]))
    perm = tuple(next(moving) if var_of[d] is not None else d for d in dims)  # unit dims stay put
    if perm != tuple(dims):
        steps.append(Step("transpose", perm=perm))
        shape = tuple(shape[p] for p in perm)
    unit = tuple(n if k in used else 1 for k, n in enumerate(m.out_shape))
    if unit != shape:
        steps.append(Step("reshape", shape=unit))
    if unit != m.out_shape:
        steps.append(Step("expand", shape=m.out_shape))
    cand = replay(m.in_shape, steps)
    if cand is None or not same(m, cand, table):
        return None
    return ViewPlan("slice" if steps and steps[0].op == "slice" else "broadcast", tuple(steps))


def _pad_plan(m: IndexMap, table: np.ndarray) -> ViewPlan | None:
    """Constant / reflect / edge padding (negative pads crop: a slice first)."""
    if len(m.out_shape) != len(m.in_shape) or not m.out_shape:
        return None
    seqs = []
    for d, e in enumerate(m.index):
        if ix.free_vars(e) - {d}:
            return None
        env = [np.zeros(1, dtype=np.int64)] * len(m.out_shape)
        env[d] = np.arange(m.out_shape[d], dtype=np.int64)
        seqs.append(np.broadcast_to(np.asarray(ix.evaluate(e, env), dtype=np.int64), (m.out_shape[d],)))
    modes = ["constant"] if m.mask else ["edge", "reflect"]
    for mode in modes:
        options = []
        for d, seq in enumerate(seqs):
            n, diff = m.in_shape[d], m.out_shape[d] - m.in_shape[d]
            first = int(seq[0]) if seq.size else 0
            if mode == "constant":
                cands = {-first}
            elif mode == "edge":
                zeros = int(np.argmax(seq != 0)) if (seq != 0).any() else seq.size
                cands = {-first, zeros - 1, 0}
            else:
                cands = {first, -first, 0}
            if n == 1 and mode != "constant":
                cands.add(diff // 2)
            options.append(sorted(c for c in cands if -n < c and -n < diff - c))
        for begins in itertools.islice(itertools.product(*options), 64):
            ends = tuple(m.out_shape[d] - m.in_shape[d] - b for d, b in enumerate(begins))
            if not any(begins) and not any(ends):
                continue
            plan = _pad_steps(m.in_shape, tuple(begins), ends, mode, m.pad)
            if plan is None:
                continue
            cand = replay(m.in_shape, list(plan))
            if cand is not None and same(m, cand, table):
                return ViewPlan(f"pad-{mode}", plan)
    return None


def _pad_steps(in_shape, begins, ends, mode, value) -> tuple[Step, ...] | None:
    crop_b = tuple(max(-b, 0) for b in begins)
    crop_e = tuple(max(-e, 0) for e in ends)
    steps = []
    shape = tuple(n - cb - ce for n, cb, ce in zip(in_shape, crop_b, crop_e))
    if any(s <= 0 for s in shape):
        return None
    if any(crop_b) or any(crop_e):
        steps.append(Step("slice", starts=crop_b, steps=(1,) * len(shape), counts=shape))
    pb, pe = tuple(max(b, 0) for b in begins), tuple(max(e, 0) for e in ends)
    if mode == "reflect" and any(b >= n or e >= n for b, e, n in zip(pb, pe, shape) if (b or e)):
        return None  # ONNX and PyTorch reflect at most once
    if any(pb) or any(pe):
        steps.append(Step("pad", begins=pb, ends=pe, mode=mode, value=float(value) if mode == "constant" else 0.0))
    return tuple(steps)


def _box_steps(in_shape: tuple[int, ...], table: np.ndarray, value: float) -> list[Step] | None:
    """Steps for a strided box of the flat input in any dim order, with an optional constant
    border (where ``table`` is -1): reshape the input so every output dim has a dim of its own,
    slice the box, transpose, pad. Unverified: callers replay and compare."""
    out = table.shape
    if not out:
        return None
    live = table >= 0
    box = []
    for d in range(len(out)):
        along = np.nonzero(live.any(axis=tuple(a for a in range(len(out)) if a != d)))[0]
        if along.size == 0:
            return None
        box.append((int(along[0]), int(along[-1]) + 1))
    core = table[tuple(slice(lo, hi) for lo, hi in box)]
    if (core < 0).any() or int(live.sum()) != core.size:
        return None  # the unmasked part is not one box
    shape = core.shape
    offset = int(core.flat[0])
    strides = {}
    fit = np.full(shape, offset, dtype=np.int64)
    for d, n in enumerate(shape):
        if n > 1:
            idx = [0] * len(shape)
            idx[d] = 1
            strides[d] = int(core[tuple(idx)]) - offset
            grid = np.arange(n, dtype=np.int64).reshape([n if a == d else 1 for a in range(len(shape))])
            fit = fit + strides[d] * grid
    if not strides or not np.array_equal(fit, core) or any(st <= 0 for st in strides.values()):
        return None
    order = sorted(strides, key=lambda d: -strides[d])
    ss = [strides[d] for d in order]
    total = math.prod(in_shape)
    if total % ss[0] or any(a % b for a, b in zip(ss, ss[1:])):
        return None
    virtual = [total // ss[0]] + [a // b for a, b in zip(ss, ss[1:])] + [ss[-1]]
    strides_v = ss + [1]
    starts = [(offset // st) % n if k else offset // st for k, (st, n) in enumerate(zip(strides_v, virtual))]
    counts = [shape[d] for d in order] + [1]
    if any(a + c > n for a, c, n in zip(starts, counts, virtual)):
        return None
    steps = [Step("reshape", shape=tuple(virtual)),
             Step("slice", starts=tuple(starts), steps=(1,) * len(virtual), counts=tuple(counts)),
             Step("reshape", shape=tuple(counts[:-1]))]
    perm = tuple(sorted(range(len(order)), key=lambda k: order[k]))
    if perm != tuple(range(len(order))):
        steps.append(Step("transpose", perm=perm))
    steps.append(Step("reshape", shape=tuple(shape)))
    begins = tuple(lo for lo, _ in box)
    ends = tuple(n - hi for n, (_, hi) in zip(out, box))
    if any(begins) or any(ends):
        steps.append(Step("pad", begins=begins, ends=ends, mode="constant", value=value))
    return tidy(in_shape, steps)


def _verified(m: IndexMap, table: np.ndarray, kind: str, steps: list[Step] | None) -> ViewPlan | None:
    if steps is None:
        return None
    cand = replay(m.in_shape, steps)
    if cand is None or not same(m, cand, table):
        return None
    return ViewPlan(kind, tuple(steps))


def _box_plan(m: IndexMap, table: np.ndarray) -> ViewPlan | None:
    """A strided box of the input in any dim order, maybe with a constant border. Covers
    slice-then-split-heads (GPT-2's q/k/v) and split-heads-then-slice-then-pad (EfficientViT)."""
    steps = _box_steps(m.in_shape, table, float(m.pad))
    kind = "box-pad" if steps and steps[-1].op == "pad" else "box"
    return _verified(m, table, kind, steps)


def _repeats(table: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]] | None:
    """Nearest-neighbour upsampling by integer factors: (the table before it, factor per dim)."""
    factors = []
    for d, n in enumerate(table.shape):
        f = next((f for f in (4, 3, 2) if n % f == 0 and np.array_equal(
            np.repeat(np.take(table, np.arange(0, n, f), axis=d), f, axis=d), table)), 1)
        factors.append(f)
        if f > 1:
            table = np.take(table, np.arange(0, n, f), axis=d)
    return (table, tuple(factors)) if any(f > 1 for f in factors) else None


def _upsample_plan(m: IndexMap, table: np.ndarray) -> ViewPlan | None:
    """Edge/reflect padding of a nearest-neighbour upsampling of a box (candy's decoder: resize
    x2 then reflection pad, which the rewrites compose into one view): box steps, an upsample
    step (ONNX Resize, which runtimes run as interpolation kernels), then the pad."""
    if (table < 0).any() or len(m.out_shape) != len(m.in_shape):
        return None
    for mode in ("none", "reflect", "edge"):
        pads = [(0, 0)] * table.ndim if mode == "none" else None
        options = ([[p] for p in pads] if pads is not None else
                   [[(b, b) for b in range(4) if 2 * b < n] if n != k else [(0, 0)]
                    for n, k in zip(table.shape, m.in_shape)])
        for pad in itertools.islice(itertools.product(*options), 256):
            if mode != "none" and not any(b for b, _ in pad):
                continue
            core = table[tuple(slice(b, n - e) for (b, e), n in zip(pad, table.shape))]
            if mode != "none" and not np.array_equal(np.pad(core, pad, mode=mode), table):
                continue
            found = _repeats(core)
            if found is None:
                continue
            small, factors = found
            steps = _box_steps(m.in_shape, small, 0.0)
            if steps is None:
                continue
            steps.append(Step("upsample", shape=factors))
            if mode != "none":
                steps.append(Step("pad", begins=tuple(b for b, _ in pad), ends=tuple(e for _, e in pad), mode=mode))
            kind = "upsample" + ("" if mode == "none" else f"-pad-{mode}")
            plan = _verified(m, table, kind, tidy(m.in_shape, steps))
            if plan is not None:
                return plan
    return None


def _gather_plan(m: IndexMap, table: np.ndarray) -> ViewPlan:
    mask = table >= 0
    idx = np.where(mask, table, 0).astype(np.int64)
    return ViewPlan("gather", (Step("gather", table=idx, mask=None if mask.all() else mask, value=float(m.pad)),))


def plan_view(m: IndexMap) -> ViewPlan:
    """The cheapest recognized chain of steps equal to ``m``; a gather when nothing else fits.
    Recognized plans are cached; gathers are not (their tables can be megabytes)."""
    plan = _cached(m)
    return plan if plan is not None else _gather_plan(m, flat_table(m))


@lru_cache(maxsize=1024)
def _cached(m: IndexMap) -> ViewPlan | None:
    plan = _plan(m)
    return None if plan.kind == "gather" else plan


def _plan(m: IndexMap) -> ViewPlan:
    table = flat_table(m)
    if math.prod(m.in_shape) == 0 or table.size == 0:
        return _gather_plan(m, table)
    for rec in (_simple_plan, _slice_plan, _permutation_plan, _pad_plan, _box_plan, _upsample_plan):
        plan = rec(m, table)
        if plan is not None:
            return plan
    return _gather_plan(m, table)


