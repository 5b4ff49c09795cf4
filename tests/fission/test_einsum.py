"""Einsum against onnxruntime: contractions, batch dims, diagonals, traces, reductions, outer
products, ellipsis broadcasting, implicit outputs, three operands."""

import numpy as np
import pytest

from onnx_oracle import check

RNG = np.random.default_rng(13)

CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("bii->bi", [(2, 4, 4)]),
    ("i,i", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,kj->ikj", [(3, 4), (5, 4)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 5, 4, 6)]),
    ("...i,...i->...", [(2, 3, 4), (1, 3, 4)]),
    ("...ii->...i", [(2, 3, 4, 4)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 6)]),
    ("ij,jk,kl", [(2, 3), (3, 4), (4, 5)]),
    ("bij,jk->bk", [(2, 3, 4), (4, 5)]),
    ("ijk,ikj->i", [(2, 3, 4), (2, 4, 3)]),
]


@pytest.mark.parametrize("eq,shapes", CASES, ids=[c[0] for c in CASES])
def test_einsum(eq, shapes):
    ins = {f"x{k}": RNG.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)}
    check("Einsum", ins, opset=12, equation=eq)


def test_einsum_float64():
    ins = {"a": RNG.standard_normal((3, 4)), "b": RNG.standard_normal((4, 2))}
    out = check("Einsum", ins, opset=12, rel=1e-12, equation="ij,jk->ik")
    assert out[0].dtype == np.float64
