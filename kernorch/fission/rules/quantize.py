"""Linear quantization (QuantizeLinear / DequantizeLinear, the QDQ format of onnxruntime's
quantizer) as elementwise prims, so the orchestration places and fuses them like any other work.

    QuantizeLinear   y = saturate(round_half_even(x / scale) + zero_point)   -> int8 / uint8
    DequantizeLinear y = (x - zero_point) * scale                           -> scale's dtype

A per-tensor scale stays a scalar (an immediate in a kernel); a per-axis one is reshaped to
broadcast along ``axis``. Constant weights fold to float constants in the rewrite pass. Other
variants (float8, int4 / int2, blocked scales) run whole, as opaque ops (reported as such).
"""

from __future__ import annotations

import numpy as np

from kernorch.fission.registry import NodeContext, rule
from kernorch.fission.rules.elementwise import param
from kernorch.ir.prims import Op

# Integer types a quantized tensor may have (float8 / int4 / blocked quantization are refused).
QUANTIZED = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535)}


class _KeepWhole(Exception):
    """A variant without prims (float8, int4, blocked scales): the node runs whole (opaque)."""


def _whole(ctx: NodeContext) -> list[int]:
    """The node kept whole, run by the reference implementation like any op without a rule."""
    out = ctx.out_types[0] if ctx.out_types else None
    if out is None:
        raise ctx.unsupported("this variant has no fission rule and ONNX infers no output type to run it whole")
    return [ctx.b.opaque(ctx.op_type, [v for v in ctx.inputs if v is not None], out, ctx.node.SerializeToString(),
                         ctx.opset)]


def _quant_params(ctx: NodeContext, x_rank: int) -> tuple[tuple[int, ...], bool]:
    """The shape scale and zero point broadcast to (``()`` per tensor, else ``n`` along ``axis``),
    and whether there is a zero point (input 2)."""
    if ctx.attr("block_size", 0) or len(ctx.shape(1)) > 1:
        raise _KeepWhole  # blocked quantization
    n = int(np.prod(ctx.shape(1)))
    if n == 1:
        return (), ctx.has_input(2)
    axis = ctx.attr("axis", 1)
    axis = axis + x_rank if axis < 0 else axis
    if not 0 <= axis < x_rank or ctx.shape(0)[axis] != n:
        raise ctx.unsupported(f"a scale of {n} elements does not match axis {ctx.attr('axis', 1)} of {ctx.shape(0)}")
    return tuple(n if d == axis else 1 for d in range(x_rank)), ctx.has_input(2)


def _operand(ctx: NodeContext, i: int, shape: tuple[int, ...], dtype: str) -> int:
    """Input ``i`` as a ``dtype`` value broadcastable against X: a scalar when it has one element."""
    c = ctx.const(i)
    if c is not None and c.size == 1:
        return ctx.b.scalar(c.reshape(()).astype(dtype), dtype)
    return param(ctx, i, shape, dtype)


@rule("QuantizeLinear", "DequantizeLinear")
def quantize_dequantize(ctx: NodeContext):
    try:
        return (_quantize if ctx.op_type == "QuantizeLinear" else _dequantize)(ctx)
    except _KeepWhole:
        return _whole(ctx)


def _quantize(ctx: NodeContext):
    b, x = ctx.b, ctx.x(0)
    ftype = ctx.dtype(0)
    out = ctx.dtype(2) if ctx.has_input(2) else _output_dtype(ctx)
    if out not in QUANTIZED or ftype not in ("float32", "float16", "bfloat16"):
        raise _KeepWhole
    shape, has_zp = _quant_params(ctx, len(ctx.shape(0)))
    q = b.unary(Op.ROUND, b.binary(Op.DIV, x, _operand(ctx, 1, shape, ftype)))
    if has_zp:
        q = b.binary(Op.ADD, q, _operand(ctx, 2, shape, ftype))
    lo, hi = QUANTIZED[out]
    q = b.binary(Op.MIN, b.binary(Op.MAX, q, b.scalar(lo, ftype)), b.scalar(hi, ftype))
    return [b.cast(q, out)]


def _output_dtype(ctx: NodeContext) -> str:
    """Opset 21's ``output_dtype`` attribute, else uint8 (the default without a zero point)."""
    import onnx

    code = ctx.attr("output_dtype", 0)
    return onnx.helper.tensor_dtype_to_np_dtype(code).name if code else "uint8"


def _dequantize(ctx: NodeContext):
    b, x = ctx.b, ctx.x(0)
    if ctx.dtype(0) not in (*QUANTIZED, "int32"):
        raise _KeepWhole
    ftype = ctx.dtype(1)
    shape, has_zp = _quant_params(ctx, len(ctx.shape(0)))
    y = b.cast(x, ftype)
    if has_zp:
        y = b.binary(Op.SUB, y, _operand(ctx, 2, shape, ftype))
    return [b.binary(Op.MUL, y, _operand(ctx, 1, shape, ftype))]
