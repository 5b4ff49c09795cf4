"""Random graphs of elementwise, reduce, broadcast and layout prims, cut into random convex
candidate kernels (contiguous ranges of the topological order), each built and checked against
the interpreter -- what the orchestrator will throw at the generator, in small."""

import os

import numpy as np
import pytest

from cg_util import THREADS
from kernorch import codegen
from kernorch.ir import interp, layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op

UNARY = [Op.NEG, Op.ABS, Op.TANH, Op.SIGMOID, Op.RELU, Op.SIN, Op.ERF, Op.EXP]
BINARY = [Op.ADD, Op.SUB, Op.MUL, Op.MAX, Op.MIN]
REDUCE = [Op.SUM, Op.RMAX, Op.RMIN]
MAX_DIM = int(os.environ.get("KERNORCH_FUZZ_DIM", 6))  # env knobs: local stress runs only
N_GRAPHS = int(os.environ.get("KERNORCH_FUZZ_GRAPHS", 40))


def _step(b: Builder, rng, vals: list[int]) -> int:
    x = vals[rng.integers(len(vals))]
    shape = b.shape(x)
    kind = rng.choice(["unary", "binary", "binary", "reduce", "permute", "reshape", "pad", "slice", "concat", "bcast"])
    if kind == "unary":
        y = b.unary(UNARY[rng.integers(len(UNARY))], x)
        return b.unary(Op.TANH, y) if b.g.prims[-1].op is Op.EXP else y
    if kind == "binary":
        same = [v for v in vals if b.shape(v) == shape]
        other = same[rng.integers(len(same))] if rng.random() < 0.7 else b.scalar(float(rng.normal()))
        return b.binary(BINARY[rng.integers(len(BINARY))], x, other)
    if kind == "reduce" and len(shape) > 1:
        axes = sorted(rng.choice(len(shape), size=rng.integers(1, len(shape)), replace=False).tolist())
        r = b.reduce(REDUCE[rng.integers(len(REDUCE))], x, axes, keepdims=True)
        return b.binary(Op.SUB, x, r) if rng.random() < 0.6 else r
    if kind == "permute" and len(shape) > 1:
        return b.permute(x, rng.permutation(len(shape)).tolist())
    if kind == "reshape":
        if len(shape) > 1 and rng.random() < 0.5:
            d = rng.integers(len(shape) - 1)
            return b.reshape(x, shape[:d] + (shape[d] * shape[d + 1],) + shape[d + 2:])
        d = rng.integers(len(shape))
        f = [k for k in range(2, shape[d]) if shape[d] % k == 0]
        if f:
            k = f[rng.integers(len(f))]
            return b.reshape(x, shape[:d] + (k, shape[d] // k) + shape[d + 1:])
    if kind == "pad":
        d = rng.integers(len(shape))
        lo, hi = [0] * len(shape), [0] * len(shape)
        mode = "reflect" if shape[d] > 2 and rng.random() < 0.5 else "constant"
        lo[d], hi[d] = int(rng.integers(0, 2)), int(rng.integers(1, 3)) if mode == "constant" else 1
        return b.view(x, layout.pad(shape, lo, hi, mode, float(rng.normal())))
    if kind == "slice" and max(shape) > 2:
        d = int(np.argmax(shape))
        n = shape[d]
        starts, steps, out = [0] * len(shape), [1] * len(shape), list(shape)
        starts[d], steps[d] = (n - 1, -2) if rng.random() < 0.5 else (1, 2)
        out[d] = len(range(starts[d], -1 if steps[d] < 0 else n, steps[d]))
        return b.view(x, layout.slice_(shape, starts, steps, out))
    if kind == "concat":
        d = rng.integers(len(shape))
        return b.concat([x, b.unary(Op.SIN, x)], axis=int(d))
    if kind == "bcast" and len(shape) < 4:
        return b.binary(Op.ADD, b.reshape(x, (1,) + shape), b.input((int(rng.integers(1, 4)),) + shape))
    return b.unary(Op.COS, x)


def _graph(seed: int):
    rng = np.random.default_rng(seed)
    b = Builder()
    shape = tuple(int(s) for s in rng.integers(1, MAX_DIM + 1, size=rng.integers(1, 4)))
    vals = [b.input(shape)]
    for _ in range(rng.integers(3, 10)):
        vals.append(_step(b, rng, vals))
    g = b.g
    g.outputs = [vals[-1]] + ([vals[len(vals) // 2]] if rng.random() < 0.5 and vals[len(vals) // 2] != vals[-1] else [])
    feeds = [rng.standard_normal(g.types[v].shape).astype(np.float32) for v in g.inputs]
    ids = [p.output for p in g.prims]
    i, j = sorted(rng.choice(len(ids) + 1, size=2, replace=False).tolist())
    kernels = [set(ids)]
    if j - i >= 2:
        kernels.append(set(ids[i:j]))
    return g, feeds, kernels


CASES = []
for seed in range(N_GRAPHS):
    g, feeds, kernels = _graph(seed)
    for members in kernels:
        outs = g.boundary(members)[1] or [max(members)]
        CASES.append((seed, g, feeds, members, outs))

BUILT = {}


@pytest.fixture(scope="module")
def built():
    if not BUILT:
        ok = [c for c in CASES if codegen.can_generate(c[1], c[3], c[4])]
        assert len(ok) == len(CASES), [codegen.why_not(c[1], c[3], c[4]) for c in CASES if c not in ok]
        kernels = codegen.build_many([(g, m, o) for _, g, _, m, o in CASES], num_threads=THREADS)
        BUILT.update({k: kern for k, kern in enumerate(kernels)})
    return BUILT


@pytest.mark.parametrize("k", range(len(CASES)))
def test_random_kernel_matches_interpreter(k, built):
    seed, g, feeds, members, outs = CASES[k]
    env = interp.run(g, feeds, keep=True)
    kernel = built[k]
    got = kernel.run([env[v] for v in kernel.inputs])
    for v, t in zip(outs, got):
        np.testing.assert_allclose(t.numpy(), env[v], rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")
