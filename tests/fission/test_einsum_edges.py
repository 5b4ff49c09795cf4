"""Einsum shapes the cases of test_einsum.py do not reach (mutation testing, issue 44), against
onnxruntime: several letters owned by one operand, letters of size 1 owned by one operand, spaces
in the equation, an ellipsis in one operand only; and the refusal of an operand count the
equation does not name."""

import re

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_oracle import check, run_reference
from kernorch.errors import UnsupportedOpError
from kernorch.frontend.onnx_import import import_onnx

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
    (" ij , jk -> ik ", [(3, 4), (4, 5)]),
    ("...ij,jk", [(2, 3, 4), (4, 5)]),
    ("...ij,...jk->...ik", [(3, 4), (4, 5)]),  # an ellipsis of no dimensions
]


@pytest.mark.parametrize("eq,shapes", CASES, ids=[c[0] + str(c[1]) for c in CASES])
def test_einsum_edges(eq, shapes):
    ins = {f"x{k}": RNG.standard_normal(s).astype(np.float32) for k, s in enumerate(shapes)}
    check("Einsum", ins, opset=12, equation=eq)


def test_implicit_output_sorts_an_upper_case_letter_first():
    """(The ONNX reference as the oracle: onnxruntime refuses this equation, upper case and all.)"""
    ins = {"a": RNG.standard_normal((3, 4)).astype(np.float32), "b": RNG.standard_normal((4, 5)).astype(np.float32)}
    (out,) = check("Einsum", ins, opset=12, oracle=run_reference, equation="Xj,jk")
    assert out.shape == (3, 5)


@pytest.mark.parametrize("shapes,message", [
    ([(3, 3)] * 3, "equation 'ij,jk->ik' names 2 operands, the node has 3"),
    ([(3, 3), (3, 3, 1)], "equation 'ij,jk->ik' does not match an operand of rank 3"),
])
def test_an_equation_that_does_not_fit_the_operands_is_refused(shapes, message):
    """(Built by hand: ONNX's shape inference refuses these models before kernorch sees them.)"""
    names = "abc"[:len(shapes)]
    node = helper.make_node("Einsum", list(names), ["y"], equation="ij,jk->ik")
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip(names, shapes)]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])
    model = helper.make_model(helper.make_graph([node], "e", ins, [out]), opset_imports=[helper.make_opsetid("", 12)])
    with pytest.raises(UnsupportedOpError, match=f"^Einsum node '': {re.escape(message)}$"):
        import_onnx(model)
