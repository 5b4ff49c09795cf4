"""IndexMap.gather's strided fast path (no index arrays) against the index-array definition,
on chains of every layout constructor."""

import math

import numpy as np
from hypothesis import given, settings, strategies as st

from kernorch.ir import layout


def _arr(shape):
    return np.arange(math.prod(shape), dtype=np.float32).reshape(shape) - 7


MAPS = [
    layout.permute((2, 3, 4), (2, 0, 1)),
    layout.slice_((5, 6), (4, 1), (-2, 2), (3, 3)),
    layout.broadcast((1, 3, 1), (2, 3, 4)),
    layout.flip((3, 4), (1,)),
    layout.window((1, 2, 6, 5), (2, 3), (2, 1), (0, 0), (1, 2), (3, 1)),
    layout.take((6, 2), 0, np.array([1, 3, 5])),
    layout.reshape((2, 3, 4), (4, 6)),
    layout.reshape((4, 6), (2, 3, 4)),
    layout.take((6, 2), 0, np.array([[4, 0], [1, 1]])),              # table: index arrays
    layout.pad((3, 4), (1, 0), (0, 2), "constant", -1.0),            # masked: index arrays
    layout.permute((4, 6), (1, 0)).compose(layout.reshape((2, 3, 4), (4, 6))),
]


def test_fast_path_equals_definition():
    for m in MAPS:
        x = _arr(m.in_shape)
        np.testing.assert_array_equal(m.gather(x), m.gather_by_index(x))
        xt = np.asfortranarray(x)  # non-contiguous input
        np.testing.assert_array_equal(m.gather(xt), m.gather_by_index(xt))


def test_transposed_weight_needs_no_index_arrays():
    m = layout.permute((4096, 2048), (1, 0))
    assert m._strided(np.zeros((4096, 2048), np.float32)) is not None


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_random_slices_and_permutes(shape, data):
    perm = data.draw(st.permutations(range(len(shape))))
    m = layout.permute(shape, perm)
    starts, steps, out = [], [], []
    for n in m.out_shape:
        step = data.draw(st.sampled_from([1, 2, -1, -2]))
        start = data.draw(st.integers(0, n - 1))
        length = (n - start + step - 1) // step if step > 0 else start // -step + 1
        starts.append(start)
        steps.append(step)
        out.append(length)
    s = layout.slice_(m.out_shape, starts, steps, out)
    both = s.compose(m)
    x = _arr(shape)
    np.testing.assert_array_equal(both.gather(x), s.gather(m.gather(x)))
    np.testing.assert_array_equal(both.gather(x), both.gather_by_index(x))
