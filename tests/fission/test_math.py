"""Math rules (variadic Sum/Max/Min/Mean, Where, Mod, comparisons, CastLike) against onnxruntime."""

import numpy as np
import pytest

from onnx_oracle import check

RNG = np.random.default_rng(11)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


SHAPES = [
    [(3, 4)],
    [(3, 4), (3, 4)],
    [(2, 3, 4), (4,), (3, 1)],
    [(1, 4), (3, 1), (2, 1, 1), ()],
]


@pytest.mark.parametrize("op", ["Sum", "Max", "Min", "Mean"])
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_variadic(op, shapes):
    check(op, {f"x{k}": f32(*s) for k, s in enumerate(shapes)})


@pytest.mark.parametrize("op,dtype", [("Sum", "float64"), ("Max", "int32"), ("Max", "int64"),
                                      ("Max", "float64"), ("Min", "int32"), ("Min", "uint8"), ("Min", "float64")])
def test_variadic_dtypes(op, dtype):
    ins = {f"x{k}": (f32(2, 3) * 100).astype(dtype) for k in range(3)}
    out = check(op, ins)
    assert out[0].dtype == np.dtype(dtype)


def test_max_with_constant_scalar_operand():
    check("Max", {"x": f32(2, 3), "c": np.asarray(0.25, np.float32)}, consts=["c"])


@pytest.mark.parametrize("shapes", [[(3, 4)] * 3, [(3, 1), (4,), (2, 1, 1)], [(), (3, 4), ()]], ids=str)
def test_where(shapes):
    c = RNG.random(shapes[0]) > 0.5
    check("Where", {"c": np.asarray(c), "a": f32(*shapes[1]), "b": f32(*shapes[2])})


def test_where_int():
    c = np.asarray(RNG.random((3, 4)) > 0.5)
    check("Where", {"c": c, "a": np.arange(12, dtype=np.int64).reshape(3, 4), "b": np.asarray(-1, np.int64)},
          consts=["b"])


@pytest.mark.parametrize("dtype", ["int32", "int64", "int8", "uint8"])
@pytest.mark.parametrize("fmod", [0, 1])
def test_mod_integers(dtype, fmod):
    lo = 0 if dtype.startswith("u") else -50
    a = RNG.integers(lo, 50, (4, 6)).astype(dtype)
    b = RNG.integers(1, 9, (6,)).astype(dtype)
    if lo < 0:
        b = b * np.where(RNG.random(6) > 0.5, 1, -1).astype(dtype)
    check("Mod", {"a": a, "b": b}, fmod=fmod)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mod_float_fmod(dtype):
    a = (RNG.standard_normal((4, 6)) * 10).astype(dtype)
    b = (RNG.uniform(0.5, 3, (4, 6)) * np.where(RNG.random((4, 6)) > 0.5, 1, -1)).astype(dtype)
    check("Mod", {"a": a, "b": b}, fmod=1)


@pytest.mark.parametrize("op", ["Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal"])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_compare_broadcast(op, dtype):
    a = RNG.integers(-3, 3, (2, 3, 4)).astype(dtype)
    b = RNG.integers(-3, 3, (3, 1)).astype(dtype)
    check(op, {"a": a, "b": b})


@pytest.mark.parametrize("src,dst", [("float32", "float16"), ("float32", "int32"), ("int64", "float32"),
                                     ("float16", "float64"), ("float32", "bool")])
def test_castlike(src, dst):
    x = (f32(3, 4) * 5).astype(src)
    out = check("CastLike", {"x": x, "like": np.zeros((1,), dst)}, consts=["like"])
    assert out[0].dtype == np.dtype(dst)


@pytest.mark.parametrize("attrs", [{}, {"detect_negative": 0}, {"detect_positive": 0},
                                   {"detect_positive": 0, "detect_negative": 0}])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_isinf(attrs, dtype):
    x = np.asarray([-np.inf, -1.0, 0.0, np.nan, 2.0, np.inf], dtype).reshape(2, 3)
    check("IsInf", {"x": x}, opset=20, **attrs)


@pytest.mark.parametrize("op,lo,hi", [("Sinh", -5, 5), ("Cosh", -5, 5), ("Tan", -1.4, 1.4), ("Asinh", -50, 50),
                                      ("Acosh", 1, 50), ("Atanh", -0.99, 0.99)])
def test_hyperbolic_and_tan(op, lo, hi):
    check(op, {"x": RNG.uniform(lo, hi, (4, 25)).astype(np.float32)})
