"""Kernel classes that must each be generated as ONE fused C kernel (one parallel loop over a
shared outer domain) and match the reference interpreter on random inputs."""

import math

import numpy as np
import pytest

from cg_util import (affine, build_cases, check, gelu_erf, gelu_tanh, layer_norm, log_softmax, mean, normalize,
                     softmax, window_reduce)
from kernorch.ir import layout
from kernorch.ir.prims import Op

CASES = {}
GROUPS = {}  # name -> expected number of parallel groups (1 = fully fused)


def case(groups=1):
    def deco(fn):
        CASES[fn.__name__] = fn
        GROUPS[fn.__name__] = groups
        return fn
    return deco


@case()
def softmax_last(b):
    return softmax(b, b.input((64, 1000)), -1)


@case()
def softmax_middle(b):
    return softmax(b, b.input((4, 33, 20)), 1)


@case()
def softmax_odd_rows(b):
    return softmax(b, b.input((1, 1023)), -1)


@case()
def softmax_width_one(b):
    return softmax(b, b.input((7, 1)), -1)


@case()
def log_softmax_last(b):
    return log_softmax(b, b.input((16, 257)), -1)


@case()
def layernorm(b):
    return layer_norm(b, b.input((3, 7, 768)))


@case()
def layernorm_odd(b):
    return layer_norm(b, b.input((7, 1023)))


@case()
def rmsnorm(b):
    x = b.input((5, 300))
    ms = mean(b, b.binary(Op.MUL, x, x), [-1])
    r = b.unary(Op.RECIP, b.unary(Op.SQRT, b.binary(Op.ADD, ms, b.scalar(1e-6))))
    return b.binary(Op.MUL, b.binary(Op.MUL, x, r), b.constant(np.linspace(0.5, 1.5, 300, dtype=np.float32)))


@case()
def instance_norm(b):
    return affine(b, normalize(b, b.input((2, 6, 9, 11)), [2, 3]), (6, 1, 1))


@case()
def group_norm(b):
    n, c, h, w, grp = 2, 12, 5, 7, 3
    x = b.input((n, c, h, w))
    y = normalize(b, b.reshape(x, (n, grp, c // grp * h * w)), [2])
    return affine(b, b.reshape(y, (n, c, h, w)), (c, 1, 1))


@case()
def attention_softmax(b):
    s = b.input((2, 3, 17, 17))
    mask = b.input((1, 1, 17, 17))
    return softmax(b, b.binary(Op.ADD, b.binary(Op.MUL, s, b.scalar(0.125)), mask), -1)


@case()
def gelu_erf_chain(b):
    return gelu_erf(b, b.input((3, 1001)))


@case()
def gelu_tanh_chain(b):
    return gelu_tanh(b, b.input((3, 1001)))


@case()
def silu(b):
    x = b.input((2, 7, 7, 33))
    return b.binary(Op.MUL, x, b.unary(Op.SIGMOID, x))


@case()
def mish(b):
    x = b.input((1023,))
    return b.binary(Op.MUL, x, b.unary(Op.TANH, b.unary(Op.SOFTPLUS, x)))


@case()
def hardswish_chain(b):
    x = b.input((4, 5, 6))
    t = b.binary(Op.MIN, b.binary(Op.MAX, b.binary(Op.ADD, x, b.scalar(3.0)), b.scalar(0.0)), b.scalar(6.0))
    y = b.binary(Op.DIV, b.binary(Op.MUL, x, t), b.scalar(6.0))
    return b.unary(Op.RELU, b.binary(Op.SUB, y, b.scalar(0.1)))


@case()
def residual_layernorm(b):
    x, r = b.input((6, 768)), b.input((6, 768))
    s = b.binary(Op.ADD, x, r)
    return [s, layer_norm(b, s)]


@case()
def transpose_elementwise(b):
    x = b.input((5, 6, 7))
    return b.unary(Op.RELU, b.binary(Op.ADD, b.permute(x, (2, 0, 1)), b.scalar(0.5)))


@case()
def transpose_2d(b):
    return b.binary(Op.MUL, b.permute(b.input((70, 130)), (1, 0)), b.scalar(2.0))


@case()
def reshape_elementwise(b):
    x = b.input((2, 3, 4, 5))
    y = b.input((6, 20))
    return b.binary(Op.ADD, b.reshape(x, (6, 20)), b.unary(Op.EXP, y))


@case()
def pad_constant_elementwise(b):
    x = b.input((2, 3, 5, 6))
    p = b.view(x, layout.pad((2, 3, 5, 6), (0, 0, 1, 2), (0, 0, 2, 1), "constant", -1.5))
    return b.unary(Op.TANH, p)


@case()
def pad_reflect_elementwise(b):
    x = b.input((2, 3, 5, 6))
    p = b.view(x, layout.pad((2, 3, 5, 6), (0, 0, 2, 2), (0, 0, 2, 2), "reflect"))
    return b.binary(Op.MUL, p, p)


@case()
def concat_branches(b):
    x, y = b.input((2, 3, 4)), b.input((2, 5, 4))
    c = b.concat([b.unary(Op.RELU, x), b.unary(Op.SIGMOID, y), b.binary(Op.ADD, x, b.scalar(1.0))], axis=1)
    return b.binary(Op.MUL, c, b.scalar(2.0))


@case()
def concat_last_axis(b):
    x, y = b.input((3, 5)), b.input((3, 2))
    return b.unary(Op.NEG, b.concat([x, y], axis=1))


@case()
def max_pool(b):
    return window_reduce(b, b.input((2, 3, 9, 9)), Op.RMAX, 3, 2, 1, -math.inf)


@case()
def avg_pool_relu(b):
    s = window_reduce(b, b.input((2, 3, 8, 8)), Op.SUM, 2, 2, 0, 0.0)
    return b.unary(Op.RELU, b.binary(Op.MUL, s, b.scalar(0.25)))


@case()
def nearest_resize_x2(b):
    x = b.input((2, 3, 4, 5))
    from kernorch.ir import index as ix
    shape = (2, 3, 8, 10)
    idx = [ix.var(0), ix.var(1), ix.floordiv(ix.var(2), 2, shape), ix.floordiv(ix.var(3), 2, shape)]
    up = b.view(x, layout.make(shape, (2, 3, 4, 5), idx))
    return b.unary(Op.RELU, up)


@case()
def nearest_resize_table(b):
    x = b.input((2, 3, 7))
    up = b.view(x, layout.take((2, 3, 7), 2, np.array([0, 0, 1, 2, 2, 3, 4, 4, 5, 6])))
    return b.binary(Op.ADD, up, b.scalar(1.0))


@case()
def bilinear_resize(b):
    x = b.input((1, 2, 4, 6))
    oh, ow = 7, 9
    y = x
    for axis, (n, o) in ((2, (4, oh)), (3, (6, ow))):
        pos = np.clip((np.arange(o) + 0.5) * n / o - 0.5, 0, n - 1)
        i0 = np.floor(pos).astype(np.int64)
        i1 = np.minimum(i0 + 1, n - 1)
        w1 = (pos - i0).astype(np.float32)
        shp = [1, 1, 1, 1]
        shp[axis] = o
        a = b.view(y, layout.take(b.shape(y), axis, i0))
        c = b.view(y, layout.take(b.shape(y), axis, i1))
        w = b.constant(w1.reshape(shp))
        y = b.binary(Op.ADD, a, b.binary(Op.MUL, b.binary(Op.SUB, c, a), w))
    return b.unary(Op.RELU, y)


@case()
def bias_relu(b):
    x = b.input((2, 16, 5, 5))
    bias = b.constant(np.arange(16, dtype=np.float32).reshape(16, 1, 1) / 8 - 1)
    return b.unary(Op.RELU, b.binary(Op.ADD, x, bias))


@case()
def reduce_axis0(b):
    return b.reduce(Op.SUM, b.input((33, 8, 70)), [0], keepdims=False)


@case()
def reduce_middle_max(b):
    return b.reduce(Op.RMAX, b.input((4, 9, 40)), [1])


@case()
def reduce_batchnorm_stats(b):
    x = b.input((4, 6, 50))
    return mean(b, x, [0, 2])


@case()
def reduce_all(b):
    return b.reduce(Op.SUM, b.input((3, 37)), [0, 1], keepdims=False)


@case()
def multi_output_stats(b):
    x = b.input((8, 100))
    y = b.unary(Op.RELU, x)
    return [y, b.reduce(Op.SUM, y, [1]), b.reduce(Op.RMAX, y, [1], keepdims=False)]


@case()
def softmax_through_permute(b):
    x = b.input((3, 20, 6))
    return softmax(b, b.permute(x, (0, 2, 1)), -1)


@case()
def single_element(b):
    x = b.input((1,))
    return b.unary(Op.EXP, x)


@case(groups=2)
def column_stats_then_rows(b):
    # reduce over axis 0, then a row-wise use: no shared outer domain, two groups in one kernel
    x = b.input((40, 64))
    m = b.reduce(Op.RMAX, x, [0])
    y = b.binary(Op.SUB, x, m)
    return softmax(b, y, -1)


@case(groups=2)
def heavy_value_broadcast_into_reduction(b):
    # exp(w) would be recomputed for every row: stored once (its own group), then reused
    x, w = b.input((512, 256)), b.input((1, 256))
    return b.reduce(Op.SUM, b.binary(Op.MUL, x, b.unary(Op.EXP, w)), [1])


# -- degenerate shapes and dtypes -------------------------------------------------------------

@case(groups=None)
def scalar_chain(b):
    x = b.input(())
    return b.unary(Op.EXP, b.binary(Op.MUL, x, x))


@case(groups=None)
def reduce_to_scalar_and_use(b):
    x = b.input((5, 7))
    s = b.reduce(Op.SUM, x, [0, 1], keepdims=False)
    return [s, b.binary(Op.MUL, x, s)]


@case(groups=None)
def pure_view_copy(b):
    return b.permute(b.input((4, 6)), (1, 0))


@case(groups=None)
def output_feeds_output(b):
    y = b.unary(Op.RELU, b.input((4, 6)))
    return [y, b.binary(Op.ADD, y, b.permute(b.permute(y, (1, 0)), (1, 0)))]


@case(groups=None)
def bool_output(b):
    return b.binary(Op.GT, b.input((4, 6)), b.scalar(0.0))


@case(groups=None)
def int_reduce(b):
    return b.reduce(Op.SUM, b.input((4, 6), "int64"), [1])


@case(groups=None)
def size1_dims(b):
    return b.reduce(Op.RMAX, b.input((1, 5, 1, 3)), [1])


@case(groups=None)
def tensor_const_size1(b):
    return b.binary(Op.MUL, b.input((3, 4)), b.constant(np.array([[2.0]], np.float32)))


@case(groups=None)
def reduce_keepdims_false_mid(b):
    return b.reduce(Op.SUM, b.unary(Op.EXP, b.input((3, 4, 5))), [1], keepdims=False)


@case(groups=None)
def output_is_reduce_used_later(b):
    x = b.input((6, 8))
    m = b.reduce(Op.RMAX, x, [1])
    return [m, b.binary(Op.SUB, x, m)]


BUILT = {}


@pytest.fixture(scope="module")
def built():
    if not BUILT:
        BUILT.update(build_cases(CASES))
    return BUILT


@pytest.mark.parametrize("name", list(CASES))
def test_matches_interpreter(name, built):
    g, members, outputs, kernel = built[name]
    check(kernel, g, outputs, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_fused_structure(name, built):
    kernel = built[name][3]
    if GROUPS[name] is not None:
        assert len(kernel.spec.body) == GROUPS[name], kernel.spec.notes
