"""The CUDA measurer judges kernels by the shared oracle (kernorch/ir/oracle.py): a kernel off by a
relative 1e-5 passes the default float32 policy and fails once the policy is tightened, both in
``verify_on_device`` (the plan's final check) and in the measurer's verify-then-time step."""

import numpy as np
import pytest
import torch

from kernorch.ir import oracle
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op
from kernorch.orchestrate.tuning_db import TuningDB

OFF = 1 + 1e-5


class _OffKernel:
    """A stand-in device kernel: exp, off by a relative 1e-5."""

    capturable = False

    def __init__(self, x, y):
        self.inputs, self.outputs = [x], [y]

    def run(self, ins):
        outs = [torch.empty_like(ins[0])]
        self._run(ins, outs)
        return outs

    def _run(self, ins, outs):
        torch.mul(torch.exp(ins[0]), OFF, out=outs[0])


@pytest.mark.parametrize("tight", [False, True])
def test_the_cuda_measurer_uses_the_policy(monkeypatch, tmp_path, tight):
    from kernorch.targets.cuda_measure import CudaMeasuredCost, verify_on_device

    if tight:
        monkeypatch.setitem(oracle.REL_TOL, "float32", 1e-6)
    b = Builder()
    x = b.input((4, 8))
    y = b.unary(Op.EXP, x)
    b.g.outputs = [y]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    kern = _OffKernel(x, y)
    reason = verify_on_device(b.g, kern, {y}, device)
    assert (reason is None) == (not tight), reason
    cost = CudaMeasuredCost(b.g, TuningDB(tmp_path / "db.sqlite"), device)
    rec, (feeds, ref) = cost._measure_kernel("triton", kern, {y}, None)
    assert rec.status == ("verify_failed" if tight else "ok"), rec
    np.testing.assert_array_equal(ref[y], np.exp(feeds[x]))
