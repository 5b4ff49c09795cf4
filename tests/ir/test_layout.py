"""Index maps against NumPy: every layout constructor, and composition of chains of them."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from kernorch.ir import index as ix
from kernorch.ir import layout


def _arr(shape):
    return np.arange(math.prod(shape), dtype=np.float32).reshape(shape)


def test_reshape_matches_numpy():
    x = _arr((2, 3, 4))
    m = layout.reshape((2, 3, 4), (6, 2, 2))
    np.testing.assert_array_equal(m.gather(x), x.reshape(6, 2, 2))


def test_reshape_roundtrip_simplifies_to_identity():
    a = layout.reshape((6, 4), (24,))
    b = layout.reshape((24,), (6, 4))
    assert b.compose(a).is_identity()
    assert a.compose(b).is_identity()


def test_permute_and_back_is_identity():
    p = layout.permute((2, 3, 5), (2, 0, 1))
    q = layout.permute((5, 2, 3), (1, 2, 0))
    assert q.compose(p).is_identity()


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_matches_numpy(mode):
    x = _arr((3, 5))
    m = layout.pad((3, 5), (1, 2), (2, 3), mode, value=-1.0)
    kw = {"constant_values": -1.0} if mode == "constant" else {}
    np.testing.assert_array_equal(m.gather(x), np.pad(x, ((1, 2), (2, 3)), mode=mode, **kw))


def test_slice_negative_step():
    x = _arr((7,))
    m = layout.slice_((7,), (6,), (-2,), (4,))
    np.testing.assert_array_equal(m.gather(x), x[6::-2])


def test_window_is_pooling():
    x = _arr((1, 1, 5, 5))
    m = layout.window((1, 1, 5, 5), (3, 3), (2, 2), (1, 1), (1, 1), (3, 3), pad_value=-np.inf)
    w = m.gather(x)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    ref = np.array([[xp[0, 0, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max() for j in range(3)] for i in range(3)])
    np.testing.assert_array_equal(w.max(axis=(-2, -1))[0, 0], ref)


def test_take_with_constant_indices():
    x = _arr((4, 5))
    idx = np.array([[3, 0], [1, -1]])
    m = layout.take((4, 5), 1, idx)
    np.testing.assert_array_equal(m.gather(x), np.take(x, idx % 5, axis=1))


def test_take_arithmetic_progression_becomes_affine():
    m = layout.take((10, 3), 0, np.array([1, 3, 5, 7]))
    assert "T" not in repr(m.index[0])
    np.testing.assert_array_equal(m.gather(_arr((10, 3))), _arr((10, 3))[1:8:2])


def test_floordiv_mod_simplify_with_ranges():
    sizes = (3, 4)
    e = ix.var(0) * 4 + ix.var(1)
    assert ix.floordiv(e, 4, sizes) == ix.var(0)
    assert ix.mod(e, 4, sizes) == ix.var(1)
    f = ix.floordiv(ix.var(0), 4, (12,)) * 4 + ix.mod(ix.var(0), 4, (12,))
    assert f == ix.var(0)


shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(shapes, st.data())
def test_random_chains_compose_like_numpy(shape, data):
    """A random chain of reshape/permute/slice/pad/flip composes into one map equal to the chain."""
    x = _arr(tuple(shape))
    cur_shape = tuple(shape)
    composed = layout.identity(cur_shape)
    ref = x
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["reshape", "permute", "slice", "pad", "flip"]))
        if kind == "reshape":
            n = math.prod(cur_shape)
            divs = [d for d in range(1, n + 1) if n % d == 0]
            a = data.draw(st.sampled_from(divs))
            new = (a, n // a)
            m = layout.reshape(cur_shape, new)
            ref = ref.reshape(new)
        elif kind == "permute":
            perm = data.draw(st.permutations(range(len(cur_shape))))
            m = layout.permute(cur_shape, perm)
            ref = ref.transpose(perm)
        elif kind == "slice":
            starts, steps, outs, sl = [], [], [], []
            for n in cur_shape:
                step = data.draw(st.sampled_from([1, 2, -1]))
                start = data.draw(st.integers(0, n - 1))
                cnt = len(range(start, n if step > 0 else -1, step))
                starts.append(start), steps.append(step), outs.append(cnt)
                sl.append(slice(start, None if step > 0 else None, step))
            m = layout.slice_(cur_shape, starts, steps, outs)
            ref = ref[tuple(sl)]
        elif kind == "pad":
            b = [data.draw(st.integers(0, 2)) for _ in cur_shape]
            e = [data.draw(st.integers(0, 2)) for _ in cur_shape]
            mode = data.draw(st.sampled_from(["edge", "reflect"]))
            if mode == "reflect" and any(p >= n for p, n in zip(b + e, list(cur_shape) * 2)):
                mode = "edge"
            m = layout.pad(cur_shape, b, e, mode)
            ref = np.pad(ref, list(zip(b, e)), mode=mode)
        else:
            axes = [d for d in range(len(cur_shape)) if data.draw(st.booleans())]
            m = layout.flip(cur_shape, axes)
            ref = np.flip(ref, axes) if axes else ref
        composed = m.compose(composed)
        cur_shape = m.out_shape
    np.testing.assert_array_equal(composed.gather(x), ref)
