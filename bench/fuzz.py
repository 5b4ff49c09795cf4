"""Differential fuzzing of the whole compiler: random valid small ONNX models, every strategy,
compared with onnxruntime.

    python -m bench.fuzz [--minutes N | --models N] [--seed S] [--strategies a,b] [--ops N] [--verbose]

Each model is drawn from one seed (``model_for(seed)``): graph inputs of rank 2-4, then a few
nodes over the claimed op set with shape-consistent attributes (elementwise with broadcasting,
reductions, softmax, layer norm, transpose / reshape / slice / concat / pad, matmul / gemm / conv,
pooling), each reading tensors made earlier. A model onnxruntime refuses is a generator bug and is
counted as such, not as a kernorch failure. Each accepted model is compiled with every strategy
(cost="model": no timing) and its outputs compared with onnxruntime's on random inputs (max error
relative to max(1, max |reference|) <= TOLERANCE, NaN where onnxruntime has NaN).

Known false positives: a normalization (LayerNormalization, InstanceNormalization) over a row whose
values are all equal (a Gather of one element, a saturated Clip) divides rounding noise of the mean
by sqrt(epsilon), so two correct implementations differ by ~1e-4 of the scale (seeds 203326, 204349
with --ops 8: all four strategies agree with each other there, not with onnxruntime).

Models run in a worker process, so a kernel that crashes the process (a segfault) is reported as
a crash of its seed and the run goes on. Prints one line per failure (seed, strategy, what) and a
summary: models generated, ops covered, mismatches, errors, crashes. A failure is reproduced by ``--seed S --models 1 --verbose``; the seed-pinned
subset in tests/e2e/test_fuzz.py runs in the suite, and every failure found becomes a regression
test there.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from kernorch.codegen.templates import TEMPLATES

STRATEGIES = ("unfused", "per-operator", "greedy", "optimal")
# Models per worker process: every compile loads its kernels' shared libraries for good (ctypes
# cannot unload them), so after a few thousand models a process runs out of memory maps.
RECYCLE = int(os.environ.get("KN_FUZZ_RECYCLE", 300))
TOLERANCE = 1e-4
OPSET = 17


# ---------------------------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------------------------

@dataclass
class _Model:
    rng: np.random.Generator
    nodes: list = field(default_factory=list)
    inits: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    shapes: dict = field(default_factory=dict)  # tensor name -> shape
    feeds: dict = field(default_factory=dict)  # name -> array of the graph inputs that are not float32
    ops: collections.Counter = field(default_factory=collections.Counter)
    n: int = 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def const(self, arr: np.ndarray, base: str = "c") -> str:
        nm = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), nm))
        if np.asarray(arr).dtype == np.float32:
            self.shapes[nm] = tuple(np.shape(arr))
        return nm

    def ints(self, values) -> str:
        return self.const(np.asarray(values, dtype=np.int64), "i")

    def node(self, op: str, inputs, shape, **attrs) -> str:
        out = self.name(op.lower()[:6] + "_")
        self.nodes.append(helper.make_node(op, list(inputs), [out], **attrs))
        self.shapes[out] = tuple(int(s) for s in shape)
        self.ops[op] += 1
        return out

    def weights(self, shape, scale: float = 1.0) -> str:
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), "w")

    def pick(self, rank: int | None = None, min_rank: int = 1) -> str | None:
        names = [n for n, s in self.shapes.items() if (rank is None or len(s) == rank) and len(s) >= min_rank
                 and not n.startswith("w")]
        if not names:
            return None
        # prefer recent tensors: deeper chains
        weights = np.arange(1, len(names) + 1, dtype=float) ** 2
        return names[int(self.rng.choice(len(names), p=weights / weights.sum()))]


def _broadcastable(rng, shape) -> tuple[int, ...]:
    """A shape that broadcasts against ``shape``: some dims 1, maybe fewer leading dims."""
    out = [1 if rng.random() < 0.35 else s for s in shape]
    drop = int(rng.integers(0, len(shape))) if rng.random() < 0.3 else 0
    return tuple(out[drop:])


UNARY = ["Relu", "Sigmoid", "Tanh", "Neg", "Abs", "Erf", "Softplus", "LeakyRelu", "Elu", "HardSigmoid",
         "HardSwish", "Softsign", "Floor", "Ceil", "Sign", "Reciprocal", "Exp", "Sqrt", "Log", "Selu", "Celu"]
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "PRelu"]
REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL1",
          "ReduceL2", "ReduceLogSumExp"]


def _unary(m: _Model, x: str) -> str:
    op = str(m.rng.choice(UNARY))
    if op in ("Exp",):  # keep values finite: exp of a bounded value
        x = m.node("Tanh", [x], m.shapes[x])
    if op in ("Sqrt", "Log", "Reciprocal"):  # a positive operand, away from 0
        a = m.node("Abs", [x], m.shapes[x])
        x = m.node("Add", [a, m.const(np.float32(0.5))], m.shapes[x])
    attrs = {}
    if op == "LeakyRelu":
        attrs["alpha"] = float(m.rng.choice([0.01, 0.2]))
    if op in ("Floor", "Ceil", "Sign"):  # discontinuous: keep inputs far from the steps
        x = m.node("Mul", [m.node("Round", [m.node("Mul", [x, m.const(np.float32(4.0))], m.shapes[x])], m.shapes[x]),
                           m.const(np.float32(0.25))], m.shapes[x])
        x = m.node("Add", [x, m.const(np.float32(0.125))], m.shapes[x])
    return m.node(op, [x], m.shapes[x], **attrs)


def _binary(m: _Model, x: str) -> str:
    op = str(m.rng.choice(BINARY))
    shape = m.shapes[x]
    other = [n for n, s in m.shapes.items() if n != x and not n.startswith("w") and _broadcast(s, shape) == shape]
    if other and m.rng.random() < 0.5:
        y = other[int(m.rng.integers(len(other)))]
    else:
        y = m.weights(_broadcastable(m.rng, shape))
    if op == "PRelu":  # slope broadcasts to x (unidirectional)
        y = m.weights(_broadcastable(m.rng, shape), 0.5)
    if op == "Div":  # a denominator away from 0
        y = m.node("Add", [m.node("Abs", [y], m.shapes[y]), m.const(np.float32(0.5))], m.shapes[y])
    if op == "Pow":  # positive base, small exponents
        x = m.node("Add", [m.node("Abs", [x], shape), m.const(np.float32(0.5))], shape)
        y = m.node("Tanh", [y], m.shapes[y])
    out_shape = _broadcast(m.shapes[x], m.shapes[y])
    if m.rng.random() < 0.5 and op in ("Add", "Mul", "Sub"):
        a, b = (y, x) if m.rng.random() < 0.5 else (x, y)
        return m.node(op, [a, b], out_shape)
    if op in ("Max", "Min") and m.rng.random() < 0.3:  # Where(Greater(a, b), a, b) spelling
        c = m.node("Greater", [x, y], out_shape)
        m.shapes.pop(c)  # bool: not an operand for later float ops
        return m.node("Where", [c, x, y] if op == "Max" else [c, y, x], out_shape)
    return m.node(op, [x, y], out_shape)


def _broadcast(a, b) -> tuple[int, ...]:
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for p, q in zip(a, b):
        if p != q and 1 not in (p, q):
            return ()
        out.append(max(p, q))
    return tuple(out)


def _reduce(m: _Model, x: str) -> str:
    op = str(m.rng.choice(REDUCE))
    shape = m.shapes[x]
    r = len(shape)
    axes = sorted(int(a) for a in m.rng.choice(r, size=int(m.rng.integers(1, r + 1)), replace=False))
    keep = int(m.rng.integers(0, 2))
    if keep == 0 and len(axes) == r:
        keep = 1
    out = [1 if d in axes else s for d, s in enumerate(shape)] if keep else [s for d, s in enumerate(shape) if d not in axes]
    if op == "ReduceProd":  # values near 1: products of many stay in range
        x = m.node("Add", [m.node("Mul", [m.node("Tanh", [x], shape), m.const(np.float32(0.2))], shape),
                           m.const(np.float32(1.0))], shape)
    if op == "ReduceSum":
        return m.node(op, [x, m.ints(axes)], out, keepdims=keep)
    return m.node(op, [x], out, axes=axes, keepdims=keep)


def _softmax(m: _Model, x: str) -> str:
    r = len(m.shapes[x])
    op = str(m.rng.choice(["Softmax", "LogSoftmax"]))
    return m.node(op, [x], m.shapes[x], axis=int(m.rng.integers(-r, r)))


def _norm(m: _Model, x: str) -> str:
    shape = m.shapes[x]
    r = len(shape)
    kind = m.rng.random()
    if kind < 0.6:
        axis = int(m.rng.integers(-r, r))
        a = axis % r
        return m.node("LayerNormalization", [x, m.weights(shape[a:]), m.weights(shape[a:])], shape, axis=axis,
                      epsilon=1e-5)
    if r >= 3:
        c = shape[1]
        if kind < 0.8:
            return m.node("InstanceNormalization", [x, m.weights((c,)), m.weights((c,))], shape, epsilon=1e-5)
        mean, var = m.weights((c,)), m.const(np.abs(m.rng.standard_normal(c)).astype(np.float32) + 0.5)
        return m.node("BatchNormalization", [x, m.weights((c,)), m.weights((c,)), mean, var], shape, epsilon=1e-5)
    return _softmax(m, x)


def _transpose(m: _Model, x: str) -> str:
    shape = m.shapes[x]
    perm = [int(p) for p in m.rng.permutation(len(shape))]
    return m.node("Transpose", [x], [shape[p] for p in perm], perm=perm)


def _reshape(m: _Model, x: str) -> str:
    shape = m.shapes[x]
    n = int(np.prod(shape))
    choice = m.rng.random()
    if choice < 0.3 and len(shape) > 1:
        axis = int(m.rng.integers(0, len(shape) + 1))
        out = [int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))]
        return m.node("Flatten", [x], out, axis=axis)
    if choice < 0.5 and len(shape) < 4:
        axis = int(m.rng.integers(0, len(shape) + 1))
        out = list(shape[:axis]) + [1] + list(shape[axis:])
        return m.node("Unsqueeze", [x, m.ints([axis])], out)
    if choice < 0.6 and 1 in shape and len(shape) > 1:
        axis = shape.index(1)
        return m.node("Squeeze", [x, m.ints([axis])], [s for d, s in enumerate(shape) if d != axis])
    # a random factorization, rank 1-4, with maybe a -1
    dims = []
    rest = n
    for _ in range(int(m.rng.integers(1, 4))):
        divs = [d for d in range(1, rest + 1) if rest % d == 0]
        d = int(m.rng.choice(divs))
        dims.append(d)
        rest //= d
    dims.append(rest)
    m.rng.shuffle(dims)
    spec = list(dims)
    if m.rng.random() < 0.4:
        spec[int(m.rng.integers(len(spec)))] = -1
    return m.node("Reshape", [x, m.ints(spec)], dims)


def _slice(m: _Model, x: str) -> str:
    shape = m.shapes[x]
    axes, starts, ends, steps, out = [], [], [], [], list(shape)
    for d, n in enumerate(shape):
        if m.rng.random() < 0.5:
            continue
        step = int(m.rng.choice([1, 1, 2, -1, -2]))
        if step > 0:
            s = int(m.rng.integers(0, n))
            e = int(m.rng.integers(s + 1, n + 1))
            cnt = len(range(s, e, step))
            e_spec = e if (e < n or m.rng.random() < 0.5) else 2 ** 31  # past the end: clamped
        else:
            s = int(m.rng.integers(0, n))
            e = int(m.rng.integers(-1, s))
            cnt = len(range(s, e, step))
            e_spec = e if e >= 0 else -(2 ** 31)
        axes.append(d if m.rng.random() < 0.7 else d - len(shape))
        starts.append(s)
        ends.append(e_spec)
        steps.append(step)
        out[d] = cnt
    if not axes:
        axes, starts, ends, steps = [0], [0], [shape[0]], [1]
    return m.node("Slice", [x, m.ints(starts), m.ints(ends), m.ints(axes), m.ints(steps)], out)


def _concat(m: _Model, x: str) -> str:
    shape = m.shapes[x]
    axis = int(m.rng.integers(0, len(shape)))
    others = [n for n, s in m.shapes.items() if not n.startswith("w") and len(s) == len(shape)
              and all(a == b for d, (a, b) in enumerate(zip(s, shape)) if d != axis)]
    parts = [x, str(m.rng.choice(others))]
    if m.rng.random() < 0.4:
        extra = list(shape)
        extra[axis] = int(m.rng.integers(1, 4))
        parts.append(m.weights(extra))
    m.rng.shuffle(parts)
    out = list(shape)
    out[axis] = sum(m.shapes[p][axis] for p in parts)
    return m.node("Concat", parts, out, axis=axis)


def _pad(m: _Model, x: str) -> str:
    shape = m.shapes[x]
    mode = str(m.rng.choice(["constant", "reflect", "edge"]))
    r = len(shape)
    lo = -1 if mode == "constant" else 0
    pads = []
    for half in range(2):
        for n in shape:
            hi = min(2, n - 1) if mode == "reflect" else 2
            p = int(m.rng.integers(lo if n > 2 else 0, max(hi, 0) + 1))
            pads.append(p)
    out = [n + pads[d] + pads[d + r] for d, n in enumerate(shape)]
    if min(out) < 1:
        return _slice(m, x)
    inputs = [x, m.ints(pads)]
    if mode == "constant" and m.rng.random() < 0.5:
        inputs.append(m.const(np.float32(m.rng.choice([0.5, -1.0]))))
    return m.node("Pad", inputs, out, mode=mode)


def _matmul(m: _Model, x: str) -> str:
    shape = m.shapes[x]
    k = shape[-1]
    n = int(m.rng.integers(1, 9))
    if len(shape) == 2 and m.rng.random() < 0.5:
        trans_b = int(m.rng.integers(0, 2))
        w = m.weights((n, k) if trans_b else (k, n), 1 / np.sqrt(k))
        inputs = [x, w] + ([m.weights((n,))] if m.rng.random() < 0.7 else [])
        return m.node("Gemm", inputs, (shape[0], n), transB=trans_b, alpha=float(m.rng.choice([1.0, 0.5])),
                      beta=1.0)
    if len(shape) >= 3 and m.rng.random() < 0.3:  # batched: both operands activations
        y = m.node("Transpose", [x], list(shape[:-2]) + [shape[-1], shape[-2]],
                   perm=list(range(len(shape) - 2)) + [len(shape) - 1, len(shape) - 2])
        return m.node("MatMul", [x, y], list(shape[:-1]) + [shape[-2]])
    return m.node("MatMul", [x, m.weights((k, n), 1 / np.sqrt(k))], list(shape[:-1]) + [n])


def _conv(m: _Model, x: str) -> str:
    n, c, h, w = m.shapes[x]
    k = int(m.rng.integers(1, min(3, h, w) + 1))
    s = int(m.rng.integers(1, 3))
    dil = int(m.rng.choice([1, 1, 2])) if min(h, w) > 2 * (k - 1) else 1
    p = int(m.rng.integers(0, k))
    group = int(m.rng.choice([g for g in (1, 2, c) if c % g == 0]))
    out_c = group * int(m.rng.integers(1, 4))
    oh = (h + 2 * p - dil * (k - 1) - 1) // s + 1
    ow = (w + 2 * p - dil * (k - 1) - 1) // s + 1
    if oh < 1 or ow < 1:
        return _unary(m, x)
    inputs = [x, m.weights((out_c, c // group, k, k), 1 / np.sqrt(c * k * k / group))]
    if m.rng.random() < 0.6:
        inputs.append(m.weights((out_c,)))
    return m.node("Conv", inputs, (n, out_c, oh, ow), kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p],
                  dilations=[dil, dil], group=group)


def _pool(m: _Model, x: str) -> str:
    n, c, h, w = m.shapes[x]
    kind = m.rng.random()
    if kind < 0.2:
        op = str(m.rng.choice(["GlobalAveragePool", "GlobalMaxPool"]))
        return m.node(op, [x], (n, c, 1, 1))
    op = "MaxPool" if kind < 0.6 else "AveragePool"
    k = int(m.rng.integers(1, min(3, h, w) + 1))
    s = int(m.rng.integers(1, 3))
    p = int(m.rng.integers(0, k))  # pads smaller than the kernel
    ceil = int(m.rng.random() < 0.3)
    attrs = dict(kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p])

    def size(d):
        q = (d + 2 * p - k) / s + 1
        return int(np.ceil(q)) if ceil else int(np.floor(q))
    if ceil and any((int(np.ceil((d + 2 * p - k) / s + 1)) - 1) * s >= d + p for d in (h, w)):
        ceil = 0  # the last window would start in the right padding: conventions differ, stay out
    oh, ow = size(h), size(w)
    if ceil:
        attrs["ceil_mode"] = 1
    if op == "AveragePool":
        attrs["count_include_pad"] = int(m.rng.integers(0, 2))
    return m.node(op, [x], (n, c, oh, ow), **attrs)


def _clip_where(m: _Model, x: str) -> str:
    shape = m.shapes[x]
    kind = m.rng.random()
    if kind < 0.4:
        lo, hi = sorted(float(v) for v in m.rng.uniform(-1.5, 1.5, 2))
        return m.node("Clip", [x, m.const(np.float32(lo)), m.const(np.float32(hi))], shape)
    if kind < 0.7:  # Where on a data-dependent condition
        y = m.weights(_broadcastable(m.rng, shape))
        c = m.node(str(m.rng.choice(["Greater", "Less", "GreaterOrEqual"])), [x, y], shape)
        m.shapes.pop(c)
        return m.node("Where", [c, x, m.weights(_broadcastable(m.rng, shape))], shape)
    op = str(m.rng.choice(["Sum", "Mean", "Max", "Min"]))  # variadic
    ins = [x] + [m.weights(_broadcastable(m.rng, shape)) for _ in range(int(m.rng.integers(1, 3)))]
    return m.node(op, ins, shape)


def _expand_tile(m: _Model, x: str) -> str:
    shape = m.shapes[x]
    if m.rng.random() < 0.5:
        ones = [d for d, n in enumerate(shape) if n == 1]
        if not ones:
            x = m.node("Unsqueeze", [x, m.ints([0])], (1,) + tuple(shape)) if len(shape) < 4 else x
            shape = m.shapes[x]
        new = [int(m.rng.integers(1, 4)) if n == 1 else n for n in shape]
        return m.node("Expand", [x, m.ints(new)], new)
    reps = [int(m.rng.integers(1, 3)) for _ in shape]
    return m.node("Tile", [x, m.ints(reps)], [n * r for n, r in zip(shape, reps)])


def _gather(m: _Model, x: str) -> str:
    shape = m.shapes[x]
    axis = int(m.rng.integers(0, len(shape)))
    n = shape[axis]
    if m.rng.random() < 0.3 and len(shape) >= 2:  # GatherElements with constant indices
        ishape = list(shape)
        ishape[axis] = int(m.rng.integers(1, n + 2))
        idx = m.rng.integers(-n, n, size=ishape)
        return m.node("GatherElements", [x, m.ints(idx)], ishape, axis=axis)
    ishape = [int(v) for v in m.rng.choice([1, 2, 3], size=int(m.rng.integers(0, 3)))]
    idx = m.rng.integers(-n, n, size=ishape) if ishape else np.int64(m.rng.integers(-n, n))
    out = list(shape[:axis]) + ishape + list(shape[axis + 1:])
    if len(out) == 0 or len(out) > 5:
        return _unary(m, x)
    return m.node("Gather", [x, m.ints(idx)], out, axis=axis)


def _split(m: _Model, x: str) -> str:
    shape = m.shapes[x]
    axis = int(m.rng.integers(0, len(shape)))
    n = shape[axis]
    if n < 2:
        return _transpose(m, x)
    cut = int(m.rng.integers(1, n))
    outs = [m.name("split_"), m.name("split_")]
    m.nodes.append(helper.make_node("Split", [x, m.ints([cut, n - cut])], outs, axis=axis))
    m.ops["Split"] += 1
    for o, k in zip(outs, (cut, n - cut)):
        sh = list(shape)
        sh[axis] = k
        m.shapes[o] = tuple(sh)
    return outs[int(m.rng.integers(0, 2))]


def _space(m: _Model, x: str) -> str:
    n, c, h, w = m.shapes[x]
    kind = m.rng.random()
    if kind < 0.3 and h % 2 == 0 and w % 2 == 0:
        return m.node("SpaceToDepth", [x], (n, 4 * c, h // 2, w // 2), blocksize=2)
    if kind < 0.6 and c % 4 == 0:
        return m.node("DepthToSpace", [x], (n, c // 4, 2 * h, 2 * w), blocksize=2,
                      mode=str(m.rng.choice(["DCR", "CRD"])))
    if kind < 0.8:  # nearest resize by an integer factor
        f = int(m.rng.integers(1, 3))
        return m.node("Resize", [x, "", m.const(np.array([1, 1, f, f], dtype=np.float32))], (n, c, h * f, w * f),
                      mode="nearest")
    k = int(m.rng.integers(1, 3))
    s = int(m.rng.integers(1, 3))
    out_c = int(m.rng.integers(1, 4))
    oh, ow = (h - 1) * s + k, (w - 1) * s + k
    return m.node("ConvTranspose", [x, m.weights((c, out_c, k, k), 0.5)], (n, out_c, oh, ow), kernel_shape=[k, k],
                  strides=[s, s])


def _misc(m: _Model, x: str) -> str:
    shape = m.shapes[x]
    r = len(shape)
    kind = m.rng.random()
    if kind < 0.25:
        axis = int(m.rng.integers(0, r))
        return m.node("CumSum", [x, m.ints(np.int64(axis))], shape, reverse=int(m.rng.integers(0, 2)),
                      exclusive=int(m.rng.integers(0, 2)))
    if kind < 0.45:  # ArgMax/ArgMin, back to float
        op = str(m.rng.choice(["ArgMax", "ArgMin"]))
        axis = int(m.rng.integers(0, r))
        keep = int(m.rng.integers(0, 2)) if r > 1 else 1
        out = [1 if d == axis else n for d, n in enumerate(shape)] if keep else [n for d, n in enumerate(shape) if d != axis]
        a = m.node(op, [x], out, axis=axis, keepdims=keep)
        m.shapes.pop(a)
        return m.node("Cast", [a], out, to=TensorProto.FLOAT)
    if kind < 0.6 and r >= 2:
        return m.node("Trilu", [x, m.ints(np.int64(int(m.rng.integers(-1, 2))))], shape, upper=int(m.rng.integers(0, 2)))
    if kind < 0.75:
        op = str(m.rng.choice(["Sin", "Cos", "Shrink", "ThresholdedRelu", "Hardmax"]))
        attrs = {"axis": int(m.rng.integers(-r, r))} if op == "Hardmax" else {}
        return m.node(op, [x], shape, **attrs)
    if kind < 0.9 and r >= 2:
        return m.node("LpNormalization", [x], shape, axis=int(m.rng.integers(-r, r)), p=int(m.rng.choice([1, 2])))
    if r == 2:  # a contraction with a weight: ij,jk->ik
        k = int(m.rng.integers(1, 6))
        return m.node("Einsum", [x, m.weights((shape[1], k), 0.5)], [shape[0], k], equation="ij,jk->ik")
    if r == 3:
        return m.node("Einsum", [x], [shape[0], shape[2], shape[1]], equation="bij->bji")
    return _transpose(m, x)


# -- the "templates" profile: sizes that reach every kernel template, batches, typed inputs --------

WIDE_COLUMNS = [16, 17, 31, 32, 33, 48]  # around the GEMM's 16- and 32-column panels


def _wide_conv(m: _Model, x: str, winograd: bool = False) -> str:
    """A convolution wide enough for the GEMM or Winograd templates: 3x3 with unit strides (Winograd
    takes >= 12 output columns and >= 17 channels read channels-last; ``winograd``: always such
    a one), 1x1, or strided, with output channels around the panel widths and odd remainders."""
    n, c, h, w = m.shapes[x]
    kind = 0.0 if winograd else m.rng.random()
    k, s = (3, 1) if kind < 0.5 else (1, 1) if kind < 0.8 else (3, 2)
    if min(h, w) < k:
        return _unary(m, x)
    p = k // 2 if m.rng.random() < 0.8 else 0
    out_c = int(m.rng.choice(WIDE_COLUMNS[1:] if winograd else WIDE_COLUMNS + [3, 7]))
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    inputs = [x, m.weights((out_c, c, k, k), 1 / np.sqrt(c * k * k))]
    if m.rng.random() < 0.7:
        inputs.append(m.weights((out_c,)))
    y = m.node("Conv", inputs, (n, out_c, oh, ow), kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p])
    if m.rng.random() < 0.5:  # an epilogue
        y = m.node(str(m.rng.choice(["Relu", "Sigmoid", "HardSwish"])), [y], m.shapes[y])
    return y


def _depthwise_conv(m: _Model, x: str) -> str:
    """A depthwise convolution (one channel per group, 3x3 or 5x5, stride 1 or 2) of an image fed
    channels-last, with its bias and activation: codegen/depthwise.py's row tiles."""
    n, c, h, w = m.shapes[x]
    k = int(m.rng.choice([3, 5])) if min(h, w) >= 5 else 3
    s = int(m.rng.integers(1, 3))
    p = k // 2
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    inputs = [x, m.weights((c, 1, k, k), 1 / k)]
    if m.rng.random() < 0.7:
        inputs.append(m.weights((c,)))
    y = m.node("Conv", inputs, (n, c, oh, ow), kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p], group=c)
    if m.rng.random() < 0.5:
        y = m.node(str(m.rng.choice(["Relu", "HardSwish"])), [y], m.shapes[y])
    return y


def _wide_matmul(m: _Model, x: str) -> str:
    """A product with panels of columns and remainders (16, 17, 31, 32, 33, 48 columns)."""
    shape = m.shapes[x]
    k, n = shape[-1], int(m.rng.choice(WIDE_COLUMNS))
    w = m.weights((k, n), 1 / np.sqrt(k))
    y = m.node("MatMul", [x, w], list(shape[:-1]) + [n])
    if m.rng.random() < 0.5:
        y = m.node("Add", [y, m.weights((n,))], m.shapes[y])
    return y


def _nhwc(m: _Model, x: str) -> str:
    """A layout conversion and back (NCHW -> NHWC -> NCHW): transposed tiles."""
    n, c, h, w = m.shapes[x]
    y = m.node("Transpose", [x], (n, h, w, c), perm=[0, 2, 3, 1])
    if m.rng.random() < 0.5:
        y = _unary(m, y)
    return m.node("Transpose", [y], (n, c, h, w), perm=[0, 3, 1, 2])


def _avg_pool(m: _Model, x: str) -> str:
    """An average pooling of 2x2 or 3x3 windows (window sums), padded or not."""
    n, c, h, w = m.shapes[x]
    k = int(m.rng.integers(2, 4))
    if min(h, w) < k:
        return _unary(m, x)
    s = int(m.rng.integers(1, 3))
    p = int(m.rng.integers(0, k))
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    return m.node("AveragePool", [x], (n, c, oh, ow), kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p],
                  count_include_pad=int(m.rng.integers(0, 2)))


def _typed_input(m: _Model, x: str) -> str:
    """A graph input that is not float32: a boolean mask (Where), int64 indices (Gather at run time)
    or int32 values (Cast, then arithmetic)."""
    shape = m.shapes[x]
    nm = f"in{len(m.inputs)}"
    kind = m.rng.random()
    if kind < 0.4:
        mshape = _broadcastable(m.rng, shape) or shape
        m.inputs.append(helper.make_tensor_value_info(nm, TensorProto.BOOL, list(mshape)))
        m.feeds[nm] = m.rng.random(mshape) < 0.5
        return m.node("Where", [nm, x, m.weights(_broadcastable(m.rng, shape))], shape)
    if kind < 0.7:
        axis = int(m.rng.integers(0, len(shape)))
        ishape = [int(v) for v in m.rng.integers(1, 4, size=int(m.rng.integers(1, 3)))]
        out = list(shape[:axis]) + ishape + list(shape[axis + 1:])
        if len(out) > 5:
            return _unary(m, x)
        m.inputs.append(helper.make_tensor_value_info(nm, TensorProto.INT64, ishape))
        m.feeds[nm] = m.rng.integers(0, shape[axis], size=ishape).astype(np.int64)
        return m.node("Gather", [x, nm], out, axis=axis)
    ishape = _broadcastable(m.rng, shape) or shape
    m.inputs.append(helper.make_tensor_value_info(nm, TensorProto.INT32, list(ishape)))
    m.feeds[nm] = m.rng.integers(-20, 20, size=ishape).astype(np.int32)
    i = m.node("Mul", [nm, m.const(np.int32(3), "i")], ishape)
    m.shapes.pop(i)
    f = m.node("Cast", [i], ishape, to=TensorProto.FLOAT)
    return m.node("Add", [x, m.node("Mul", [f, m.const(np.float32(0.05))], ishape)], _broadcast(shape, ishape))


# family -> (builder, rank needed (None: any), weight)
FAMILIES = {
    "unary": (_unary, None, 3), "binary": (_binary, None, 3), "reduce": (_reduce, None, 2),
    "softmax": (_softmax, None, 1), "norm": (_norm, None, 1), "transpose": (_transpose, None, 1),
    "reshape": (_reshape, None, 1), "slice": (_slice, None, 1), "concat": (_concat, None, 1),
    "pad": (_pad, None, 1), "matmul": (_matmul, None, 2), "conv": (_conv, 4, 2), "pool": (_pool, 4, 1),
    "clip_where": (_clip_where, None, 1), "expand_tile": (_expand_tile, None, 1), "gather": (_gather, None, 1),
    "split": (_split, None, 1), "space": (_space, 4, 1), "misc": (_misc, None, 1),
}
# the "templates" profile adds these to FAMILIES
WIDE_FAMILIES = {
    "wide_conv": (_wide_conv, 4, 5), "wide_matmul": (_wide_matmul, None, 2), "nhwc": (_nhwc, 4, 1),
    "avg_pool": (_avg_pool, 4, 1), "typed_input": (_typed_input, None, 2),
}
PROFILES = ("templates", "v1")  # v1: the generator before the templates profile (the old regression seeds)


def model_for(seed: int, max_ops: int = 6, profile: str = "templates"
              ) -> tuple[onnx.ModelProto, dict[str, np.ndarray], collections.Counter]:
    """A random valid model, its random feeds, and the ONNX ops it uses; all from ``seed`` and the
    generator's ``profile`` (PROFILES: "templates" reaches every kernel template with wider sizes,
    batches and typed inputs; "v1" is the generator the old regression seeds were found with)."""
    if profile not in PROFILES:
        raise ValueError(f"unknown fuzz profile {profile!r}; choose from {', '.join(PROFILES)}")
    wide = profile == "templates"
    rng = np.random.default_rng(seed)
    m = _Model(rng)
    big = rng.random() < (0.5 if wide else 0.25)  # dims around the code generator's block sizes (15/16/17, 31..33)
    dim = (lambda: int(rng.choice([15, 16, 17, 31, 33]))) if big else (lambda: int(rng.integers(1, 7)))
    if rng.random() < 0.5:  # an image-like input for conv / pool
        sizes = [12, 13, 16, 17, 20] if wide else [15, 16, 17]
        hw = (lambda: int(rng.choice(sizes))) if big or wide else (lambda: int(rng.integers(3, 9)))
        batch = int(rng.integers(1, 4)) if wide else 1
        shapes = [(batch, int(rng.integers(1, 9 if wide else 5)), hw(), hw())]
    else:
        r = int(rng.integers(2, 5))
        shapes = [tuple(dim() if k >= r - 2 else int(rng.integers(1, 4)) for k in range(r))]
    if rng.random() < 0.3:
        shapes.append(_broadcastable(rng, shapes[0]) or shapes[0])
    # an image fed channels-last, read through a transposition: convolutions may read it in place (Winograd)
    nchw = shapes[0] if wide and len(shapes[0]) == 4 and rng.random() < 0.35 else None
    if nchw is not None:
        shapes[0] = (nchw[0], nchw[2], nchw[3], nchw[1])
    for k, s in enumerate(shapes):
        nm = f"in{k}"
        m.inputs.append(helper.make_tensor_value_info(nm, TensorProto.FLOAT, list(s)))
        m.shapes[nm] = tuple(s)
    made = []
    if nchw is not None:
        x = m.node("Transpose", ["in0"], nchw, perm=[0, 3, 1, 2])
        first = rng.random()
        if first < 0.4:
            made.append(_wide_conv(m, x, winograd=True))
        elif first < 0.6:
            made.append(_depthwise_conv(m, x))
    families = {**FAMILIES, **WIDE_FAMILIES} if wide else FAMILIES
    names = list(families)
    weights = np.array([families[f][2] for f in names], dtype=float)
    steps = int(rng.integers(2, max_ops + 1))
    for _ in range(steps):
        for _try in range(10):
            fam = names[int(rng.choice(len(names), p=weights / weights.sum()))]
            fn, rank, _ = families[fam]
            x = m.pick(rank)
            if x is None or int(np.prod(m.shapes[x])) > 8192 or int(np.prod(m.shapes[x])) == 0:
                continue
            made.append(fn(m, x))
            break
    outs = [made[-1]] if made else ["in0"]
    if len(made) > 2 and rng.random() < 0.4:  # a second output from the middle of the chain
        mid = made[int(rng.integers(0, len(made) - 1))]
        if mid in m.shapes and mid not in outs:
            outs.append(mid)
    outputs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(m.shapes[o])) for o in outs]
    graph = helper.make_graph(m.nodes, f"fuzz{seed}", m.inputs, outputs, m.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    feeds = {f"in{k}": (rng.standard_normal(s) * 1.5).astype(np.float32) for k, s in enumerate(shapes)}
    return model, {**feeds, **m.feeds}, m.ops


def model_digest(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> str:
    """A digest of what a seed drew (nodes, attributes, weights, feeds), independent of how onnx
    serializes: equal digests, equal models."""
    import hashlib

    h = hashlib.sha256()
    for n in model.graph.node:
        attrs = sorted((a.name, repr(helper.get_attribute_value(a))) for a in n.attribute)
        h.update(repr((n.op_type, list(n.input), list(n.output), attrs)).encode())
    for t in model.graph.initializer:
        h.update(t.name.encode() + numpy_helper.to_array(t).tobytes())
    for k in sorted(feeds):
        h.update(k.encode() + feeds[k].tobytes())
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------------------------
# The differential check
# ---------------------------------------------------------------------------------------------

@dataclass
class Result:
    seed: int
    ops: collections.Counter
    valid: bool = True  # onnxruntime accepted the model
    failures: list[tuple[str, str]] = field(default_factory=list)  # (strategy, what)
    reason: str = ""
    reached: collections.Counter = field(default_factory=collections.Counter)  # kernels per template / trait / provider


TEMPLATE_NAMES = tuple(t.name for t in TEMPLATES)  # in the order the code generator tries them


def kernels_reached(cm) -> collections.Counter:
    """The compiled model's kernels counted by the template that wrote them ("template gemm") and
    each variant it took ("gemm: row remainder"), or by the provider that runs them."""
    out: collections.Counter = collections.Counter()
    for kern in cm.kernels:
        spec = getattr(kern, "spec", None)
        template = getattr(spec, "template", "")
        if not template:
            out[f"provider {kern.provider}"] += 1
            continue
        out[f"template {template}"] += 1
        out.update(f"{template}: {t}" for t in spec.traits)
    return out


def reference(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def mismatch(want: np.ndarray, got: np.ndarray) -> str | None:
    """None when ``got`` matches, else what differs."""
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {got.shape} != {want.shape}"
    w, g = want.astype(np.float64), got.astype(np.float64)
    if (np.isnan(w) != np.isnan(g)).any():
        return f"NaN at {int((np.isnan(w) != np.isnan(g)).sum())} element(s)"
    fin = np.isfinite(w)
    if (w[~fin & ~np.isnan(w)] != g[~fin & ~np.isnan(w)]).any():
        return "infinities differ"
    if not fin.any():
        return None
    scale = max(1.0, float(np.abs(w[fin]).max()))
    err = float(np.abs(w[fin] - g[fin]).max()) / scale
    return None if err <= TOLERANCE else f"max rel err {err:.3g}"


def compile_options(seed: int, profile: str) -> dict:
    """compile()'s keywords for ``seed`` besides the strategy: the thread count varies (schedules
    depend on it); in the templates profile three seeds in four compile to kernorch's own kernels
    only (no providers, no regions), the fourth with the default providers, and every compile is
    strict (a generated kernel that fails its check is an error, not a silent fallback)."""
    opts = {"threads": (1, 2, 3)[seed % 3]}
    if profile == "templates":
        opts["strict"] = True
        if seed % 4:
            opts.update(providers=(), regions=False)
    return opts


def check_seed(seed: int, strategies=STRATEGIES, db: str | None = None, max_ops: int = 6,
               verbose: bool = False, profile: str = "templates") -> Result:
    """Generate the model of ``seed``, compile it with each strategy, compare with onnxruntime."""
    import kernorch

    model, feeds, ops = model_for(seed, max_ops, profile)
    opts = compile_options(seed, profile)
    threads = opts["threads"]
    res = Result(seed, ops)
    try:
        onnx.checker.check_model(model, full_check=True)
        want = reference(model, feeds)
    except Exception as e:  # noqa: BLE001 - a generator bug: counted, not blamed on kernorch
        res.valid, res.reason = False, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        return res
    if verbose:
        print(onnx.printer.to_text(model.graph))
    db = db or os.path.join(tempfile.mkdtemp(prefix="kn-fuzz-"), "db.sqlite")
    for s in strategies:
        try:
            cm = kernorch.compile(model, strategy=s, cost="model", db=db, progress=False, **opts)
            res.reached.update(kernels_reached(cm))
            got = cm.run(feeds)
            for name, w in zip(cm.output_names, want):
                why = mismatch(w, got[name].numpy())
                if why:
                    res.failures.append((s, f"mismatch: output {name}: {why} ({threads} threads)"))
        except Exception as e:  # noqa: BLE001 - every exception is a finding
            what = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            if verbose:
                traceback.print_exc()
            res.failures.append((s, f"error: {what}"))
    return res


def _worker(args) -> int:
    """Check seeds from ``args.seed`` on, one JSON line per seed (after a ``BEGIN`` line), until
    killed: the parent survives a kernel that crashes the process and blames the seed in flight."""
    import json

    db = os.path.join(tempfile.mkdtemp(prefix="kn-fuzz-"), "db.sqlite")
    seed = args.seed
    for _ in range(RECYCLE):
        print(f"BEGIN {seed}", flush=True)
        res = check_seed(seed, tuple(args.strategies.split(",")), db, args.ops, args.verbose, args.profile)
        print(json.dumps({"seed": seed, "valid": res.valid, "reason": res.reason, "ops": dict(res.ops),
                          "failures": res.failures, "reached": dict(res.reached)}), flush=True)
        seed += 1
    print(f"RECYCLE {seed}", flush=True)
    return 0


def report_reached(reached: collections.Counter) -> str:
    """Kernels per template (every template must be reached), their variants and the providers."""
    lines = ["kernels per template: " + ", ".join(f"{t} {reached[f'template {t}']}" for t in TEMPLATE_NAMES)]
    for t in TEMPLATE_NAMES:
        variants = sorted((k.split(": ", 1)[1], v) for k, v in reached.items() if k.startswith(f"{t}: "))
        if variants:
            lines.append(f"  {t}: " + ", ".join(f"{name} {v}" for name, v in variants))
    providers = sorted((k.split(" ", 1)[1], v) for k, v in reached.items() if k.startswith("provider "))
    lines.append("kernels per provider: " + (", ".join(f"{p} {v}" for p, v in providers) or "none"))
    missing = [t for t in TEMPLATE_NAMES if not reached[f"template {t}"]]
    if missing:
        lines.append("templates NOT reached: " + ", ".join(missing))
    return "\n".join(lines)


def main(argv=None) -> int:
    import json
    import subprocess

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=None, help="run for this long (default: --models)")
    ap.add_argument("--models", type=int, default=20, help="number of models when --minutes is not given")
    ap.add_argument("--seed", type=int, default=0, help="first seed (model k uses seed + k)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--ops", type=int, default=6, help="most op families drawn per model")
    ap.add_argument("--profile", default="templates", choices=PROFILES,
                    help="generator: templates (default: reaches every kernel template) or v1 (the old seeds')")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)
    strategies = tuple(args.strategies.split(","))
    deadline = time.monotonic() + 60 * args.minutes if args.minutes else None
    covered: collections.Counter = collections.Counter()
    reached: collections.Counter = collections.Counter()
    generated = invalid = failed_models = mismatches = errors = crashes = 0
    t0 = time.monotonic()
    seed = args.seed
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def start(first: int):
        cmd = [sys.executable, "-X", "faulthandler", "-m", "bench.fuzz", "--worker", "--seed", str(first),
               "--strategies", ",".join(strategies), "--ops", str(args.ops), "--profile", args.profile] + (
                   ["--verbose"] if args.verbose else [])
        err = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=root)
        return proc, err

    proc, err = start(seed)
    try:
        while (time.monotonic() < deadline) if deadline else (generated < args.models):
            line = proc.stdout.readline()
            if not line:  # the worker died on the seed in flight: a crash (segfault, abort, ...)
                proc.wait()
                err.seek(0)
                tail = [ln for ln in err.read().splitlines() if ln.strip()][-12:]
                generated += 1
                crashes += 1
                failed_models += 1
                print(f"FAIL seed {seed} crash: worker exited with {proc.returncode}\n    " + "\n    ".join(tail), flush=True)
                seed += 1
                proc, err = start(seed)
                continue
            if line.startswith("RECYCLE "):  # a fresh worker: loaded libraries are never unloaded
                proc.wait()
                seed = int(line.split()[1])
                proc, err = start(seed)
                continue
            if line.startswith("BEGIN "):
                seed = int(line.split()[1])
                continue
            if not line.startswith("{"):
                if args.verbose:
                    print(line, end="")
                continue
            res = json.loads(line)
            generated += 1
            if not res["valid"]:
                invalid += 1
                if args.verbose:
                    print(f"seed {res['seed']}: generator produced an invalid model: {res['reason']}", flush=True)
                continue
            covered.update(res["ops"])
            reached.update(res.get("reached", {}))
            failed_models += bool(res["failures"])
            for s, what in res["failures"]:
                mismatches += what.startswith("mismatch")
                errors += what.startswith("error")
                print(f"FAIL seed {res['seed']} {s}: {what} (ops: {', '.join(sorted(res['ops']))})", flush=True)
    finally:
        proc.kill()
        proc.wait()
    minutes = (time.monotonic() - t0) / 60
    print(f"\nmodels generated: {generated} ({generated - invalid} valid, {invalid} invalid) in {minutes:.1f} min, "
          f"seeds {args.seed}..{seed}")
    print(f"ops covered: {len(covered)}: " + ", ".join(f"{k} {v}" for k, v in sorted(covered.items())))
    print(f"strategies: {', '.join(strategies)}; profile {args.profile}")
    print(report_reached(reached))
    print(f"mismatches: {mismatches}, errors: {errors}, crashes: {crashes}, models failing: {failed_models}")
    return 1 if (mismatches or errors or crashes) else 0


if __name__ == "__main__":
    sys.exit(main())
