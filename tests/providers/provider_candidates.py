"""Candidate kernels the provider tests share: each builder returns (graph, members, outputs),
with the candidate embedded in a slightly larger graph so boundaries are real."""

import numpy as np

from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op

RNG = np.random.default_rng(7)


def _w(*shape):
    return RNG.standard_normal(shape).astype(np.float32) * 0.2


def conv_bias_relu():
    b = Builder()
    x = b.input((1, 8, 12, 12))
    pre = b.unary(Op.NEG, x)  # outside the kernel: the kernel's input is a computed value
    y = b.conv(pre, b.constant(_w(16, 8, 3, 3)), b.constant(_w(16)), ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1))
    r = b.unary(Op.RELU, y)
    b.g.outputs = [r]
    return b.g, [y, r], [r]


def conv_then_bias_add():
    """A bias-less conv whose bias arrives as a broadcast add (what a folded BatchNorm leaves)."""
    b = Builder()
    x = b.input((1, 4, 10, 10))
    y = b.conv(x, b.constant(_w(6, 4, 3, 3)), None, ConvAttrs((2, 2), (1, 1, 1, 1), (1, 1), 1))
    z = b.binary(Op.ADD, y, b.constant(_w(1, 6, 1, 1)))
    s = b.unary(Op.SIGMOID, z)
    m = b.binary(Op.MUL, z, s)
    b.g.outputs = [m]
    return b.g, [p.output for p in b.g.prims], [m]


def matmul_add():
    b = Builder()
    a = b.input((8, 32))
    y = b.matmul(a, b.constant(_w(32, 24)))
    z = b.binary(Op.ADD, y, b.constant(_w(24)))
    b.g.outputs = [z]
    return b.g, [p.output for p in b.g.prims], [z]


def batched_matmul_add_two_outputs():
    b = Builder()
    a = b.input((2, 5, 16))
    y = b.matmul(a, b.input((16, 12)))
    z = b.binary(Op.ADD, y, b.input((2, 5, 12)))
    t = b.unary(Op.TANH, z)
    b.g.outputs = [z, t]
    return b.g, [p.output for p in b.g.prims], [z, t]


def softmax():
    b = Builder()
    x = b.input((4, 10, 33))
    m = b.reduce(Op.RMAX, x, [2])
    e = b.unary(Op.EXP, b.binary(Op.SUB, x, m))
    o = b.binary(Op.DIV, e, b.reduce(Op.SUM, e, [2]))
    b.g.outputs = [o]
    return b.g, [p.output for p in b.g.prims], [o]


def layer_norm():
    b = Builder()
    x = b.input((2, 16, 32))
    n = b.scalar(1.0 / 32)
    mean = b.binary(Op.MUL, b.reduce(Op.SUM, x, [2]), n)
    d = b.binary(Op.SUB, x, mean)
    var = b.binary(Op.MUL, b.reduce(Op.SUM, b.binary(Op.MUL, d, d), [2]), n)
    rstd = b.unary(Op.RECIP, b.unary(Op.SQRT, b.binary(Op.ADD, var, b.scalar(1e-5))))
    y = b.binary(Op.ADD, b.binary(Op.MUL, b.binary(Op.MUL, d, rstd), b.constant(_w(32) + 1)), b.constant(_w(32)))
    b.g.outputs = [y]
    return b.g, [p.output for p in b.g.prims], [y]


def transpose_add():
    b = Builder()
    x, y = b.input((2, 8, 16)), b.input((2, 16, 8))
    t = b.permute(x, (0, 2, 1))
    z = b.binary(Op.ADD, t, y)
    b.g.outputs = [z]
    return b.g, [t, z], [z]


def pad_conv():
    b = Builder()
    x = b.input((1, 4, 9, 9))
    p = b.view(x, layout.pad((1, 4, 9, 9), (0, 0, 1, 2), (0, 0, 1, 0), "constant", 0.0))
    y = b.conv(p, b.constant(_w(8, 4, 3, 3)), b.constant(_w(8)), ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1))
    b.g.outputs = [y]
    return b.g, [p, y], [y]


def reflect_pad_depthwise_conv():
    b = Builder()
    x = b.input((1, 6, 8, 8))
    p = b.view(x, layout.pad((1, 6, 8, 8), (0, 0, 1, 1), (0, 0, 1, 1), "reflect"))
    y = b.conv(p, b.constant(_w(6, 1, 3, 3)), b.constant(_w(6)), ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 6))
    r = b.binary(Op.MIN, b.unary(Op.RELU, y), b.scalar(6.0))
    b.g.outputs = [r]
    return b.g, [p.output for p in b.g.prims], [r]


def pointwise_conv_clamp():
    """A 1x1 convolution of one image, then a clamp: a GEMM on NCHW for the eager variant."""
    b = Builder()
    x = b.input((1, 12, 5, 6))
    y = b.conv(x, b.constant(_w(7, 12, 1, 1)), b.constant(_w(7)), ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1))
    r = b.binary(Op.MIN, b.unary(Op.RELU, y), b.scalar(6.0))
    b.g.outputs = [r]
    return b.g, [p.output for p in b.g.prims], [r]


LINEAR = {"conv_bias_relu": conv_bias_relu, "conv_then_bias_add": conv_then_bias_add, "matmul_add": matmul_add,
          "batched_matmul_add_two_outputs": batched_matmul_add_two_outputs, "pad_conv": pad_conv,
          "reflect_pad_depthwise_conv": reflect_pad_depthwise_conv, "pointwise_conv_clamp": pointwise_conv_clamp}
OTHER = {"softmax": softmax, "layer_norm": layer_norm, "transpose_add": transpose_add}
ALL = {**LINEAR, **OTHER}
