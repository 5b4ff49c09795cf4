"""Runtime gathers (Op.GATHER) as Triton kernels: the tests/codegen gather classes (embedding +
position + layer norm fused, GatherElements, GatherND, computed indices) on the target device
(Triton's interpreter on CPU tensors without a GPU), against the reference interpreter, in
persistent and looped tiles; out-of-range indices read the clamped row."""


import numpy as np
import pytest

from cuda_util import compare, load_codegen_cases
from kernorch.codegen.triton import can_generate_triton, why_not_triton
from kernorch.codegen.triton_lower import TritonConfig
from kernorch.ir.graph import Builder



GATHER = load_codegen_cases("test_gather_kernels")
cg = load_codegen_cases("cg_util")


def _kernel(g, members, outputs, config=None):
    from kernorch.codegen.triton_kernel import build_cuda, cuda_device

    return build_cuda(g, members, outputs, cuda_device(), config)


@pytest.mark.parametrize("block", [None, 16])
@pytest.mark.parametrize("name", list(GATHER.CASES))
def test_gather_class_matches_interpreter(name, block):
    g, members, outputs = cg.one_kernel(GATHER.CASES[name])
    assert can_generate_triton(g, members, outputs), why_not_triton(g, members, outputs)
    config = TritonConfig(block=block, warps=4) if block else None
    kernel = _kernel(g, members, outputs, config)
    compare(kernel, g, outputs, GATHER.in_range_feeds(g))


def test_embedding_norm_is_one_persistent_launch():
    from kernorch.codegen.triton_lower import lower_triton

    g, members, outputs = cg.one_kernel(GATHER.CASES["embed_pos_norm_int64"])
    spec = lower_triton(g, members, outputs)
    assert len(spec.groups) == 1


def test_out_of_range_indices_are_clamped():
    b = Builder()
    data, ids = b.input((5, 3)), b.input((4,), "int64")
    out = GATHER.take(b, data, ids, 0)
    g, members, outputs = cg.finish(b, out)
    kernel = _kernel(g, members, outputs)
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    got = kernel.run([x, np.array([7, -9, 4, -5], np.int64)])[0].cpu().numpy()
    np.testing.assert_array_equal(got, x[[4, 0, 4, 0]])
