"""Elementwise operators: one prim each, or a short chain for activations.

Binary operators broadcast NumPy-style (the Builder inserts broadcast prims); scalar constants
stay scalars so kernels read them as immediates.
"""

import numpy as np

from kernorch.fission.registry import NodeContext, rule
from kernorch.ir.prims import Op

_UNARY = {"Neg": Op.NEG, "Abs": Op.ABS, "Exp": Op.EXP, "Log": Op.LOG, "Sqrt": Op.SQRT, "Reciprocal": Op.RECIP,
          "Tanh": Op.TANH, "Erf": Op.ERF, "Sigmoid": Op.SIGMOID, "Softplus": Op.SOFTPLUS, "Relu": Op.RELU,
          "Floor": Op.FLOOR, "Ceil": Op.CEIL, "Round": Op.ROUND, "Sin": Op.SIN, "Cos": Op.COS, "Sign": Op.SIGN,
          "Not": Op.NOT, "IsNaN": Op.ISNAN}
_BINARY = {"Add": Op.ADD, "Sub": Op.SUB, "Mul": Op.MUL, "Div": Op.DIV, "Pow": Op.POW, "Equal": Op.EQ,
           "Less": Op.LT, "LessOrEqual": Op.LE, "Greater": Op.GT, "GreaterOrEqual": Op.GE, "And": Op.AND,
           "Or": Op.OR, "Xor": Op.XOR}


def scalar_like(ctx: NodeContext, value: float, like: int) -> int:
    """A rank-0 constant of ``like``'s dtype."""
    return ctx.b.scalar(value, ctx.b.type(like).dtype)


def param(ctx: NodeContext, i: int, shape, dtype: str) -> int:
    """Input ``i`` reshaped to ``shape`` and cast to ``dtype``: a new constant when the input is
    one (so no view of a constant reaches a kernel), else a cast and a view."""
    c = ctx.const(i)
    if c is not None:
        return ctx.b.constant(c.astype(dtype).reshape(shape))
    return ctx.b.reshape(ctx.b.cast(ctx.x(i), dtype), shape)


@rule(*_UNARY)
def unary(ctx: NodeContext):
    return [ctx.b.unary(_UNARY[ctx.op_type], ctx.x(0))]


@rule(*_BINARY)
def binary(ctx: NodeContext):
    a, b = ctx.x(0), ctx.x(1)
    if ctx.op_type == "Pow" and ctx.dtype(1) != ctx.dtype(0):
        b = ctx.b.cast(b, ctx.dtype(0))
    return [ctx.b.binary(_BINARY[ctx.op_type], a, b)]


@rule("Identity", "Dropout")
def identity(ctx: NodeContext):
    if ctx.op_type == "Dropout" and ctx.has_input(2):
        mode = ctx.const(2)
        if mode is None or bool(mode):  # a runtime training_mode would silently be ignored otherwise
            raise ctx.unsupported("training-mode Dropout (random masks) is not supported")
    outs = [ctx.x(0)]
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        outs.append(ctx.b.constant(np.ones(ctx.shape(0), dtype=bool)))
    return outs


@rule("Cast")
def cast(ctx: NodeContext):
    import onnx

    dtype = onnx.helper.tensor_dtype_to_np_dtype(ctx.attr("to")).name
    return [ctx.b.cast(ctx.x(0), dtype)]


@rule("CastLike")
def cast_like(ctx: NodeContext):
    """Input 1 only gives the dtype: a constant input 0 folds even when input 1 is computed at
    run time (expanded functions cast their constants like a data input)."""
    c = ctx.const(0)
    if c is not None and c.size <= 1 << 16:
        x = np.asarray(c)
        return [ctx.b.constant(np.trunc(x).astype(ctx.dtype(1)) if x.dtype.kind == "f" and
                               np.dtype(ctx.dtype(1)).kind in "iu" else x.astype(ctx.dtype(1)))]
    return [ctx.b.cast(ctx.x(0), ctx.dtype(1))]


_VARIADIC = {"Sum": Op.ADD, "Max": Op.MAX, "Min": Op.MIN, "Mean": Op.ADD}


@rule(*_VARIADIC)
def variadic(ctx: NodeContext):
    """Left fold with NumPy broadcasting; Mean is the sum times the scalar 1/n."""
    xs = [v for v in ctx.inputs if v is not None]
    if not xs:
        raise ctx.unsupported("needs at least one input")
    acc = xs[0]
    for v in xs[1:]:
        acc = ctx.b.binary(_VARIADIC[ctx.op_type], acc, v)
    if ctx.op_type == "Mean" and len(xs) > 1:
        acc = ctx.b.binary(Op.MUL, acc, scalar_like(ctx, 1.0 / len(xs), acc))
    return [acc]


@rule("Where")
def where(ctx: NodeContext):
    return [ctx.b.where(ctx.x(0), ctx.x(1), ctx.x(2))]


@rule("Mod")
def mod(ctx: NodeContext):
    """fmod=0: the result takes the divisor's sign (Python %); fmod=1: the dividend's (C fmod),
    computed exactly as sign(a) * (|a| mod |b|)."""
    a, b = ctx.x(0), ctx.x(1)
    if not ctx.attr("fmod", 0):
        return [ctx.b.binary(Op.MOD, a, b)]
    r = ctx.b.binary(Op.MOD, ctx.b.unary(Op.ABS, a), ctx.b.unary(Op.ABS, b))
    return [ctx.b.binary(Op.MUL, ctx.b.unary(Op.SIGN, a), r)]


@rule("IsInf")
def is_inf(ctx: NodeContext):
    b, x = ctx.b, ctx.x(0)
    pos, neg = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    if np.dtype(ctx.dtype(0)).kind != "f" or not (pos or neg):
        return [b.constant(np.zeros(ctx.shape(0), dtype=bool))]
    if pos and neg:
        return [b.binary(Op.EQ, b.unary(Op.ABS, x), scalar_like(ctx, np.inf, x))]
    return [b.binary(Op.EQ, x, scalar_like(ctx, np.inf if pos else -np.inf, x))]


def _exp_pair(ctx: NodeContext, x: int) -> tuple[int, int]:
    b = ctx.b
    return b.unary(Op.EXP, x), b.unary(Op.EXP, b.unary(Op.NEG, x))


@rule("Sinh", "Cosh")
def sinh_cosh(ctx: NodeContext):
    """(exp(x) -/+ exp(-x)) / 2 (absolute, not relative, accuracy near 0 for Sinh)."""
    b, x = ctx.b, ctx.x(0)
    ep, en = _exp_pair(ctx, x)
    s = b.binary(Op.SUB if ctx.op_type == "Sinh" else Op.ADD, ep, en)
    return [b.binary(Op.MUL, s, scalar_like(ctx, 0.5, x))]


@rule("Tan")
def tan(ctx: NodeContext):
    x = ctx.x(0)
    return [ctx.b.binary(Op.DIV, ctx.b.unary(Op.SIN, x), ctx.b.unary(Op.COS, x))]


@rule("Asinh", "Acosh")
def asinh_acosh(ctx: NodeContext):
    """Asinh = sign(x) log(|x| + sqrt(x^2 + 1)) (odd, no cancellation for x << 0);
    Acosh = log(x + sqrt(x^2 - 1))."""
    b, x = ctx.b, ctx.x(0)
    asinh = ctx.op_type == "Asinh"
    a = b.unary(Op.ABS, x) if asinh else x
    r = b.unary(Op.SQRT, b.binary(Op.ADD if asinh else Op.SUB, b.binary(Op.MUL, x, x), scalar_like(ctx, 1.0, x)))
    y = b.unary(Op.LOG, b.binary(Op.ADD, a, r))
    return [b.binary(Op.MUL, b.unary(Op.SIGN, x), y) if asinh else y]


@rule("Atanh")
def atanh(ctx: NodeContext):
    """0.5 log((1 + x) / (1 - x))."""
    b, x = ctx.b, ctx.x(0)
    one = scalar_like(ctx, 1.0, x)
    q = b.binary(Op.DIV, b.binary(Op.ADD, one, x), b.binary(Op.SUB, one, x))
    return [b.binary(Op.MUL, b.unary(Op.LOG, q), scalar_like(ctx, 0.5, x))]
