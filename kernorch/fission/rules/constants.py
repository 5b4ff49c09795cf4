"""Constant-producing operators: Constant, Shape, Size, ConstantOfShape. They fold away on import."""

import numpy as np
from onnx import numpy_helper

from kernorch.fission.registry import NodeContext, rule


@rule("Constant")
def constant(ctx: NodeContext):
    for a in ctx.node.attribute:
        if a.name == "value":
            return [ctx.b.constant(numpy_helper.to_array(a.t))]
        if a.name in ("value_float", "value_int"):
            dt = "float32" if a.name == "value_float" else "int64"
            return [ctx.b.constant(np.asarray(ctx.attr(a.name), dtype=dt))]
        if a.name in ("value_floats", "value_ints"):
            dt = "float32" if a.name == "value_floats" else "int64"
            return [ctx.b.constant(np.asarray(ctx.attr(a.name), dtype=dt))]
    raise ctx.unsupported("only value/value_float(s)/value_int(s) constants are supported")


@rule("Shape")
def shape(ctx: NodeContext):
    s = np.asarray(ctx.shape(0), dtype=np.int64)
    rank = len(s)
    start = ctx.attr("start", 0)
    end = ctx.attr("end", rank)
    return [ctx.b.constant(s[start:end])]


@rule("Size")
def size(ctx: NodeContext):
    return [ctx.b.constant(np.asarray(int(np.prod(ctx.shape(0))), dtype=np.int64))]


@rule("ConstantOfShape")
def constant_of_shape(ctx: NodeContext):
    shape = ctx.require_const(0, "shape").astype(np.int64)
    t = ctx.node.attribute[0].t if ctx.node.attribute else None
    value = numpy_helper.to_array(t).reshape(()) if t is not None else np.float32(0)
    return [ctx.b.constant(np.full(tuple(shape), value, dtype=value.dtype))]
