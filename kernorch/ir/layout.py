"""Index maps: the meaning of every layout primitive (reshape, permute, slice, pad, broadcast,
window views for pooling, flips, gathers with constant indices, nearest resize).

An ``IndexMap`` sends an output index ``(i0, .., in)`` to an input index (one expression per input
dimension) plus a validity mask; where the mask fails the element is ``pad``. Maps compose
symbolically, like views, so a chain of layout prims costs nothing until a kernel reads through it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from kernorch.ir import index as ix
from kernorch.ir.index import Expr


@dataclass(frozen=True, slots=True)
class Cond:
    """``lo <= expr < hi``."""

    expr: Expr
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class IndexMap:
    out_shape: tuple[int, ...]
    in_shape: tuple[int, ...]
    index: tuple[Expr, ...]
    mask: tuple[Cond, ...] = ()
    pad: float = 0.0

    def __post_init__(self) -> None:
        if len(self.index) != len(self.in_shape):
            raise ValueError(f"index map needs {len(self.in_shape)} expressions, got {len(self.index)}")

    # -- composition ------------------------------------------------------------------------
    def compose(self, inner: IndexMap) -> IndexMap | None:
        """``self`` maps out -> mid and ``inner`` maps mid -> in; return out -> in, or None when
        both carry masks with different pad values (then the two cannot be one view)."""
        if tuple(inner.out_shape) != tuple(self.in_shape):
            raise ValueError(f"cannot compose: {self.in_shape} vs {inner.out_shape}")
        if self.mask and inner.mask and not _same_pad(self.pad, inner.pad):
            return None
        sizes = self.out_shape
        idx = tuple(ix.substitute(e, self.index, sizes) for e in inner.index)
        conds = list(self.mask) + [Cond(ix.substitute(c.expr, self.index, sizes), c.lo, c.hi) for c in inner.mask]
        pad = inner.pad if inner.mask else self.pad
        return make(self.out_shape, inner.in_shape, idx, conds, pad)

    # -- queries ----------------------------------------------------------------------------
    def is_identity(self) -> bool:
        return (self.out_shape == self.in_shape and not self.mask
                and all(e == ix.var(d) for d, e in enumerate(self.index)))

    def gather(self, x: np.ndarray) -> np.ndarray:
        """Apply the map to a concrete array (the reference semantics)."""
        fast = self._strided(x)
        return fast if fast is not None else self.gather_by_index(x)

    def gather_by_index(self, x: np.ndarray) -> np.ndarray:
        """``gather`` through explicit index arrays: the definition, for any map."""
        grid = np.indices(self.out_shape, dtype=np.int64) if self.out_shape else []
        env = list(grid)
        idx = []
        for d, e in enumerate(self.index):
            v = ix.evaluate(e, env)
            v = np.broadcast_to(np.asarray(v, dtype=np.int64), self.out_shape)
            idx.append(np.clip(v, 0, self.in_shape[d] - 1) if self.in_shape[d] > 0 else v)
        if x.size == 0:  # nothing to read: every output element is masked out (a pad of an empty axis)
            out = np.zeros(self.out_shape, x.dtype)
        else:
            out = x[tuple(idx)] if idx else np.broadcast_to(x, self.out_shape).copy()
            out = np.array(out, copy=True)
        if self.mask:
            ok = np.ones(self.out_shape, dtype=bool)
            for c in self.mask:
                v = np.asarray(ix.evaluate(c.expr, env))
                ok &= (v >= c.lo) & (v < c.hi)
            fill = np.array(self.pad).astype(x.dtype) if x.dtype != np.bool_ else bool(self.pad)
            out = np.where(ok, out, fill)
        return out

    def _strided(self, x: np.ndarray) -> np.ndarray | None:
        """The same result without index arrays when the map is a strided view (unmasked, every
        index affine in the output variables and in range: permute, slice, broadcast, unpadded
        windows) or a reshape. Index arrays cost 8 bytes per element and output dim: a transposed
        100M-element weight would take gigabytes."""
        if self.mask or x.size == 0:
            return None
        x = np.ascontiguousarray(x)
        strides = [0] * len(self.out_shape)
        offset = 0
        for d, e in enumerate(self.index):
            for atom, coef in e.terms:
                if not isinstance(atom, ix.Var):
                    return self._reshaped(x)
                strides[atom.i] += coef * x.strides[d]
            lo, hi = ix.bounds(e, self.out_shape)
            if lo < 0 or hi >= self.in_shape[d]:
                return None
            offset += e.const * x.strides[d]
        flat = x.reshape(-1)[offset // x.itemsize:]
        return np.lib.stride_tricks.as_strided(flat, self.out_shape, strides, writeable=False).copy()

    def _reshaped(self, x: np.ndarray) -> np.ndarray | None:
        if math.prod(self.in_shape) != math.prod(self.out_shape):
            return None
        if self.index != reshape(self.in_shape, self.out_shape).index:
            return None
        return x.reshape(self.out_shape).copy()


def _same_pad(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def make(out_shape: Sequence[int], in_shape: Sequence[int], index: Sequence[Expr],
         mask: Sequence[Cond] = (), pad: float = 0.0) -> IndexMap:
    """Build a map, dropping mask conditions that always hold."""
    out_shape = tuple(int(s) for s in out_shape)
    kept = []
    for c in mask:
        lo, hi = ix.bounds(c.expr, out_shape)
        if lo >= c.lo and hi < c.hi:
            continue
        if c not in kept:
            kept.append(c)
    return IndexMap(out_shape, tuple(int(s) for s in in_shape), tuple(index), tuple(kept), float(pad) if kept else 0.0)


# ---------------------------------------------------------------------------------------------
# Constructors, one per layout operation
# ---------------------------------------------------------------------------------------------

def identity(shape: Sequence[int]) -> IndexMap:
    return make(shape, shape, [ix.var(d) for d in range(len(shape))])


def reshape(in_shape: Sequence[int], out_shape: Sequence[int]) -> IndexMap:
    in_shape, out_shape = tuple(in_shape), tuple(out_shape)
    if math.prod(in_shape) != math.prod(out_shape):
        raise ValueError(f"reshape {in_shape} -> {out_shape} changes the element count")
    if 0 in in_shape:  # nothing to read: any index is right, and mod by a zero size is undefined
        return make(out_shape, in_shape, [ix.const(0)] * len(in_shape))
    flat = ix.const(0)
    stride = 1
    for d in reversed(range(len(out_shape))):
        flat = flat + ix.var(d) * stride
        stride *= out_shape[d]
    idx = []
    stride = 1
    strides = []
    for d in reversed(range(len(in_shape))):
        strides.append(stride)
        stride *= in_shape[d]
    strides.reverse()
    for d, n in enumerate(in_shape):
        idx.append(ix.mod(ix.floordiv(flat, strides[d], out_shape), n, out_shape))
    return make(out_shape, in_shape, idx)


def permute(in_shape: Sequence[int], perm: Sequence[int]) -> IndexMap:
    out_shape = [in_shape[p] for p in perm]
    idx: list[Expr] = [ix.const(0)] * len(in_shape)
    for k, p in enumerate(perm):
        idx[p] = ix.var(k)
    return make(out_shape, in_shape, idx)


def slice_(in_shape: Sequence[int], starts: Sequence[int], steps: Sequence[int], out_shape: Sequence[int]) -> IndexMap:
    """``out[i] = in[start + step * i]`` per dimension (steps may be negative)."""
    idx = [ix.var(d) * steps[d] + starts[d] for d in range(len(in_shape))]
    return make(out_shape, in_shape, idx)


def pad(in_shape: Sequence[int], begin: Sequence[int], end: Sequence[int], mode: str = "constant",
        value: float = 0.0) -> IndexMap:
    """Constant, reflect or edge padding; negative pads crop."""
    out_shape = [n + b + e for n, b, e in zip(in_shape, begin, end)]
    idx, conds = [], []
    for d, n in enumerate(in_shape):
        j = ix.var(d) - begin[d]
        if mode == "constant":
            conds.append(Cond(j, 0, n))
        elif mode == "reflect":
            if n > 1:
                absj = ix.maximum(j, -1 * j, out_shape)
                j = (n - 1) - ix.maximum((n - 1) - absj, absj - (n - 1), out_shape)
            else:
                j = ix.const(0)
        elif mode == "edge":
            j = ix.minimum(ix.maximum(j, 0, out_shape), n - 1, out_shape)
        else:
            raise ValueError(f"unknown pad mode {mode!r}")
        idx.append(j)
    return make(out_shape, in_shape, idx, conds, value)


def broadcast(in_shape: Sequence[int], out_shape: Sequence[int]) -> IndexMap:
    """Same rank; each input dimension equals the output's or is 1."""
    if len(in_shape) != len(out_shape):
        raise ValueError("broadcast needs equal ranks")
    idx = []
    for d, (a, b) in enumerate(zip(in_shape, out_shape)):
        if a == b:
            idx.append(ix.var(d))
        elif a == 1:
            idx.append(ix.const(0))
        else:
            raise ValueError(f"cannot broadcast {tuple(in_shape)} to {tuple(out_shape)}")
    return make(out_shape, in_shape, idx)


def flip(in_shape: Sequence[int], axes: Sequence[int]) -> IndexMap:
    idx = [(in_shape[d] - 1) - ix.var(d) if d in axes else ix.var(d) for d in range(len(in_shape))]
    return make(in_shape, in_shape, idx)


def window(in_shape: Sequence[int], kernel: Sequence[int], strides: Sequence[int], pads_begin: Sequence[int],
           dilations: Sequence[int], out_spatial: Sequence[int], pad_value: float = 0.0) -> IndexMap:
    """Sliding windows over the trailing ``len(kernel)`` dims: out shape is
    ``lead + out_spatial + kernel``; positions in the padding are masked with ``pad_value``."""
    k = len(kernel)
    lead = list(in_shape[:-k])
    out_shape = lead + list(out_spatial) + list(kernel)
    idx: list[Expr] = [ix.var(d) for d in range(len(lead))]
    conds = []
    for s in range(k):
        o = ix.var(len(lead) + s)
        w = ix.var(len(lead) + k + s)
        j = o * strides[s] + w * dilations[s] - pads_begin[s]
        idx.append(j)
        conds.append(Cond(j, 0, in_shape[len(lead) + s]))
    return make(out_shape, in_shape, idx, conds, pad_value)


def take(in_shape: Sequence[int], axis: int, indices: np.ndarray) -> IndexMap:
    """Gather with constant indices along ``axis`` (numpy ``take``); negative indices wrap."""
    indices = np.asarray(indices, dtype=np.int64)
    n = in_shape[axis]
    flat = [int(i) + n if i < 0 else int(i) for i in indices.reshape(-1)]
    out_shape = list(in_shape[:axis]) + list(indices.shape) + list(in_shape[axis + 1:])
    r = indices.ndim
    pos = ix.const(0)
    stride = 1
    for d in reversed(range(r)):
        pos = pos + ix.var(axis + d) * stride
        stride *= indices.shape[d]
    idx: list[Expr] = []
    for d in range(len(in_shape)):
        if d < axis:
            idx.append(ix.var(d))
        elif d == axis:
            idx.append(ix.lookup(flat, pos, out_shape) if flat else ix.const(0))
        else:
            idx.append(ix.var(d - 1 + r))
    return make(out_shape, in_shape, idx)


# ---------------------------------------------------------------------------------------------
# Gathers with runtime indices (Op.GATHER): constructors and reference semantics
# ---------------------------------------------------------------------------------------------
#
# Note [gather bounds]
# ONNX gathers accept indices in [-n, n) on an axis of size n; a negative index counts from the
# end (i + n). Anything outside is an error: the interpreter raises GatherIndexError naming the
# index and the axis. Generated code (C and Triton) cannot raise, and must never read outside
# the buffer: it wraps a negative index once and then clamps to [0, n - 1], so an out-of-range
# index reads the first or last row (what onnxruntime's CUDA and XLA's gathers do). Kernels are
# only ever checked against the interpreter on in-range indices.

class GatherIndexError(IndexError):
    """An index of a runtime gather is outside [-n, n) (ONNX: undefined, kernorch: an error)."""


GatherMaps = tuple[IndexMap, tuple[IndexMap, ...]]  # the data map and one map per index input


def gather_take(data_shape: Sequence[int], axis: int, idx_shape: Sequence[int]) -> GatherMaps:
    """ONNX Gather (numpy ``take``): out shape ``data[:axis] + idx + data[axis+1:]``.
    Returns the data map (a placeholder on ``axis``) and the one index map."""
    r = len(idx_shape)
    out_shape = list(data_shape[:axis]) + list(idx_shape) + list(data_shape[axis + 1:])
    idx: list[Expr] = []
    for d in range(len(data_shape)):
        idx.append(ix.var(d) if d < axis else ix.const(0) if d == axis else ix.var(d - 1 + r))
    imap = make(out_shape, idx_shape, [ix.var(axis + j) for j in range(r)])
    return make(out_shape, data_shape, idx), (imap,)


def gather_elements(data_shape: Sequence[int], axis: int, idx_shape: Sequence[int]) -> GatherMaps:
    """ONNX GatherElements: out shape = idx shape, ``out[o] = data[o with o[axis] = idx[o]]``."""
    idx = [ix.const(0) if d == axis else ix.var(d) for d in range(len(data_shape))]
    return make(idx_shape, data_shape, idx), (identity(idx_shape),)


def gather_nd(data_shape: Sequence[int], idx_shape: Sequence[int], batch_dims: int) -> GatherMaps:
    """ONNX GatherND: ``k = idx_shape[-1]`` leading data axes after the batch dims are read from
    the index tuple; out shape ``idx_shape[:-1] + data_shape[batch_dims + k:]``. One index map
    per component (all into the same index tensor)."""
    k, q = idx_shape[-1], len(idx_shape)
    out_shape = list(idx_shape[:-1]) + list(data_shape[batch_dims + k:])
    idx: list[Expr] = []
    for d in range(len(data_shape)):
        if d < batch_dims:
            idx.append(ix.var(d))
        elif d < batch_dims + k:
            idx.append(ix.const(0))
        else:
            idx.append(ix.var(q - 1 + d - batch_dims - k))
    maps = tuple(make(out_shape, idx_shape, [ix.var(d) for d in range(q - 1)] + [ix.const(m)]) for m in range(k))
    return make(out_shape, data_shape, idx), maps


def gather_runtime(data: np.ndarray, indices: Sequence[np.ndarray], data_map: IndexMap, axes: Sequence[int],
                   index_maps: Sequence[IndexMap], what: str = "gather") -> np.ndarray:
    """Reference semantics of Op.GATHER; raises GatherIndexError on an index outside [-n, n)."""
    out_shape = data_map.out_shape
    grid = list(np.indices(out_shape, dtype=np.int64)) if out_shape else []
    coords = []
    for d, e in enumerate(data_map.index):
        coords.append(np.broadcast_to(np.asarray(ix.evaluate(e, grid), dtype=np.int64), out_shape))
    for a, arr, m in zip(axes, indices, index_maps):
        n = data_map.in_shape[a]
        v = m.gather(np.asarray(arr)).astype(np.int64)
        bad = (v < -n) | (v >= n)
        if bad.any():
            raise GatherIndexError(f"{what}: index {int(v[bad].reshape(-1)[0])} is out of range [-{n}, {n}) "
                                   f"on data axis {a}")
        coords[a] = np.where(v < 0, v + n, v)
    return np.array(data[tuple(coords)], copy=True)
