"""The fission registry: one rule per ONNX op type, turning an operator into primitives.

A rule receives a ``NodeContext`` (the node, a Builder whose prims carry the node's name as their
origin, the node's input values) and returns one value per node output. Rules never optimize or
fuse; they only say what the operator means in primitives.

The rule modules (fission/rules/) import this registry and register themselves; the full table is
``fission.rules.load_rules()``: importing that package is what registers every rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import onnx
from onnx import helper

from kernorch.errors import UnsupportedOpError
from kernorch.ir.graph import Builder, TensorType
from kernorch.ir.prims import ValueId

Rule = Callable[["NodeContext"], Sequence[ValueId]]
RULES: dict[str, Rule] = {}


def rule(*op_types: str) -> Callable[[Rule], Rule]:
    """Register ``fn`` as the fission rule of the given ONNX op types (default domain)."""

    def deco(fn: Rule) -> Rule:
        for t in op_types:
            RULES[t] = fn
        return fn

    return deco


@dataclass
class NodeContext:
    node: onnx.NodeProto
    b: Builder
    inputs: list[ValueId | None]          # '' (omitted optional input) -> None
    opset: int
    out_types: list[TensorType | None] = field(default_factory=list)  # from ONNX shape inference, if known

    @property
    def op_type(self) -> str:
        return self.node.op_type

    def attr(self, name: str, default=None):
        for a in self.node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def attr_str(self, name: str, default: str = "") -> str:
        v = self.attr(name, default)
        return v.decode() if isinstance(v, bytes) else v

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def x(self, i: int) -> ValueId:
        v = self.inputs[i] if i < len(self.inputs) else None
        if v is None:
            raise UnsupportedOpError(f"{self.op_type} node {self.node.name!r}: missing required input {i}")
        return v

    def const(self, i: int) -> np.ndarray | None:
        """The value of input ``i`` if it is a constant (initializer or folded), else None."""
        if not self.has_input(i):
            return None
        return self.b.g.constants.get(self.inputs[i])

    def require_const(self, i: int, what: str) -> np.ndarray:
        c = self.const(i)
        if c is None:
            raise UnsupportedOpError(f"{self.op_type} node {self.node.name!r}: {what} (input {i}) must be a constant")
        return c

    def shape(self, i: int) -> tuple[int, ...]:
        return self.b.shape(self.x(i))

    def dtype(self, i: int) -> str:
        return self.b.type(self.x(i)).dtype

    def unsupported(self, why: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"{self.op_type} node {self.node.name!r}: {why}")
