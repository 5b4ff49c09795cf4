"""The oracle (kernorch/ir/oracle.py): random feeds per dtype, the tolerance policy at its edges, and
proof that every stage judges by it: tightening the policy's float32 tolerance makes each stage
reject a kernel off by a relative 1e-5 that it accepts under the default policy. (The CUDA
measurer's proof is in tests/cuda/test_cuda_oracle.py, where Triton's mode is set up.)"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from kernorch.ir import oracle
from kernorch.ir.graph import Builder, TensorType
from kernorch.ir.prims import Op

OFF = 1 + 1e-5  # a kernel off by a relative 1e-5: inside the default float32 policy (1e-4)


# ---------------------------------------------------------------------------------------------
# Random feeds
# ---------------------------------------------------------------------------------------------

DTYPES = ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "bool"]


def _graph_of(dtypes, shape=(3, 5)):
    b = Builder()
    xs = [b.input(shape if i else (), dt) for i, dt in enumerate(dtypes)]
    return b.g, xs


@pytest.mark.parametrize("dtype", DTYPES)
def test_feeds_have_the_declared_shape_and_dtype(dtype):
    g, (x0, x) = _graph_of([dtype, dtype])
    feeds = oracle.random_feeds(g)
    assert set(feeds) == {x0, x}
    assert feeds[x0].shape == () and feeds[x].shape == (3, 5)
    assert all(a.dtype == np.dtype(dtype) and a.flags.c_contiguous and a.flags.writeable for a in feeds.values())


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_integers_are_small_and_never_zero(dtype):
    g, (_, x) = _graph_of([dtype, dtype], shape=(64, 64))
    a = oracle.random_feeds(g, seed=1)[x]
    assert (a != 0).all()
    lo = 1 if np.dtype(dtype).kind == "u" else oracle.INT_LOW
    assert a.min() == lo and a.max() == oracle.INT_HIGH - 1  # the whole range is drawn
    if np.dtype(dtype).kind == "i":
        assert (a < 0).any()


def test_gather_indices_stay_inside_the_axis_and_may_be_zero():
    g, (_, x) = _graph_of(["int64", "int64"], shape=(64, 64))
    a = oracle.random_feeds(g, seed=2, limits={x: 2})[x]
    assert a.min() == -2 and a.max() == 1 and (a == 0).any()


def test_floats_are_standard_normal_and_booleans_both():
    g, (_, f, h, t) = _graph_of(["float32", "float32", "float16", "bool"], shape=(100, 100))
    feeds = oracle.random_feeds(g, seed=3)
    for v in (f, h):
        assert abs(float(feeds[v].mean())) < 0.05 and abs(float(feeds[v].std()) - 1) < 0.05
    assert 0.4 < feeds[t].mean() < 0.6


def test_feeds_are_deterministic_by_seed():
    g, xs = _graph_of(["float32", "int64", "bool", "float16"])
    a, b, c = oracle.random_feeds(g, seed=4), oracle.random_feeds(g, seed=4), oracle.random_feeds(g, seed=5)
    assert all(np.array_equal(a[v], b[v]) for v in xs)
    assert not np.array_equal(a[xs[0]], c[xs[0]])


def test_constants_get_their_real_data_as_a_writable_copy():
    b = Builder()
    x = b.input((2, 2))
    w = b.constant(np.arange(4, dtype=np.float32).reshape(2, 2))
    s = b.constant(np.array(0.5, np.float32))
    feeds = oracle.random_feeds(b.g, [x, w, s])
    assert np.array_equal(feeds[w], b.g.constants[w]) and feeds[s].shape == () and feeds[s] == 0.5
    feeds[w][0, 0] = 7
    assert b.g.constants[w][0, 0] == 0


def test_a_dtype_without_random_data_is_one_line_naming_the_input():
    b = Builder()
    b.input((2,), "complex64", name="h")
    with pytest.raises(ValueError, match=r"^input 'h': cannot make random values of dtype complex64$"):
        oracle.random_feeds(b.g)


def test_kernel_feeds_add_the_graph_constants_a_subgraph_kept_as_immediates():
    b = Builder()
    x = b.input((4,))
    s = b.constant(np.array(2.0, np.float32))
    y = b.binary(Op.MUL, x, s)
    b.g.outputs = [y]
    feeds, ref = oracle.reference(b.g, b.g.subgraph({y}, [y]))
    assert list(feeds) == [x]
    got = oracle.kernel_feeds(b.g, [x, s], feeds)
    assert got[0] is feeds[x] and got[1].shape == () and got[1] == 2.0
    np.testing.assert_array_equal(ref[y], feeds[x] * 2)


# ---------------------------------------------------------------------------------------------
# The tolerance policy at its edges (both directions: neither too loose nor too strict)
# ---------------------------------------------------------------------------------------------

def _ref(scale: float, dtype=np.float32) -> np.ndarray:
    r = np.random.default_rng(0).standard_normal(64)
    return (r / np.abs(r).max() * scale).astype(dtype)


@pytest.mark.parametrize("dtype,rel", [(np.float32, 1e-4), (np.float64, 1e-9), (np.float16, 1e-2)])
@pytest.mark.parametrize("scale", [0.01, 3.0, 1000.0])
def test_just_inside_passes_and_just_outside_fails(dtype, rel, scale):
    want = _ref(scale, dtype)
    s = max(1.0, float(np.abs(want).max()))
    assert oracle.tolerance(np.dtype(dtype).name, scale) == pytest.approx(rel * max(1.0, scale))
    for k, ok in [(0.8, True), (1.25, False)]:
        got = want.astype(np.float64)
        got[7] += k * rel * s
        assert oracle.compare(got.astype(dtype), want)[0] == ok, k
    ok, err, detail = oracle.compare(want + np.asarray(10 * rel * s, dtype), want)
    assert not ok and err > 0 and "> tolerance" in detail


def _off_by(rel: float, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(got, ref): ``ref`` of scale 4 in ``dtype``, ``got`` with one element off by ``rel`` * 4."""
    ref = _ref(4.0, dtype)
    got = ref.astype(np.float64)
    got[3] += rel * 4.0
    return got.astype(dtype), ref


def test_one_tolerance_per_dtype():
    """The policy itself, dtype by dtype: float64 is held near its own precision (an error of 1e-7
    of the scale, float32 arithmetic's, fails), float32 to 1e-4, bfloat16 and float16 to 1e-2,
    integers and booleans exactly."""
    assert oracle.REL_TOL == {"float16": 1e-2, "bfloat16": 1e-2, "float32": 1e-4, "float64": 1e-9}
    assert oracle.compare(*_off_by(5e-10, np.float64))[0]
    assert not oracle.compare(*_off_by(1e-7, np.float64))[0]
    assert oracle.compare(*_off_by(5e-5, np.float32))[0]
    assert not oracle.compare(*_off_by(5e-4, np.float32))[0]
    assert oracle.compare(*_off_by(5e-3, np.float16))[0]
    assert not oracle.compare(*_off_by(5e-2, np.float16))[0]
    ints = np.arange(-8, 8, dtype=np.int64)
    assert oracle.compare(ints.copy(), ints)[0]
    assert not oracle.compare(ints + (ints == 0), ints)[0]  # one element off by one
    flags = ints > 0
    assert not oracle.compare(~flags, flags)[0]
    # bf16: a float32 result of bf16 arithmetic is judged with bf16's tolerance (providers pass it)
    bf16 = oracle.rel_tolerance("bfloat16")
    assert oracle.compare(*_off_by(5e-3, np.float32), rel=bf16)[0]
    assert not oracle.compare(*_off_by(5e-2, np.float32), rel=bf16)[0]


def test_bfloat16_arrays_are_floats_under_the_bf16_tolerance():
    """ml_dtypes' bfloat16 is of NumPy kind "V": it is still judged as a float, not exactly."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    ref = _ref(4.0).astype(ml_dtypes.bfloat16)
    got = ref.astype(np.float64)
    got[3] += 5e-3 * 4.0  # 0.02 at a scale of 4: representable next to values of magnitude < 4
    ok, err, detail = oracle.compare(got.astype(ml_dtypes.bfloat16), ref)
    assert ok and err > 0 and "tolerance 0.04" in detail
    got[3] += 5e-2 * 4.0
    assert not oracle.compare(got.astype(ml_dtypes.bfloat16), ref)[0]


def test_nan_must_sit_exactly_where_the_reference_has_it():
    want = _ref(3.0)
    nan = want.copy()
    nan[5] = np.nan
    ok, err, detail = oracle.compare(nan, want)
    assert not ok and err == np.inf and "inf" in detail
    assert not oracle.compare(want, nan)[0]
    assert oracle.compare(nan, nan.copy())[0]
    other = want.copy()
    other[6] = np.nan
    assert not oracle.compare(other, nan)[0]  # a NaN, but in the wrong place


def test_infinities_must_match_in_place_and_sign():
    want = _ref(3.0)
    inf = want.copy()
    inf[3] = np.inf
    assert oracle.compare(inf, inf.copy())[0]
    neg = inf.copy()
    neg[3] = -np.inf
    ok, err, _ = oracle.compare(neg, inf)
    assert not ok and err == np.inf
    assert not oracle.compare(want, inf)[0] and not oracle.compare(inf, want)[0]
    assert oracle.compare(inf, inf)[1] == 0.0  # the infinity is not the scale of the others


def test_integers_and_booleans_must_be_exact():
    ints = np.arange(6, dtype=np.int64) * 100_000
    assert oracle.compare(ints, ints.copy())[:2] == (True, 0.0)
    ok, err, detail = oracle.compare(ints + (ints == 200_000), ints)  # off by 1 in 500000: still wrong
    assert not ok and err == 1 and "exact" in detail
    b = np.array([True, False])
    assert oracle.compare(b, b.copy())[0] and not oracle.compare(~b, b)[0]


def test_shape_dtype_and_count_mismatches():
    want = _ref(1.0)
    assert not oracle.compare(want[:10], want)[0]
    assert not oracle.compare(want.reshape(8, 8), want)[0]
    ok, _, detail = oracle.check([1], [want.astype(np.float64)], {1: want})
    assert not ok and "dtype" in detail
    ok, _, detail = oracle.check([1], [want, want], {1: want})
    assert not ok and "returned 2 outputs" in detail
    assert oracle.check([1], [torch.from_numpy(want.copy())], {1: want})[0]  # tensors are read too


def test_an_override_replaces_the_dtype_tolerance():
    want = _ref(1.0)
    got = want + np.float32(5e-4)
    assert not oracle.compare(got, want)[0] and oracle.compare(got, want, rel=1e-3)[0]


# ---------------------------------------------------------------------------------------------
# Every stage judges by the policy
# ---------------------------------------------------------------------------------------------

@pytest.fixture
def exp_graph():
    b = Builder()
    x = b.input((4, 8))
    y = b.unary(Op.EXP, x)
    b.g.outputs = [y]
    return b.g, x, y


@pytest.fixture(params=["default", "tight"])
def policy(request, monkeypatch):
    """The default policy accepts a relative 1e-5; a tightened one (same module, same key) rejects it."""
    if request.param == "tight":
        monkeypatch.setitem(oracle.REL_TOL, "float32", 1e-6)
    return request.param == "default"


def test_the_measurer_uses_the_policy(exp_graph, policy):
    from kernorch.orchestrate import measure

    g, x, y = exp_graph
    kern = SimpleNamespace(inputs=[x], outputs=[y], run=lambda xs: [torch.from_numpy(np.exp(xs[0]) * OFF)])
    ok, detail = measure.verify(g, kern, {y})
    assert ok == policy, detail


def test_the_providers_use_the_policy(exp_graph, policy):
    from kernorch.providers.base import BuiltKernel, verify

    g, x, y = exp_graph
    built = BuiltKernel("p", [x], [y], lambda ts: [torch.exp(ts[0]) * OFF])
    ok, err, detail = verify(built, g, {y}, [y])
    assert ok == policy, detail


def test_the_rewrite_checker_uses_the_policy(exp_graph, policy):
    from kernorch.rewrite.check import mismatches

    g, x, y = exp_graph
    b = Builder()
    x2 = b.input((4, 8))
    b.g.outputs = [b.binary(Op.MUL, b.unary(Op.EXP, x2), b.constant(np.array(OFF, np.float32)))]
    assert (mismatches(g, b.g) == []) == policy


def test_kernorch_check_uses_the_policy(policy):
    from kernorch.frontend.reference import compare

    ref = {"y": _ref(3.0)}
    (row,) = compare({"y": ref["y"] * np.float32(OFF)}, ref)
    assert row.ok == policy
    assert compare({"y": ref["y"] * np.float32(OFF)}, ref, tol=1e-4)[0].ok  # an explicit --tol wins
