"""The oracle's comparison at its exact edges (mutation testing found them unguarded): an error equal
to the tolerance passes and the next representable one fails; the detail names which side it is;
dtypes without a policy of their own (complex) fall back to single precision's."""

import numpy as np
import pytest

from kernorch.ir import oracle


def test_error_equal_to_the_tolerance_passes_and_just_above_fails():
    ref = np.array([1.0, -0.5, 0.25])
    rel = 2.0 ** -10  # dyadic: the error below is exactly the tolerance
    ok, err, detail = oracle.compare(ref + np.array([rel, 0, 0]), ref, rel=rel)
    assert ok and err == rel and "<=" in detail
    above = np.nextafter(1.0 + rel, 2.0)
    ok, err, detail = oracle.compare(np.array([above, -0.5, 0.25]), ref, rel=rel)
    assert not ok and err > rel and ">" in detail


def test_scale_is_the_largest_finite_magnitude_at_least_one():
    ref = np.array([8.0, np.inf, -2.0, np.nan])
    rel = 2.0 ** -10
    got = ref.copy()
    got[0] += 8 * rel  # the tolerance scales with 8, the largest finite |value|
    assert oracle.compare(got, ref, rel=rel)[0]
    got[0] += 8 * rel
    assert not oracle.compare(got, ref, rel=rel)[0]
    small = np.array([0.001, 0.002])
    assert oracle.compare(small + 0.9 * rel, small, rel=rel)[0]  # scale is at least 1
    assert not oracle.compare(small + 1.1 * rel, small, rel=rel)[0]


def test_dtypes_without_a_policy_use_single_precision():
    assert oracle.rel_tolerance("complex64") == oracle.REL_TOL["float32"]
    ref = np.array([1 + 1j, 2 - 1j], dtype=np.complex64)
    assert oracle.compare(ref.copy(), ref)[0]
    assert not oracle.compare(ref + 1e-2, ref)[0]


def test_nan_count_in_the_detail():
    ref = np.zeros(5)
    got = ref.copy()
    got[[1, 3]] = np.nan
    ok, err, detail = oracle.compare(got, ref)
    assert not ok and err == np.inf and "NaN at 2 element(s)" in detail


def _general(monkeypatch):
    """compare with its float32 shortcut turned off: every array through the float64 path."""
    monkeypatch.setattr(oracle, "_compare_finite_float32", lambda g, r, rel: None)


@pytest.mark.parametrize("noise", [0.0, 1e-6, 3e-5, 1e-4, 3e-4, 1e-2])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 300.0])
def test_the_float32_shortcut_gives_the_general_verdict(monkeypatch, noise, scale):
    rng = np.random.default_rng(7)
    ref = (rng.standard_normal((64, 33)) * scale).astype(np.float32)
    got = (ref + rng.standard_normal(ref.shape) * noise * max(1.0, float(np.abs(ref).max()))).astype(np.float32)
    fast = oracle.compare(got, ref)
    _general(monkeypatch)
    slow = oracle.compare(got, ref)
    assert fast[0] == slow[0] and fast[1] == pytest.approx(slow[1], rel=1e-6, abs=1e-12)


def test_the_float32_shortcut_at_the_exact_tolerance():
    ref = np.array([1.0, -0.5, 0.25], dtype=np.float32)
    rel = 2.0 ** -10
    ok, err, detail = oracle.compare(ref + np.array([rel, 0, 0], dtype=np.float32), ref, rel=rel)
    assert ok and err == rel and "<=" in detail
    above = np.nextafter(np.float32(1.0 + rel), np.float32(2.0))
    ok, err, detail = oracle.compare(np.array([above, -0.5, 0.25], dtype=np.float32), ref, rel=rel)
    assert not ok and err > rel and ">" in detail


@pytest.mark.parametrize("got,ref,ok,says", [
    ([np.nan, 1.0], [np.nan, 1.0], True, "<="),  # NaN where the reference has it: the general path
    ([1.0, 1.0], [np.nan, 1.0], False, "NaN"),
    ([np.inf, 1.0], [np.inf, 1.0], True, "<="),
    ([-np.inf, 1.0], [np.inf, 1.0], False, "infinity"),
    ([3e38, 0.0], [-3e38, 0.0], False, ">"),  # the float32 difference overflows: measured in float64
])
def test_float32_arrays_that_are_not_finite_take_the_general_path(got, ref, ok, says):
    verdict = oracle.compare(np.array(got, dtype=np.float32), np.array(ref, dtype=np.float32))
    assert verdict[0] is ok and says in verdict[2]
