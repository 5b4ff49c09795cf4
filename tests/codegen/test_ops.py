"""Every elementwise and reduce op, per dtype, against the interpreter -- including NaN, +-inf,
signed zeros and integer corner cases (division by zero) -- all built by one compiler call."""

import numpy as np
import pytest

from cg_util import THREADS, check, finish
from kernorch import codegen
from kernorch.codegen import c as cprint
from kernorch.ir.graph import Builder
from kernorch.ir.prims import BINARY, KIND, UNARY, Kind, Op

SHAPE = (3, 37)
FLOAT_UNARY = sorted(UNARY - {Op.NOT, Op.CAST}, key=lambda o: o.value)
INT_UNARY = [Op.NEG, Op.ABS, Op.RELU, Op.SIGN, Op.FLOOR, Op.EXP, Op.ISNAN]  # sqrt/recip: NaN->int is undefined
FLOAT_BINARY = sorted(BINARY - {Op.AND, Op.OR, Op.XOR}, key=lambda o: o.value)
INT_BINARY = [Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.MOD, Op.MAX, Op.MIN, Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE]


SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -2.5, 1.5]


def special(dtype: str, seed: int) -> np.ndarray:
    """Random values of ``dtype`` and, for floats, the special values: input 0 (seed 0) holds each
    eight times in a row and input 1 the eight in turn, so a binary op meets every pair of them
    (NaN against a number, not only against NaN)."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(SHAPE) < 0.5
    if dtype.startswith("int"):
        x = rng.integers(-9, 10, SHAPE).astype(dtype)
        x.flat[:3] = 0
        return x
    x = (rng.standard_normal(SHAPE) * 3).astype(dtype)
    x.flat[:64] = np.repeat(SPECIALS, 8) if seed == 0 else np.tile(SPECIALS, 8)
    return x


CASES = {}


def _unary(op, dtype):
    b = Builder()
    return finish(b, b.unary(op, b.input(SHAPE, dtype)))


def _binary(op, dtype):
    b = Builder()
    return finish(b, b.binary(op, b.input(SHAPE, dtype), b.input(SHAPE, dtype)))


for dt in ("float32", "float64"):
    for op in FLOAT_UNARY:
        CASES[f"{op.value}_{dt}"] = (lambda op=op, dt=dt: _unary(op, dt))
    for op in FLOAT_BINARY:
        CASES[f"{op.value}_{dt}"] = (lambda op=op, dt=dt: _binary(op, dt))
for dt in ("int32", "int64"):
    for op in INT_UNARY:
        CASES[f"{op.value}_{dt}"] = (lambda op=op, dt=dt: _unary(op, dt))
    for op in INT_BINARY:
        CASES[f"{op.value}_{dt}"] = (lambda op=op, dt=dt: _binary(op, dt))
for op in (Op.AND, Op.OR, Op.XOR, Op.ADD, Op.MUL, Op.MAX, Op.EQ, Op.LT):
    CASES[f"{op.value}_bool"] = (lambda op=op: _binary(op, "bool"))
CASES["not_bool"] = lambda: _unary(Op.NOT, "bool")


def _cast(src, dst):
    b = Builder()
    return finish(b, b.cast(b.input(SHAPE, src), dst))


CASTS = [("float32", "int32"), ("float32", "bool"), ("bool", "float32"), ("int64", "float32"), ("float32", "float64"),
         ("float64", "float32"), ("int32", "int64"), ("int64", "bool"), ("int64", "int8")]
for src, dst in CASTS:
    CASES[f"cast_{src}_{dst}"] = (lambda s=src, d=dst: _cast(s, d))


def _where(dtype):
    b = Builder()
    c, x, y = b.input(SHAPE, "bool"), b.input(SHAPE, dtype), b.input(SHAPE, dtype)
    return finish(b, b.where(c, x, y))


CASES["where_float32"] = lambda: _where("float32")
CASES["where_int64"] = lambda: _where("int64")


def _pow_int():
    b = Builder()
    x = b.input(SHAPE, "int64")
    return finish(b, b.binary(Op.POW, x, b.scalar(3, "int64")))


def _mixed_scalar():
    b = Builder()
    x = b.input(SHAPE, "float32")
    return finish(b, b.binary(Op.MUL, x, b.constant(np.float64(1 / 3))))


CASES["pow_int64_scalar"] = _pow_int
CASES["mul_float32_by_float64_scalar"] = _mixed_scalar


def _reduce(op, dtype, axes):
    b = Builder()
    return finish(b, b.reduce(op, b.input(SHAPE, dtype), axes, keepdims=False))


for op in (Op.SUM, Op.PROD, Op.RMAX, Op.RMIN):
    for dt in ("float32", "float64", "int64"):
        for axes in ([1], [0]):
            CASES[f"{op.value}_{dt}_axis{axes[0]}"] = (lambda op=op, dt=dt, axes=axes: _reduce(op, dt, axes))
    CASES[f"{op.value}_bool"] = (lambda op=op: _reduce(op, "bool", [1]))

BUILT = {}


@pytest.fixture(scope="module")
def built():
    if not BUILT:
        items = {name: fn() for name, fn in CASES.items()}
        kernels = codegen.build_many(list(items.values()), num_threads=THREADS)
        BUILT.update({name: (*items[name], k) for name, k in zip(items, kernels)})
    return BUILT


@pytest.mark.parametrize("name", list(CASES))
def test_op_matches_interpreter(name, built):
    g, _, outputs, kernel = built[name]
    fed = [special(g.types[v].dtype, seed) for seed, v in enumerate(g.inputs)]
    if name.startswith("prod"):
        fed = [np.where(np.isinf(f), 1.5, f) if f.dtype.kind == "f" else f if f.dtype == bool else np.clip(f, -2, 2)
               for f in fed]
    if name.startswith("cast_float32_int"):
        fed = [np.nan_to_num(f, posinf=7, neginf=-7) for f in fed]
    check(kernel, g, outputs, fed=fed, rtol=1e-5, atol=1e-6)


def test_every_elementwise_op_has_a_c_template():
    special_ops = {Op.CAST, Op.WHERE}
    for op, kind in KIND.items():
        if kind is not Kind.ELEMENTWISE or op in special_ops:
            continue
        assert op.value in cprint.FLOAT_EXPR or op.value in cprint.ANY_EXPR, op
    for op in INT_UNARY + INT_BINARY:
        if op.value not in cprint.ANY_EXPR and op not in (Op.FLOOR, Op.EXP, Op.ISNAN):
            assert op.value in cprint.INT_EXPR, op


@pytest.mark.parametrize("op, exact, bound", [(Op.SIGMOID, "scipy.special.expit", 2e-7),
                                              (Op.ERF, "scipy.special.erf", 4e-7), (Op.TANH, "np.tanh", 4e-7)])
def test_float_math_functions_are_accurate_over_their_whole_range(op, exact, bound):
    """In float kernels sigmoid, tanh and erf are rational functions of x, clamped (c.py kn_sigmoidf, ...), not
    libm's: checked densely through the clamps' edges, the tails and tiny magnitudes against float64 (scipy),
    beyond the few random values the table above feeds them."""
    import scipy.special

    b = Builder()
    edges = [np.linspace(e - 0.01, e + 0.01, 1001) for e in (-18, -9, -4, 4, 9, 18)]
    x = np.concatenate([np.linspace(-40, 40, 200_003), *edges,
                        [1e-30, -1e-30, 1e-7, -1e-7, 88.0, -88.0, 1e30, -1e30]]).astype(np.float32)
    (kernel,) = codegen.build_many([finish(b, b.unary(op, b.input(x.shape, "float32")))], num_threads=THREADS)
    got = kernel.run([x])[0].numpy().astype(np.float64)
    want = {"scipy.special.expit": scipy.special.expit, "scipy.special.erf": scipy.special.erf,
            "np.tanh": np.tanh}[exact](x.astype(np.float64))
    err = np.abs(got - want)
    assert err.max() < bound, (float(err.max()), float(x[err.argmax()]))
    if op != Op.SIGMOID:  # odd: tiny values keep their relative precision (erf(x) ~ 1.13 x, tanh(x) ~ x)
        tiny = np.abs(x) < 1e-6
        np.testing.assert_allclose(got[tiny], want[tiny], rtol=bound)
