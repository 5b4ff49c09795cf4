"""The primitive vocabulary: one enum of ops, a table of kinds, and typed attributes per op.

Primitives follow Korch: elementwise, reduce, broadcast, layout, linear, plus opaque (an ONNX
operator kept whole and run by a reference implementation). Every primitive has one output.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Final, Mapping, Union

from kernorch.ir.layout import IndexMap

ValueId = int


class Kind(enum.Enum):
    ELEMENTWISE = "elementwise"
    REDUCE = "reduce"
    BROADCAST = "broadcast"
    LAYOUT = "layout"
    LINEAR = "linear"
    OPAQUE = "opaque"


class Op(enum.Enum):
    # elementwise, unary
    NEG = "neg"
    ABS = "abs"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RECIP = "recip"
    TANH = "tanh"
    ERF = "erf"
    SIGMOID = "sigmoid"
    SOFTPLUS = "softplus"
    RELU = "relu"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    SIN = "sin"
    COS = "cos"
    SIGN = "sign"
    NOT = "not"
    ISNAN = "isnan"
    CAST = "cast"
    # elementwise, binary
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIV = "div"
    POW = "pow"
    MAX = "max"
    MIN = "min"
    MOD = "mod"
    EQ = "eq"
    NE = "ne"
    LT = "lt"
    LE = "le"
    GT = "gt"
    GE = "ge"
    AND = "and"
    OR = "or"
    XOR = "xor"
    # elementwise, ternary
    WHERE = "where"
    # reduce
    SUM = "sum"
    RMAX = "rmax"
    RMIN = "rmin"
    PROD = "prod"
    # broadcast
    BROADCAST = "broadcast"
    # layout
    VIEW = "view"
    CONCAT = "concat"
    GATHER = "gather"
    # linear
    MATMUL = "matmul"
    CONV = "conv"
    CONV_TRANSPOSE = "conv_transpose"
    # opaque
    OPAQUE = "opaque"


UNARY: Final = frozenset({Op.NEG, Op.ABS, Op.EXP, Op.LOG, Op.SQRT, Op.RECIP, Op.TANH, Op.ERF, Op.SIGMOID,
                          Op.SOFTPLUS, Op.RELU, Op.FLOOR, Op.CEIL, Op.ROUND, Op.SIN, Op.COS, Op.SIGN, Op.NOT,
                          Op.ISNAN, Op.CAST})
BINARY: Final = frozenset({Op.ADD, Op.SUB, Op.MUL, Op.DIV, Op.POW, Op.MAX, Op.MIN, Op.MOD, Op.EQ, Op.NE, Op.LT,
                           Op.LE, Op.GT, Op.GE, Op.AND, Op.OR, Op.XOR})
COMPARE: Final = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE, Op.ISNAN})
LOGICAL: Final = frozenset({Op.AND, Op.OR, Op.XOR, Op.NOT})
REDUCE_OPS: Final = frozenset({Op.SUM, Op.RMAX, Op.RMIN, Op.PROD})

KIND: Final[Mapping[Op, Kind]] = {
    **{op: Kind.ELEMENTWISE for op in UNARY | BINARY | {Op.WHERE}},
    **{op: Kind.REDUCE for op in REDUCE_OPS},
    Op.BROADCAST: Kind.BROADCAST,
    Op.VIEW: Kind.LAYOUT,
    Op.CONCAT: Kind.LAYOUT,
    Op.GATHER: Kind.LAYOUT,
    Op.MATMUL: Kind.LINEAR,
    Op.CONV: Kind.LINEAR,
    Op.CONV_TRANSPOSE: Kind.LINEAR,
    Op.OPAQUE: Kind.OPAQUE,
}


# -- attributes ----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class NoAttrs:
    pass


NO_ATTRS: Final = NoAttrs()


@dataclass(frozen=True, slots=True)
class CastAttrs:
    dtype: str


@dataclass(frozen=True, slots=True)
class ReduceAttrs:
    axes: tuple[int, ...]
    keepdims: bool


@dataclass(frozen=True, slots=True)
class BroadcastAttrs:
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ViewAttrs:
    map: IndexMap


@dataclass(frozen=True, slots=True)
class ConcatAttrs:
    axis: int


@dataclass(frozen=True, slots=True)
class GatherAttrs:
    """A layout prim whose index map reads runtime integer tensors (embeddings, GatherElements,
    GatherND). Inputs: ``(data, idx_0, .., idx_k-1)``. For an output index ``o`` the data index
    is ``data.index`` at ``o``, except on axis ``axes[j]``, where it is ``idx_j[indices[j](o)]``
    (``data.index`` holds a placeholder there). See Note [gather bounds] in ir/layout.py for
    negative and out-of-range indices."""

    data: IndexMap  # output index -> data index (no mask)
    axes: tuple[int, ...]  # data axes read from the index inputs, one per index input
    indices: tuple[IndexMap, ...]  # output index -> index of idx_j (no mask)


@dataclass(frozen=True, slots=True)
class ConvAttrs:
    """2-D/1-D/3-D convolution (NC + spatial). ``pads`` = begins + ends as in ONNX."""

    strides: tuple[int, ...]
    pads: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int
    output_padding: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class OpaqueAttrs:
    """An ONNX node kept whole: its serialized NodeProto, the opset, and constant inputs' bytes."""

    op_type: str
    node: bytes = field(repr=False)
    opset: int = 17


Attrs = Union[NoAttrs, CastAttrs, ReduceAttrs, BroadcastAttrs, ViewAttrs, ConcatAttrs, GatherAttrs, ConvAttrs,
              OpaqueAttrs]


@dataclass(frozen=True, slots=True)
class Prim:
    op: Op
    inputs: tuple[ValueId, ...]
    output: ValueId
    attrs: Attrs = NO_ATTRS
    origin: str = ""  # the ONNX node this prim came from (per-operator baseline, reports)

    @property
    def kind(self) -> Kind:
        return KIND[self.op]
