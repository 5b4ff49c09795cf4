"""Note [clamps before a narrowing cast]: QuantizeLinear's tail ``cast(min(max(x, 0), 255))``
written without NaN propagation.

A float max or min propagates NaN, as NumPy's and the interpreter's do, so the C generator
writes ``((a > b) | (a != a)) ? a : b``: a compare, an or and a blend per vector where
``a > b ? a : b`` is one ``vmaxps``: work on every element a requantizing kernel (every int8
kernel) writes, comparable to the products of a short 1x1 convolution on VNNI tiles. It makes
no difference where the chain ends in a cast to a
narrow integer: a NaN that reaches that cast becomes 0 (through int32, interp._cast), and a
plain first clamp turns the NaN into its bound, which the rest of the chain carries to the
cast. So a chain of max/min by constants read only by the next link and ending in such a cast
is written plainly when its value on a NaN, computed that way, truncates to 0 — which holds
for uint8's (0, 255) clamp as QuantizeLinear orders it (max first), not for min first, and for
int8's (-128, 127) in neither order.
"""

from __future__ import annotations

import math
from collections import Counter

from kernorch.codegen.kernel import Accum, Let, Store, statements
from kernorch.ir.interp import NARROW_INTS


def plain_clamps(body: tuple) -> dict[str, tuple[str, str]]:
    """The max/min Lets of a kernel body that may be written without NaN propagation: name ->
    (the operand that may be NaN, the bound), in the order ``x > b ? x : b`` takes them."""
    lets: dict[str, Let] = {}
    uses: Counter[str] = Counter()
    for s in statements(body):
        if isinstance(s, Let):
            lets[s.name] = s
            uses.update(s.args)
        elif isinstance(s, (Store, Accum)):
            uses[s.value] += 1
    plain: dict[str, tuple[str, str]] = {}
    for c in lets.values():
        if c.op != "cast" or c.dtype not in NARROW_INTS or not c.args:
            continue
        chain, v = [], c.args[0]
        while v in lets and lets[v].op in ("max", "min") and uses[v] == 1 and lets[v].dtype.startswith("float"):
            bound = _bound(lets[v], lets)
            if bound is None:
                break
            operand = next((a for a in lets[v].args if a != bound[0]), None)
            if operand is None:
                break
            chain.insert(0, (lets[v], operand, bound))
            v = operand
        if chain and _nan_goes_to_zero([(op.op, b) for op, _, (_, b) in chain]):
            plain.update({op.name: (x, b) for op, x, (b, _) in chain})
    return plain


def _bound(s: Let, lets: dict[str, Let]) -> tuple[str, float] | None:
    """(name, value) of the max/min's immediate operand (not NaN), else None."""
    for a in s.args:
        b = lets.get(a)
        if b is not None and b.op == "imm" and not math.isnan(float(b.attr)):
            return a, float(b.attr)
    return None


def _nan_goes_to_zero(chain: list[tuple[str, float]]) -> bool:
    """A NaN through the plainly written chain (its first link yields its bound) truncates to 0."""
    v = chain[0][1]
    for op, b in chain[1:]:
        v = max(v, b) if op == "max" else min(v, b)
    return -1.0 < v < 1.0
