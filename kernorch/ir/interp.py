"""The reference interpreter: executes a primitive graph with NumPy (PyTorch for convolutions).

It is the oracle of the project: fission is checked against onnxruntime through it, and every
generated kernel is checked against it before it may be timed or chosen. Clarity beats speed here.
"""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

import ml_dtypes
import numpy as np
import scipy.special

from kernorch.ir import layout
from kernorch.ir.graph import Graph
from kernorch.ir.prims import ConvAttrs, Op, Prim


def _int_div(a, b):
    if np.issubdtype(np.result_type(a, b), np.integer):
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) ^ (b < 0), -q, q)
    return a / b


def _sign(x):
    return np.sign(x)


_UNARY: dict[Op, Callable] = {
    Op.NEG: np.negative, Op.ABS: np.abs, Op.EXP: np.exp, Op.LOG: np.log, Op.SQRT: np.sqrt,
    Op.RECIP: lambda x: np.reciprocal(x.astype(np.float32) if x.dtype.kind in "iub" else x),
    Op.TANH: np.tanh, Op.ERF: scipy.special.erf, Op.SIGMOID: scipy.special.expit,
    Op.SOFTPLUS: lambda x: np.logaddexp(np.zeros_like(x), x), Op.RELU: lambda x: np.maximum(x, np.zeros_like(x)),
    Op.FLOOR: np.floor, Op.CEIL: np.ceil, Op.ROUND: np.round, Op.SIN: np.sin, Op.COS: np.cos, Op.SIGN: _sign,
    Op.NOT: np.logical_not, Op.ISNAN: np.isnan,
}
_BINARY: dict[Op, Callable] = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIV: _int_div, Op.POW: np.power,
    Op.MAX: np.maximum, Op.MIN: np.minimum, Op.MOD: np.mod, Op.EQ: np.equal, Op.NE: np.not_equal,
    Op.LT: np.less, Op.LE: np.less_equal, Op.GT: np.greater, Op.GE: np.greater_equal,
    Op.AND: np.logical_and, Op.OR: np.logical_or, Op.XOR: np.logical_xor,
}
_MOVES = frozenset({Op.VIEW, Op.BROADCAST, Op.GATHER, Op.CONCAT, Op.CAST})  # exact on any dtype
BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_REDUCE: dict[Op, Callable] = {Op.SUM: np.sum, Op.RMAX: np.max, Op.RMIN: np.min, Op.PROD: np.prod}


def eval_prim(p: Prim, args: Sequence[np.ndarray], out_dtype: str, out_shape: tuple[int, ...]) -> np.ndarray:
    """Evaluate one prim on concrete arrays; the result has exactly the declared type."""
    op = p.op
    if op not in _MOVES and any(a.dtype == BFLOAT16 for a in args):
        # bfloat16 arithmetic: computed in float32 from the exact bf16 inputs, rounded once as the
        # result takes its declared type (below); a linear prim thus accumulates in float32
        args = [a.astype(np.float32) if a.dtype == BFLOAT16 else a for a in args]
    with np.errstate(all="ignore"):
        if op in _UNARY:
            out = _UNARY[op](args[0])
        elif op is Op.CAST:
            out = _cast(args[0], p.attrs.dtype)
        elif op in _BINARY:
            out = _BINARY[op](args[0], args[1])
        elif op is Op.WHERE:
            out = np.where(args[0], args[1], args[2])
        elif op in _REDUCE:
            out = _REDUCE[op](args[0], axis=p.attrs.axes, keepdims=p.attrs.keepdims)
        elif op is Op.BROADCAST:
            out = np.broadcast_to(args[0], p.attrs.shape)
        elif op is Op.VIEW:
            out = p.attrs.map.gather(args[0])
        elif op is Op.GATHER:
            a = p.attrs
            out = layout.gather_runtime(args[0], args[1:], a.data, a.axes, a.indices, f"gather {p.origin or 'prim'}")
        elif op is Op.CONCAT:
            out = np.concatenate(args, axis=p.attrs.axis)
        elif op is Op.MATMUL:
            out = np.matmul(args[0], args[1])
        elif op in (Op.CONV, Op.CONV_TRANSPOSE):
            out = _conv(op, args, p.attrs)
        elif op is Op.OPAQUE:
            out = eval_opaque(p, args, out_dtype)
        else:
            raise NotImplementedError(op)
    out = np.asarray(out)
    if out.dtype != np.dtype(out_dtype):
        out = out.astype(out_dtype)
    if out.shape != out_shape:
        raise AssertionError(f"{op.value} produced shape {out.shape}, declared {out_shape}")
    return out


NARROW_INTS = frozenset({"int8", "uint8", "int16", "uint16"})


def _cast(x: np.ndarray, dtype: str) -> np.ndarray:
    """Float to integer truncates toward zero; to a narrow integer (NARROW_INTS) it goes through
    int32 and wraps, a defined result where C's direct conversion of an out-of-range value is not
    (the generated kernels convert the same way, codegen/c.py)."""
    if np.dtype(dtype).kind in "iu" and x.dtype.kind == "f":
        x = np.trunc(x)
        if dtype in NARROW_INTS:
            x = x.astype(np.int32)
    return x.astype(dtype)


def _conv(op: Op, args: Sequence[np.ndarray], a: ConvAttrs) -> np.ndarray:
    import torch
    import torch.nn.functional as F

    def tensor(a):  # broadcast views are read-only; torch warns about those, so copy them
        return torch.from_numpy(np.require(a, requirements=["C", "W"]))

    x, w = (tensor(t) for t in args[:2])
    b = tensor(args[2]) if len(args) > 2 else None
    k = x.dim() - 2
    begin, end = list(a.pads[:k]), list(a.pads[k:])
    if op is Op.CONV:
        if begin != end:
            pad = []
            for s in reversed(range(k)):
                pad += [begin[s], end[s]]
            x = F.pad(x, pad)
            begin = [0] * k
        fn = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[k]
        out = fn(x, w, b, stride=a.strides, padding=begin, dilation=a.dilations, groups=a.groups)
    else:
        fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[k]
        outpad = list(a.output_padding) if a.output_padding else [0] * k
        # asymmetric pads: pad less in torch, then crop the extra at the end
        sym = [min(bb, ee) for bb, ee in zip(begin, end)]
        out = fn(x, w, b, stride=a.strides, padding=sym, output_padding=outpad, groups=a.groups, dilation=a.dilations)
        sl = [slice(None), slice(None)]
        for s in range(k):
            sl.append(slice(begin[s] - sym[s], out.shape[2 + s] - (end[s] - sym[s])))
        out = out[tuple(sl)]
    return out.numpy()


def eval_opaque(p: Prim, args: Sequence[np.ndarray], out_dtype: str | None = None) -> np.ndarray:
    """Run an ONNX node kept whole with onnx's reference evaluator (an oracle independent of the
    native runner, see ``NodeSession``); onnxruntime where the reference has no implementation."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    node = onnx.NodeProto()
    node.ParseFromString(p.attrs.node)
    types = [(a.shape, str(a.dtype)) for a in args]
    feeds = dict(zip([n for n in node.input if n], args))  # omitted optional inputs are not in args
    try:
        return ReferenceEvaluator(single_node_model(node, types, p.attrs.opset)).run(None, feeds)[0]
    except NotImplementedError:  # no reference implementation (e.g. Scatter-9): run it natively
        return NodeSession(node, types, p.attrs.opset, out_dtype).run(list(args))


def single_node_model(node, in_types: Sequence[tuple[tuple[int, ...], str]], opset: int,
                      out_dtype: str | None = None):
    """A model holding ``node`` alone, its (non-omitted) inputs typed by ``in_types`` (and its
    first output by ``out_dtype``: onnxruntime wants typed outputs)."""
    import onnx
    from onnx import helper

    typed = dict(zip([i for i in node.input if i], in_types))  # a name read twice is one input
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape)
           for n, (shape, dt) in typed.items()]
    out_t = helper.np_dtype_to_tensor_dtype(np.dtype(out_dtype)) if out_dtype else onnx.TensorProto.UNDEFINED
    outs = [helper.make_tensor_value_info(n, out_t if k == 0 else onnx.TensorProto.UNDEFINED, None)
            for k, n in enumerate(node.output) if n]
    graph = helper.make_graph([node], "opaque", ins, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


class NodeSession:
    """One ONNX node run natively: an onnxruntime session over a single-node model, built once.
    This is how opaque prims execute in compiled models (not the Python reference)."""

    def __init__(self, node, in_types: Sequence[tuple[tuple[int, ...], str]], opset: int, out_dtype: str | None,
                 threads: int | None = None) -> None:
        import onnxruntime as ort

        model = single_node_model(node, in_types, opset, out_dtype)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        if threads:
            opts.intra_op_num_threads = threads
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # no busy pool between kernels
        self.session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        self.names = [i for i in node.input if i]

    def run(self, args: Sequence[np.ndarray]) -> np.ndarray:
        """``args`` in the node's (non-omitted) input order, as the prim lists them."""
        return self.session.run(None, {n: np.ascontiguousarray(a) for n, a in zip(self.names, args)})[0]


def run(g: Graph, feeds: Mapping[int, np.ndarray] | Sequence[np.ndarray], keep: bool = False) -> dict[int, np.ndarray]:
    """Execute ``g``. ``feeds`` maps input value ids to arrays (or lists them in input order).
    Returns the graph outputs (every value when ``keep``)."""
    if not isinstance(feeds, Mapping):
        feeds = dict(zip(g.inputs, feeds))
    env: dict[int, np.ndarray] = dict(g.constants)
    for v in g.inputs:
        arr = np.asarray(feeds[v])
        t = g.types[v]
        if arr.shape != t.shape:
            raise ValueError(f"input {g.name(v)}: shape {arr.shape}, expected {t.shape}")
        env[v] = arr.astype(t.dtype, copy=False)
    last_use: dict[int, int] = {}
    for i, p in enumerate(g.prims):
        for v in p.inputs:
            last_use[v] = i
    outs = set(g.outputs)
    for i, p in enumerate(g.prims):
        t = g.types[p.output]
        env[p.output] = eval_prim(p, [env[v] for v in p.inputs], t.dtype, t.shape)
        if not keep:
            for v in set(p.inputs):
                if last_use.get(v) == i and v not in outs and v not in g.constants:
                    del env[v]
    if keep:
        return env
    return {v: env[v] for v in g.outputs}
