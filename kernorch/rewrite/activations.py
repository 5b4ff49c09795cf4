"""Cheaper forms of activations, equal to the original up to rounding.

Mish's gate, tanh(softplus(x)), costs three transcendental functions per element (exp, log1p,
tanh): on CSPDarknet that made its Mish kernels compute-bound (about 5 cycles per element per
core). With t = exp(x), tanh(log(1 + t)) = ((1 + t)^2 - 1) / ((1 + t)^2 + 1) = n / (n + 2) where
n = t (t + 2): one exp and a division. x is clamped at MISH_CLAMP first so that n stays finite;
past it the gate is 1 to within 2e^-40 (below float64's epsilon). A NaN stays NaN (MIN propagates
it). float16 is left alone (exp(MISH_CLAMP) overflows it).
"""

from __future__ import annotations

from kernorch.ir.prims import Op, Prim
from kernorch.rewrite.driver import Ctx, Replacement

MISH_CLAMP = 20.0


def tanh_softplus(p: Prim, ctx: Ctx) -> Replacement | None:
    """``tanh(softplus(x))`` -> ``n / (n + 2)`` with ``t = exp(min(x, 20))``, ``n = t * (t + 2)``."""
    if p.op is not Op.TANH:
        return None
    q = ctx.producer(p.inputs[0])
    if q is None or q.op is not Op.SOFTPLUS:
        return None
    x = q.inputs[0]
    dtype = ctx.type(x).dtype
    if dtype not in ("float32", "float64"):
        return None
    b = ctx.builder()
    t = b.unary(Op.EXP, b.binary(Op.MIN, x, b.scalar(MISH_CLAMP, dtype)))
    n = b.binary(Op.MUL, t, b.binary(Op.ADD, t, b.scalar(2.0, dtype)))
    return ctx.replace(b, b.binary(Op.DIV, n, b.binary(Op.ADD, n, b.scalar(2.0, dtype))))
