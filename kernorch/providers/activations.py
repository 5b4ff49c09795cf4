"""Recognise an activation function in a chain of elementwise prims, by what it computes.

Fission splits HardSwish into ``mul add max min mul``, GELU into ``div erf add mul mul`` (or the
tanh form, exported op by op), SiLU into ``sigmoid mul``; each exporter and each rewrite may
order and scale the pieces differently. Rather than one pattern per spelling, the chain that
alone reads a linear prim's output is evaluated by the reference interpreter on probe values
and compared with each activation oneDNN can apply as a post-op: the chain is that activation
when they agree everywhere on the probe (dense from -12 to 12, then out to +-1e30). The match is
exact up to float32 rounding, and the fused kernel is still verified against the interpreter
before it is timed, like every kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kernorch.ir.interp import eval_prim
from kernorch.ir.prims import KIND, Kind, Op, Prim, ValueId

MAX_CHAIN = 16  # prims; the tanh-form GELU is 9
_PROBE = np.concatenate([np.linspace(-12.0, 12.0, 4801), [-1e4, -100.0, -1e-3, 1e-3, 100.0, 1e4],
                         [-1e30, -1e10, -1e6, 1e6, 1e10, 1e30]]).astype(np.float32)
_TOLERANCE = 2e-6  # relative to max(1, |reference|); GELU's tanh form differs from erf's by ~1e-3


@dataclass(frozen=True)
class Activation:
    """An activation found after a value: oneDNN's post-op attribute (name, scalars, algorithm),
    the prims it replaces in order, and a label for the kernel's notes."""

    name: str
    scalars: tuple[float, ...]
    algorithm: str
    prims: tuple[Prim, ...]

    @property
    def attr(self) -> tuple[str, list[float], str]:
        return self.name, list(self.scalars), self.algorithm

    @property
    def label(self) -> str:
        return self.name if not self.algorithm or self.algorithm == "none" else f"{self.name}({self.algorithm})"


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))


# name, algorithm, the function on float64 (scalars are found from the chain's values)
_FIXED = [
    ("relu", "", lambda x: np.maximum(x, 0.0)),
    ("sigmoid", "", _sigmoid),
    ("tanh", "", np.tanh),
    ("hardswish", "", lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)),
    ("hardsigmoid", "", lambda x: np.clip(x / 6.0 + 0.5, 0.0, 1.0)),
    ("swish", "", lambda x: x * _sigmoid(x)),
    ("gelu", "none", lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))),
    ("gelu", "tanh", lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))),
]


def identify(f: np.ndarray) -> tuple[str, tuple[float, ...], str] | None:
    """The oneDNN activation whose values on ``_PROBE`` are ``f`` (the chain's), or None."""
    if f.shape != _PROBE.shape or not np.all(np.isfinite(f)):
        return None
    x = _PROBE.astype(np.float64)
    f = f.astype(np.float64)

    def agrees(ref: np.ndarray) -> bool:
        return bool(np.all(np.abs(f - ref) <= _TOLERANCE * np.maximum(1.0, np.abs(ref))))

    for name, algorithm, fn in _FIXED:
        if agrees(fn(x)):
            return name, (), algorithm
    lo, hi = float(f[_PROBE == -1e4][0]), float(f[_PROBE == 1e4][0])
    saturated = lo == float(f[_PROBE == -100.0][0]) and hi == float(f[_PROBE == 100.0][0])  # bounded both ways
    if lo < hi and saturated and agrees(np.clip(x, lo, hi)):
        return "hardtanh", (lo, hi), ""
    slope = float(-f[_PROBE == -100.0][0] / 100.0)
    if 0.0 < slope < 1.0 and agrees(np.where(x >= 0.0, x, slope * x)):
        return "leaky_relu", (slope,), ""
    return None


def activation_after(b, v: ValueId) -> Activation | None:
    """The longest chain of elementwise prims of kernel builder ``b`` (torch_exec._Builder) that
    reads ``v`` and scalar constants only, alone reads ``v`` and its own values, ends in one value
    of ``v``'s type, and computes an activation oneDNN fuses; None when there is none."""
    t = b.sub.types[v]
    if t.dtype != "float32" or v in b.outputs or not b.uses.get(v):
        return None
    constants = {**b.g.constants, **b.sub.constants}
    scalar = {c for c in constants if np.ndim(constants[c]) == 0}
    chain: list[Prim] = []
    inside = {v}
    best = None
    for p in b.sub.prims:
        if len(chain) >= MAX_CHAIN:
            break
        if KIND[p.op] is not Kind.ELEMENTWISE or p.op is Op.CAST or not any(i in inside for i in p.inputs):
            continue
        if not all(i in inside or i in scalar for i in p.inputs) or b.sub.types[p.output].shape != t.shape:
            break  # the chain reads something else: it cannot grow past here
        chain.append(p)
        inside.add(p.output)
        if _closed(b, inside, p.output) and b.sub.types[p.output] == t:
            found = identify(_evaluate(chain, v, constants, b.sub.types))
            if found is not None:
                best = Activation(found[0], found[1], found[2], tuple(chain))
    return best


def _closed(b, inside: set[ValueId], last: ValueId) -> bool:
    """Only ``last`` of the chain's values is read outside the chain (or is a kernel output)."""
    for u in inside:
        if u == last:
            continue
        if u in b.outputs or any(q.output not in inside for q in b.uses.get(u, [])):
            return False
    return True


def _evaluate(chain: list[Prim], v: ValueId, constants: dict, types) -> np.ndarray:
    vals = {v: _PROBE}
    for p in chain:
        args = [vals[i] if i in vals else np.asarray(constants[i]) for i in p.inputs]
        vals[p.output] = eval_prim(p, args, types[p.output].dtype, _PROBE.shape)
    return vals[chain[-1].output]
