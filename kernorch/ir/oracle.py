"""The oracle's rules, one copy for every stage: the random data a check runs on, and when a result
counts as equal to the reference interpreter's.

Fission (``kernorch check`` against onnxruntime), rewrites (``rewrite.check``), kernel providers,
the measurer and the CUDA measurer all call these functions, so a kernel is judged by the same rule
wherever it is checked.

Random data, per dtype (seeded, deterministic): constants get their real data; floats are standard
normal; booleans are fair coin flips; integers are small and never zero (signed in [-4, 3],
unsigned in [1, 3]), so integer division and modulo stay defined and an index into any axis of at
least 4 elements is valid; a value read as a gather index (``index_limits``) stays inside the
gathered axis: [-n, n) clipped to [-4, 4).

Equality: same shape; integers and booleans exactly, except in a kernel that quantizes (rounds
floats to integers, QuantizeLinear) where float32 rounding may put a value on the other side of a
rounding boundary (``QUANTIZED_SHARE``); floats (ml_dtypes' bfloat16 arrays too): NaN
exactly where the reference has NaN, each infinity exactly where the reference has it (with its
sign), and otherwise ``max |got - ref| <= rel(dtype) * max(1, max |finite ref|)`` with ``rel``
from ``REL_TOL``, one value per dtype:

- float16, bfloat16: 1e-2 (11 and 8 bits of mantissa);
- float32: 1e-4;
- float64: 1e-9. Generated double kernels are within about 1e-13 of the interpreter's scale (a
  sum of 262144 doubles: 5e-14; elementwise ops, softmax, normalization, pooling, matmul and
  convolution through PyTorch: below 1e-15; onnxruntime's alike), so 1e-9 leaves room for far
  longer sums and still rejects a double kernel that computes in float32, as OpenVINO's do (1e-9
  to 1e-6 of the scale).

Any other float dtype (complex) takes float32's. The error is relative to the output's scale rather
than per element: kernels reassociate sums, which moves small elements by an error of the large
ones' size.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from kernorch.ir import interp
from kernorch.ir.graph import Graph, TensorType, index_limits
from kernorch.ir.prims import Op, ValueId

# relative tolerance by dtype name (the policy: look it up through ``rel_tolerance``)
REL_TOL = {"float16": 1e-2, "bfloat16": 1e-2, "float32": 1e-4, "float64": 1e-9}
# A kernel that quantizes (rounds floats to integers: QuantizeLinear) may round a value the other way
# where float32 rounding put it on a rounding boundary (a C convolution sums in another order; an
# int8 library scales by 1/s where the interpreter divides by s): at QUANTIZED_SHARE of an output's
# elements at most, an integer by one, a float by at most QUANTIZED_STEP of the output's scale
# (about two uint8 steps: one step of an operand, spread by the arithmetic after it).
QUANTIZED_SHARE = 0.01
QUANTIZED_STEP = 0.02
INT_LOW, INT_HIGH = -4, 4  # random integers lie in [INT_LOW, INT_HIGH), zero excluded

# (random feeds by value id, the interpreter's outputs on them) of one subgraph
Reference = tuple[dict[ValueId, np.ndarray], dict[ValueId, np.ndarray]]


# ---------------------------------------------------------------------------------------------
# Random data
# ---------------------------------------------------------------------------------------------

def random_array(rng: np.random.Generator, t: TensorType, limit: int | None = None) -> np.ndarray:
    """Random values of type ``t``; ``limit`` = n when the value is a gather index into n elements.
    Raises ValueError for a dtype it cannot make (strings, complex)."""
    try:
        dt = np.dtype(t.dtype)
    except TypeError:
        raise ValueError(f"cannot make random values of dtype {t.dtype}") from None
    if dt == np.bool_:
        arr = rng.random(t.shape) < 0.5
    elif dt.kind in "iu":
        if limit is not None:
            lo = 0 if dt.kind == "u" else max(INT_LOW, -limit)
            arr = rng.integers(lo, min(INT_HIGH, limit), size=t.shape)
        else:  # never zero: a divisor stays defined
            arr = rng.choice([k for k in range(1 if dt.kind == "u" else INT_LOW, INT_HIGH) if k], size=t.shape)
    elif dt in (np.float32, np.float64):
        arr = rng.standard_normal(t.shape, dtype=dt)  # generated in the dtype: no float64 detour
    elif dt.kind == "f" or dt.name == "bfloat16":  # ml_dtypes' bfloat16 is of kind "V"
        arr = rng.standard_normal(t.shape, dtype=np.float32)
    else:
        raise ValueError(f"cannot make random values of dtype {t.dtype}")
    return np.array(arr, dtype=dt, order="C")  # keeps rank 0 (ascontiguousarray makes it 1-d)


def random_feeds(g: Graph, values: Sequence[ValueId] | None = None, seed: int = 0,
                 limits: Mapping[ValueId, int] | None = None) -> dict[ValueId, np.ndarray]:
    """Data for ``values`` (default: the graph's inputs): a writable copy of a constant's real data
    (rank kept), seeded random data of the declared type for the rest. ``limits``: gather index
    bounds (default ``index_limits(g)``)."""
    rng = np.random.default_rng(seed)
    limits = index_limits(g) if limits is None else limits
    feeds = {}
    for v in (g.inputs if values is None else values):
        t = g.types[v]
        if v in g.constants:
            feeds[v] = np.array(g.constants[v], dtype=t.dtype, order="C")
            continue
        try:
            feeds[v] = random_array(rng, t, limits.get(v))
        except ValueError as e:
            raise ValueError(f"input {g.name(v)!r}: {e}") from None
    return feeds


def reference(g: Graph, sub: Graph, seed: int = 0) -> Reference:
    """(random feeds, the interpreter's outputs on them) for ``sub``, a subgraph of ``g``: computed
    once per candidate kernel and shared by everything that implements it."""
    feeds = random_feeds(g, sub.inputs, seed, index_limits(sub))
    return feeds, interp.run(sub, feeds)


def kernel_feeds(g: Graph, inputs: Sequence[ValueId], feeds: Mapping[ValueId, np.ndarray],
                 seed: int = 0) -> list[np.ndarray]:
    """Arrays for a kernel's ``inputs``: the reference's feeds, then the graph's data for a value the
    subgraph kept as an immediate (a rank-0 constant a generated kernel takes as an input)."""
    missing = [v for v in inputs if v not in feeds]
    extra = random_feeds(g, missing, seed) if missing else {}
    return [feeds[v] if v in feeds else extra[v] for v in inputs]


# ---------------------------------------------------------------------------------------------
# Equality
# ---------------------------------------------------------------------------------------------

def rel_tolerance(dtype: str) -> float:
    """The policy: allowed max abs error relative to the output's scale (at least 1)."""
    return REL_TOL.get(str(dtype), REL_TOL["float32"])


def tolerance(dtype: str, ref_max: float) -> float:
    """Allowed max abs error for an output of ``dtype`` whose largest finite magnitude is ``ref_max``."""
    return rel_tolerance(dtype) * max(1.0, ref_max)


def magnitude(ref: np.ndarray) -> float:
    """Largest finite |value| of ``ref`` (0 when there is none)."""
    r = np.asarray(ref, dtype=np.float64)
    return float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0))


def compare(got: Any, ref: np.ndarray, rel: float | None = None, quantized: bool = False) -> tuple[bool, float, str]:
    """(ok, max abs error, detail) of ``got`` against ``ref`` under the policy (module docstring);
    ``rel`` overrides the dtype's relative tolerance; ``quantized``: an output of a kernel that
    quantizes (``quantizes``). Never raises."""
    g, r = to_numpy(got), np.asarray(ref)
    if g.shape != r.shape:
        return False, math.inf, f"shape {list(g.shape)}, expected {list(r.shape)}"
    if r.dtype.kind not in "fc" and r.dtype.name != "bfloat16":  # ml_dtypes' bfloat16 is of kind "V"
        g64, r64 = g.astype(np.float64), r.astype(np.float64)
        bad = int(np.count_nonzero(g64 != r64))
        err = float(np.max(np.abs(g64 - r64), initial=0.0)) if bad else 0.0
        if quantized:
            ok = err <= 1 and bad <= _few(r.size)
            return ok, err, f"{bad} of {r.size} elements differ (max abs error {err:.3g}); a quantized kernel's " \
                            f"integers may differ by one at {QUANTIZED_SHARE:.0%} of them"
        return bad == 0, err, f"{bad} of {r.size} elements differ (max abs error {err:.3g}); must be exact"
    if g.dtype == r.dtype == np.float32 and not quantized:
        fast = _compare_finite_float32(g, r, rel)
        if fast is not None:
            return fast
    g64, r64 = g.astype(np.float64), r.astype(np.float64)
    nan_g, nan_r = np.isnan(g64), np.isnan(r64)
    if (nan_g != nan_r).any():
        return False, math.inf, f"max abs error inf: NaN at {int(np.count_nonzero(nan_g != nan_r))} element(s) " \
                                f"where the other has a number"
    inf_r = np.isinf(r64)
    if not np.array_equal(g64[inf_r], r64[inf_r]):
        return False, math.inf, "max abs error inf: an infinity of the reference differs (sign or value)"
    finite = np.isfinite(r64)
    with np.errstate(invalid="ignore", over="ignore"):
        err = float(np.max(np.abs(g64[finite] - r64[finite]), initial=0.0))
    tol = rel_tolerance(r.dtype.name) if rel is None else rel
    scale = max(1.0, magnitude(r64))
    tol *= scale
    if quantized and err > tol:
        with np.errstate(invalid="ignore", over="ignore"):
            bad = int(np.count_nonzero(np.abs(g64[finite] - r64[finite]) > tol))
        step = QUANTIZED_STEP * magnitude(r64)
        if np.array_equal(r64[finite], np.round(r64[finite])):  # rounded but still float: one is a step
            step = max(step, 1.0)
        ok = bad <= _few(r.size) and err <= max(step, tol)
        return ok, err, f"max abs error {err:.3g} at {bad} of {r.size} elements above tolerance {tol:.3g}; a " \
                        f"quantized kernel may exceed it at {QUANTIZED_SHARE:.0%} of them, by {step:.3g} at most"
    return _verdict(err, tol)


def _verdict(err: float, tol: float) -> tuple[bool, float, str]:
    return err <= tol, err, f"max abs error {err:.3g} {'<=' if err <= tol else '>'} tolerance {tol:.3g}"


def _compare_finite_float32(g: np.ndarray, r: np.ndarray, rel: float | None) -> tuple[bool, float, str] | None:
    """compare's verdict on two float32 arrays without float64 copies, when their difference is
    finite everywhere (then both are: an infinity or NaN on either side makes it inf or NaN);
    None otherwise, for the general path to say where. Every kernel and library attempt of a
    measured compile is verified, often on outputs of a million elements."""
    with np.errstate(invalid="ignore", over="ignore"):
        err = float(np.max(np.abs(g - r), initial=0.0))
    if not math.isfinite(err):
        return None
    scale = max(1.0, float(np.max(np.abs(r), initial=0.0)))  # r is finite: magnitude's float64 mask not needed
    return _verdict(err, (rel_tolerance("float32") if rel is None else rel) * scale)


def _few(n: int) -> int:
    """How many of ``n`` elements a quantized kernel may have off (QUANTIZED_SHARE, at least one)."""
    return max(1, int(QUANTIZED_SHARE * n))


def check(outputs: Sequence[ValueId], got: Sequence[Any], ref: Mapping[ValueId, np.ndarray],
          rel: float | None = None, quantized: bool = False) -> tuple[bool, float, str]:
    """Compare a kernel's results (one per output, in order) with the reference outputs: count,
    dtype and values (``rel``: compare's). Returns (ok, worst max abs error, detail naming the first
    bad output)."""
    got = list(got)
    if len(got) != len(outputs):
        return False, math.inf, f"returned {len(got)} outputs, expected {len(outputs)}"
    worst = 0.0
    for v, t in zip(outputs, got):
        arr, want = to_numpy(t), np.asarray(ref[v])
        if arr.dtype != want.dtype:
            return False, math.inf, f"output %{v}: dtype {arr.dtype}, expected {want.dtype}"
        ok, err, detail = compare(arr, want, rel, quantized)
        worst = max(worst, err)
        if not ok:
            return False, err, f"output %{v}: {detail}"
    return True, worst, "ok"


def verify(run: Callable[[list[np.ndarray]], Sequence[Any]], inputs: Sequence[ValueId], outputs: Sequence[ValueId],
           g: Graph, members: Iterable[ValueId], ref: Reference | None = None, seed: int = 0,
           rel: float | None = None) -> tuple[bool, float, str]:
    """Run a kernel (``run`` maps arrays for ``inputs`` to results for ``outputs``) and compare it
    with the interpreter on the prims ``members`` (``ref``, when the caller computed it once for
    several kernels; ``rel``: the kernel's own tolerance, for arithmetic of lower precision than its
    outputs). Exceptions of the kernel or the interpreter propagate: the caller records them."""
    if ref is None:
        ref = reference(g, g.subgraph(set(members), list(outputs)), seed)
    loosest = kernel_tolerance(g, members)
    if loosest is not None:
        rel = max(rel or 0.0, loosest)
    return check(outputs, run(kernel_feeds(g, inputs, ref[0], seed)), ref[1], rel, quantizes(g, members))


def quantizes(g: Graph, members: Iterable[ValueId]) -> bool:
    """Whether a kernel rounds floats to integers (a ROUND prim: QuantizeLinear's): its outputs
    are compared as ``compare``'s ``quantized`` says."""
    pos = g._index()[0]
    return any(g.prims[pos[m]].op is Op.ROUND for m in members if m in pos)


def kernel_tolerance(g: Graph, members: Iterable[ValueId]) -> float | None:
    """The loosest tolerance of the dtypes a kernel computes through (its prims' inputs and
    outputs) when looser than float32's, else None (each output's own dtype decides). A kernel
    that rounds to bfloat16 on the way to a float32 output may round at other places than the
    interpreter (oneDNN adds the bias before rounding its bf16 result): it is judged as bf16."""
    pos = g._index()[0]  # the graph's cached prim positions: no scan of every prim per kernel
    dtypes = {g.types[v].dtype for m in set(members) if m in pos
              for v in (*g.prims[pos[m]].inputs, m)}
    worst = max((REL_TOL.get(d, 0.0) for d in dtypes), default=0.0)
    return worst if worst > REL_TOL["float32"] else None


def to_numpy(a: Any) -> np.ndarray:
    """A NumPy array of ``a`` (a PyTorch tensor on any device, without importing torch)."""
    if hasattr(a, "detach") and hasattr(a, "cpu"):
        from kernorch.ir.tensors import to_numpy as tensor_to_numpy  # lazy: torch; the oracle stays torch-free

        return tensor_to_numpy(a)
    return np.asarray(a)
