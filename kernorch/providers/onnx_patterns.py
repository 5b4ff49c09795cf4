"""Fission's spellings of a few ONNX operators, recognized in a subgraph being exported and
written back as that one operator (ReduceMean, Div, Resize, Softmax): runtimes match their fused
kernels (normalization, attention, interpolation) against those operators, not against the
primitives. Each function takes the exporter (``to_onnx._Emitter``) and a prim, and returns the
new node's output name or None when the prim is not that pattern.
"""

from __future__ import annotations

import math

import numpy as np

from kernorch.ir import index as ix
from kernorch.ir.prims import Op, Prim, ValueId


def mean(em, p: Prim) -> str | None:
    """``sum(x) * (1/n)`` over the n summed elements as one ReduceMean (how runtimes spell a
    mean, which their normalization fusions look for); None if ``p`` is not that."""
    for s_, c in (p.inputs, p.inputs[::-1]):
        q = em.producer.get(s_)
        c = _through_broadcasts(em, c)
        if q is None or q.op is not Op.SUM or c not in em.sub.constants:
            continue
        scale = np.asarray(em.sub.constants[c])
        if scale.ndim != 0 or np.dtype(em.dtype(q.inputs[0])).kind != "f":
            continue
        shape = em.sub.types[q.inputs[0]].shape
        n = math.prod(shape[a] for a in q.attrs.axes)
        if n and math.isclose(float(scale), 1.0 / n, rel_tol=1e-6):
            axes = np.array([int(a) for a in q.attrs.axes], dtype=np.int64)
            x = em.value(q.inputs[0])
            if em.opset >= 18:
                return em.node("ReduceMean", [x, em.const(axes)], keepdims=int(q.attrs.keepdims))
            return em.node("ReduceMean", [x], axes=axes.tolist(), keepdims=int(q.attrs.keepdims))
    return None


def divide(em, p: Prim) -> str | None:
    """``x * recip(y)`` as ``x / y`` (the spelling OpenVINO's MVN fusion matches) when ``x``
    has the full output shape; None otherwise."""
    full = em.sub.types[p.output].shape
    for r, x in (p.inputs, p.inputs[::-1]):
        r = _through_broadcasts(em, r)
        q = em.producer.get(r)
        if (q is not None and q.op is Op.RECIP and np.dtype(em.dtype(r)).kind == "f"
                and x not in em.lazy and em.sub.types[x].shape == full
                and em.dtype(x) == em.dtype(r) == em.dtype(q.inputs[0])):
            return em.node("Div", [em.value(x), em.value(q.inputs[0])])
    return None


def resize(em, p: Prim) -> str | None:
    """``take(x, taps0) * w0 + take(x, taps1) * w1`` along one axis, as fission spells a linear
    Resize, back as one ONNX Resize when its interpolation matrix is exactly that of a linear
    resize with a standard coordinate mode (runtimes run it as one interpolation kernel);
    None otherwise."""
    terms = []
    for v in p.inputs:
        q = em.producer.get(v)
        if q is not None and q.op is Op.VIEW:
            terms.append((q, None))
            continue
        if q is None or q.op is not Op.MUL:
            return None
        found = None
        for a, c in (q.inputs, q.inputs[::-1]):
            c = _through_broadcasts(em, c)
            qa = em.producer.get(a)
            if qa is not None and qa.op is Op.VIEW and c in em.consts:
                found = (qa, np.asarray(em.consts[c], dtype=np.float64))
                break
        if found is None:
            return None
        terms.append(found)
    sources = {view.inputs[0] for view, _ in terms}
    if len(sources) != 1:
        return None
    x = sources.pop()
    shape_in, shape_out = em.sub.types[x].shape, em.sub.types[p.output].shape
    axes = [k for k, (a, b) in enumerate(zip(shape_in, shape_out)) if a != b]
    if len(shape_in) != len(shape_out) or len(axes) != 1:
        return None
    d = axes[0]
    n_in, n_out = shape_in[d], shape_out[d]
    grid = [np.arange(n, dtype=np.int64).reshape([n if a == k else 1 for a in range(len(shape_out))])
            for k, n in enumerate(shape_out)]
    interp = np.zeros((n_out, n_in))
    for view, w in terms:
        m = view.attrs.map
        if m.in_shape != shape_in or m.out_shape != shape_out or m.mask:
            return None
        vals = [np.broadcast_to(np.asarray(ix.evaluate(e, grid), dtype=np.int64), shape_out) for e in m.index]
        others = (k for k in range(len(vals)) if k != d)
        if any(not np.array_equal(vals[k], np.broadcast_to(grid[k], shape_out)) for k in others):
            return None
        taps = np.clip(vals[d][tuple(slice(None) if k == d else 0 for k in range(len(shape_out)))], 0, n_in - 1)
        if w is None:
            weights = np.ones(n_out)
        elif w.ndim == len(shape_out) and w.shape[d] == n_out and w.size == n_out:
            weights = w.reshape(-1)
        else:
            return None
        np.add.at(interp, (np.arange(n_out), taps), weights)
    for mode in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"):
        if np.allclose(interp, linear_resize_matrix(mode, n_in, n_out), rtol=0, atol=1e-6):
            sizes = em.const(np.array(shape_out, dtype=np.int64))
            return em.node("Resize", [em.value(x), "", "", sizes], mode="linear",
                             coordinate_transformation_mode=mode)
    return None


def _through_broadcasts(em, v: ValueId) -> ValueId:
    while v in em.producer and em.producer[v].op is Op.BROADCAST:
        v = em.producer[v].inputs[0]
    return v


def softmax(em, p: Prim) -> str | None:
    """``e / sum(e)`` with ``e = exp(x - max(x))`` over one axis, as fission spells Softmax,
    back as one ONNX Softmax (runtimes fuse attention around it); None otherwise."""
    e, s = p.inputs
    q_sum = em.producer.get(_through_broadcasts(em, s))
    q_exp = em.producer.get(e)
    if q_sum is None or q_sum.op is not Op.SUM or q_sum.inputs[0] != e or q_exp is None or q_exp.op is not Op.EXP:
        return None
    q_sub = em.producer.get(q_exp.inputs[0])
    if q_sub is None or q_sub.op is not Op.SUB:
        return None
    x, m = q_sub.inputs
    q_max = em.producer.get(_through_broadcasts(em, m))
    axes = tuple(q_sum.attrs.axes)
    if (q_max is None or q_max.op is not Op.RMAX or q_max.inputs[0] != x or tuple(q_max.attrs.axes) != axes
            or len(axes) != 1 or em.sub.types[x].shape != em.sub.types[p.output].shape
            or np.dtype(em.dtype(x)).kind != "f"):
        return None
    return em.node("Softmax", [em.value(x)], axis=int(axes[0]))


def linear_resize_matrix(mode: str, n_in: int, n_out: int) -> np.ndarray:
    """out = M @ in for ONNX's 1-D linear Resize to ``n_out`` (sizes given, so scale = n_out /
    n_in), source coordinates clamped to the input (edge padding)."""
    o = np.arange(n_out, dtype=np.float64)
    scale = n_out / n_in
    if mode == "half_pixel":
        x = (o + 0.5) / scale - 0.5
    elif mode == "pytorch_half_pixel":
        x = (o + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
    elif mode == "align_corners":
        x = o * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros(n_out)
    else:
        x = o / scale
    x = np.clip(x, 0, n_in - 1)
    lo = np.floor(x).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    frac = x - lo
    m = np.zeros((n_out, n_in))
    np.add.at(m, (np.arange(n_out), lo), 1 - frac)
    np.add.at(m, (np.arange(n_out), hi), frac)
    return m
