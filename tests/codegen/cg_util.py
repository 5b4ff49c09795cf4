"""Shared helpers for code generator tests: graph builders for the kernel classes, random feeds,
and comparison against the reference interpreter (the oracle)."""

from __future__ import annotations

import math

import numpy as np

from kernorch import codegen
from kernorch.ir import interp, layout
from kernorch.ir.graph import Builder, Graph
from kernorch.ir.prims import Op

THREADS = 2  # schedules depend on the thread count: pin it so structure tests hold on any machine


def finish(b: Builder, *outputs: int) -> tuple[Graph, set[int], list[int]]:
    """The whole graph as one candidate kernel writing ``outputs``."""
    b.g.outputs = list(outputs)
    return b.g, {p.output for p in b.g.prims}, list(outputs)


def feeds(g: Graph, seed: int = 0, positive: bool = False) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for v in g.inputs:
        t = g.types[v]
        if t.dtype == "bool":
            out.append(rng.random(t.shape) < 0.5)
        elif t.dtype.startswith("int") or t.dtype.startswith("uint"):
            out.append(rng.integers(-20 if t.dtype.startswith("int") else 0, 20, t.shape).astype(t.dtype))
        else:
            x = rng.standard_normal(t.shape) * 2
            out.append((np.abs(x) + 0.1 if positive else x).astype(t.dtype))
    return out


def inputs_for(kernel, g: Graph, fed: list[np.ndarray]) -> list[np.ndarray]:
    env = dict(zip(g.inputs, fed))
    env.update(g.constants)
    return [env[v] for v in kernel.inputs]


def check(kernel, g: Graph, outputs: list[int], seed: int = 0, rtol: float = 1e-5, atol: float = 1e-5,
          positive: bool = False, fed: list[np.ndarray] | None = None) -> None:
    fed = feeds(g, seed, positive) if fed is None else fed
    g.outputs = list(outputs)
    ref = interp.run(g, fed)
    got = kernel.run(inputs_for(kernel, g, fed))
    assert list(kernel.outputs) == list(outputs)
    for v, t in zip(outputs, got):
        r = ref[v]
        assert t.shape == r.shape, (t.shape, r.shape)
        a = t.numpy()
        if r.dtype.kind == "f":
            np.testing.assert_allclose(a, r, rtol=rtol, atol=atol, equal_nan=True)
        else:
            np.testing.assert_array_equal(a, r)


# -- builders for the kernel classes ---------------------------------------------------------

def softmax(b: Builder, x: int, axis: int) -> int:
    m = b.reduce(Op.RMAX, x, [axis])
    e = b.unary(Op.EXP, b.binary(Op.SUB, x, m))
    return b.binary(Op.DIV, e, b.reduce(Op.SUM, e, [axis]))


def log_softmax(b: Builder, x: int, axis: int) -> int:
    d = b.binary(Op.SUB, x, b.reduce(Op.RMAX, x, [axis]))
    lse = b.unary(Op.LOG, b.reduce(Op.SUM, b.unary(Op.EXP, d), [axis]))
    return b.binary(Op.SUB, d, lse)


def mean(b: Builder, x: int, axes) -> int:
    n = math.prod(b.shape(x)[a] for a in axes)
    return b.binary(Op.MUL, b.reduce(Op.SUM, x, axes), b.scalar(1.0 / n, b.type(x).dtype))


def normalize(b: Builder, x: int, axes, eps: float = 1e-5) -> int:
    d = b.binary(Op.SUB, x, mean(b, x, axes))
    var = mean(b, b.binary(Op.MUL, d, d), axes)
    rstd = b.unary(Op.RECIP, b.unary(Op.SQRT, b.binary(Op.ADD, var, b.scalar(eps))))
    return b.binary(Op.MUL, d, rstd)


def affine(b: Builder, x: int, shape, seed: int = 1) -> int:
    rng = np.random.default_rng(seed)
    w = b.constant(rng.standard_normal(shape).astype(np.float32))
    c = b.constant(rng.standard_normal(shape).astype(np.float32))
    return b.binary(Op.ADD, b.binary(Op.MUL, x, w), c)


def layer_norm(b: Builder, x: int) -> int:
    return affine(b, normalize(b, x, [-1]), (b.shape(x)[-1],))


def gelu_erf(b: Builder, x: int) -> int:
    s = b.unary(Op.ERF, b.binary(Op.MUL, x, b.scalar(1 / math.sqrt(2))))
    return b.binary(Op.MUL, b.binary(Op.MUL, x, b.scalar(0.5)), b.binary(Op.ADD, s, b.scalar(1.0)))


def gelu_tanh(b: Builder, x: int) -> int:
    x3 = b.binary(Op.POW, x, b.scalar(3.0))
    inner = b.binary(Op.MUL, b.binary(Op.ADD, x, b.binary(Op.MUL, x3, b.scalar(0.044715))),
                     b.scalar(math.sqrt(2 / math.pi)))
    return b.binary(Op.MUL, b.binary(Op.MUL, x, b.scalar(0.5)),
                    b.binary(Op.ADD, b.unary(Op.TANH, inner), b.scalar(1.0)))


def window_reduce(b: Builder, x: int, op: Op, k: int, s: int, p: int, pad_value: float) -> int:
    n, c, h, w = b.shape(x)
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    v = b.view(x, layout.window((n, c, h, w), (k, k), (s, s), (p, p), (1, 1), (oh, ow), pad_value))
    return b.reduce(op, v, [4, 5], keepdims=False)


def one_kernel(case):
    """Build (graph, members, outputs) from a builder function ``case(b) -> outputs``."""
    b = Builder()
    outs = case(b)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    return finish(b, *outs)


def build_cases(cases: dict) -> dict:
    """name -> (graph, members, outputs, kernel), all C kernels built by one compiler call."""
    items = {name: one_kernel(fn) for name, fn in cases.items()}
    for name, (g, m, o) in items.items():
        assert codegen.can_generate(g, m, o), (name, codegen.why_not(g, m, o))
    kernels = codegen.build_many(list(items.values()), num_threads=THREADS)
    return {name: (*items[name], k) for name, k in zip(items, kernels)}
