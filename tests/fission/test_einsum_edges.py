"""Einsum shapes the cases of test_einsum.py do not reach (mutation testing, issue 44), against
onnxruntime: several letters owned by one operand, letters of size 1 owned by one operand."""

import numpy as np
import pytest

from onnx_oracle import check

RNG = np.random.default_rng(48)

CASES = [
    ("ij,jkl->ikl", [(3, 4), (4, 2, 5)]),  # two letters only the second operand has
    ("ikl,lj->ijk", [(3, 2, 4), (4, 5)]),  # two only the first has, permuted on the way out
    ("ab,cd->abcd", [(2, 3), (4, 5)]),  # an outer product of two matrices
    ("ab,cd->cadb", [(2, 3), (4, 5)]),
    ("ij,jk->ik", [(1, 4), (4, 1)]),  # size-1 letters on each side
    ("bij,bjk->bik", [(2, 1, 4), (2, 4, 1)]),
    ("i,j->ij", [(1,), (1,)]),
    ("ij,j->i", [(3, 1), (1,)]),
]


@pytest.mark.parametrize("eq,shapes", CASES, ids=[c[0] + str(c[1]) for c in CASES])
def test_einsum_edges(eq, shapes):
    ins = {f"x{k}": RNG.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)}
    check("Einsum", ins, opset=12, equation=eq)
