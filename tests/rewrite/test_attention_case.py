"""The paper's attention case on a ViT-Tiny attention block (bench/attention_demo.py builds it):
Korch's rewrites turn the softmax's row sum into a matmul with a ones column, move the division
past ``@ V`` and merge the two matmuls of ``exp(...)`` into one; the optimal plan of the rewritten
graph has fewer kernels than without rewrites, and both compiled models match the module."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `bench` lives at the repo root, outside the package
    sys.path.insert(0, str(ROOT))

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

import kernorch  # noqa: E402
from bench.attention_demo import build_attention  # noqa: E402
from kernorch.frontend.torch_import import import_torch  # noqa: E402
from kernorch.ir.prims import Op  # noqa: E402
from kernorch.rewrite import ALL_RULES, DEFAULT_RULES, apply_rewrites  # noqa: E402


@pytest.fixture(scope="module")
def block():
    module, inputs = build_attention(seed=0)
    with torch.no_grad():
        ref = module(*inputs).numpy()
    return module, inputs, ref


def test_rewrites_give_one_matmul_of_exp_with_ones_and_v(block):
    module, inputs, _ = block
    g, _ = import_torch(module, inputs)
    out, report = apply_rewrites(g, ALL_RULES, check=True)
    assert report["merge_linear"] == 1  # q, k, v projections
    assert report["sum_to_matmul"] == 1 and report["div_past_matmul"] == 1 and report["merge_linear_concat"] == 1
    ops = [p.op for p in out.prims]
    assert Op.SUM not in ops and ops.count(Op.MATMUL) == 4  # qkv, q k^T, exp @ [ones | V], proj
    by_out = {p.output: p for p in out.prims}
    (exp,) = [p for p in out.prims if p.op is Op.EXP]
    (pv,) = [p for p in out.prims if p.op is Op.MATMUL and p.inputs[0] == exp.output]
    assert out.types[pv.output].shape == (1, 3, 197, 65)  # 64 columns of V and the row sum
    assert by_out[pv.inputs[1]].op is Op.CONCAT


def test_rewritten_plan_has_fewer_kernels_and_both_match_the_module(block, tmp_path):
    module, inputs, ref = block
    x = inputs[0].numpy()
    kernels = {}
    for name, rules in (("none", ()), ("default", DEFAULT_RULES), ("all", ALL_RULES)):
        model = kernorch.compile(module, inputs, strategy="optimal", cost="model", rewrites=rules,
                                 db=tmp_path / "db.sqlite", threads=2, progress=False)
        got = model(x)
        assert np.abs(got - ref).max() <= 1e-4 * max(1.0, float(np.abs(ref).max())), name
        kernels[name] = len(model.kernels)
    assert kernels["all"] < kernels["none"] and kernels["default"] < kernels["none"], kernels
