"""providers/bf16_choice.py's decision per product: bf16 where its oneDNN call is faster by MARGIN, judged
so that one disturbed measurement does not keep a product float32 (the timer here is scripted)."""

import numpy as np
import pytest

from kernorch.ir.graph import Builder
from kernorch.providers import bf16_choice
from kernorch.providers.timing import Measurement


def _matmul():
    b = Builder()
    y = b.matmul(b.input((8, 16)), b.constant(np.ones((16, 4), np.float32)))
    b.g.outputs = [y]
    return b.g, b.g.prims[-1]


class _Scripted:
    """Returns the scripted seconds in call order (float32 first, then bf16, per measurement)."""

    def __init__(self, seconds):
        self.seconds, self.calls = list(seconds), 0

    def __call__(self, fn, provider=""):
        fn()  # the real oneDNN call runs: its arguments must be well formed
        self.calls += 1
        return Measurement.exact(self.seconds.pop(0))


@pytest.mark.parametrize("script, faster, calls", [
    ([1.0, 0.5], True, 2),                # faster at once: timed once
    ([1.0, 0.95, 1.0, 0.5], True, 4),     # one disturbed bf16 sample: the second measurement decides
    ([0.4, 0.5, 1.0, 0.9], False, 4),     # a fast float32 sample counts too (each dtype's better one)
    ([1.0, 0.9, 1.0, 0.9], False, 4),     # really not 1.25x faster: stays float32
])
def test_a_product_that_misses_the_margin_is_timed_again(script, faster, calls):
    g, p = _matmul()
    timer = _Scripted(script)
    assert bf16_choice._faster(g, p, timer) is faster
    assert timer.calls == calls and not timer.seconds
