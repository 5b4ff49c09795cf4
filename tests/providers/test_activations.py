"""Activations found by what they compute (providers/activations.py) and fused into oneDNN
convolutions and matmuls as post-ops: each ONNX activation, fissioned as the importer does,
after a Conv and after a MatMul by a constant, matches the reference interpreter and is named in
the kernel's notes; chains that are no activation oneDNN has, or whose values are needed
elsewhere, stay separate steps and are still right."""

import math

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp
from kernorch.providers import TorchProvider
from kernorch.providers.activations import _PROBE, identify

RNG = np.random.default_rng(11)

# ONNX activation nodes reading "y" and writing "z" (extra initializers), the label in the notes
ACTIVATIONS = {
    "relu": ([helper.make_node("Relu", ["y"], ["z"])], [], "relu"),
    "sigmoid": ([helper.make_node("Sigmoid", ["y"], ["z"])], [], "sigmoid"),
    "tanh": ([helper.make_node("Tanh", ["y"], ["z"])], [], "tanh"),
    "hardswish": ([helper.make_node("HardSwish", ["y"], ["z"])], [], "hardswish"),
    "hardsigmoid": ([helper.make_node("HardSigmoid", ["y"], ["z"], alpha=1 / 6, beta=0.5)], [], "hardsigmoid"),
    "silu": ([helper.make_node("Sigmoid", ["y"], ["s"]), helper.make_node("Mul", ["y", "s"], ["z"])], [], "swish"),
    "gelu": ([helper.make_node("Gelu", ["y"], ["z"])], [], "gelu"),
    "gelu_tanh": ([helper.make_node("Gelu", ["y"], ["z"], approximate="tanh")], [], "gelu(tanh)"),
    "relu6": ([helper.make_node("Clip", ["y", "lo", "hi"], ["z"])],
              [numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(6, np.float32), "hi")],
              "hardtanh"),
    "leaky_relu": ([helper.make_node("LeakyRelu", ["y"], ["z"], alpha=0.1)], [], "leaky_relu"),
    # GPT-2's NewGELUActivation as exported op by op: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    "gelu_gpt2": ([helper.make_node("Pow", ["y", "three"], ["c"]), helper.make_node("Mul", ["c", "k"], ["kc"]),
                   helper.make_node("Add", ["y", "kc"], ["p"]), helper.make_node("Mul", ["p", "r"], ["q"]),
                   helper.make_node("Tanh", ["q"], ["t"]), helper.make_node("Add", ["t", "one"], ["u"]),
                   helper.make_node("Mul", ["y", "half"], ["h"]), helper.make_node("Mul", ["h", "u"], ["z"])],
                  [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
                   [("three", 3.0), ("k", 0.044715), ("r", math.sqrt(2 / math.pi)), ("one", 1.0), ("half", 0.5)]],
                  "gelu(tanh)"),
}
# not an activation oneDNN fuses: stays a separate step
NOT_FUSED = {
    "mish": ([helper.make_node("Mish", ["y"], ["z"])], []),
    "square_plus_one": ([helper.make_node("Mul", ["y", "y"], ["s"]), helper.make_node("Add", ["s", "one"], ["z"])],
                        [numpy_helper.from_array(np.array(1, np.float32), "one")]),
}


def _model(linear: str, nodes, inits, extra_output: str | None = None):
    if linear == "conv":
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 9, 9])
        w = numpy_helper.from_array(RNG.standard_normal((8, 6, 3, 3)).astype(np.float32), "w")
        b = numpy_helper.from_array(RNG.standard_normal(8).astype(np.float32), "b")
        lin = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])
        z_shape = [1, 8, 9, 9]
    else:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 12])
        w = numpy_helper.from_array(RNG.standard_normal((12, 7)).astype(np.float32), "w")
        b = numpy_helper.from_array(RNG.standard_normal(7).astype(np.float32), "b")
        lin = helper.make_node("Gemm", ["x", "w", "b"], ["y"])
        z_shape = [5, 7]
    outs = [helper.make_tensor_value_info("z", TensorProto.FLOAT, z_shape)]
    if extra_output:
        outs.append(helper.make_tensor_value_info(extra_output, TensorProto.FLOAT, z_shape))
    graph = helper.make_graph([lin] + nodes, "act", [x], outs, [w, b] + inits)
    return onnx.helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _run(model):
    """(the oneDNN kernel over the whole graph, its outputs, the interpreter's)."""
    g, _ = import_onnx(model)
    members = [p.output for p in g.prims]
    kern = TorchProvider("onednn", threads=2).build(g, members, list(g.outputs))
    x = RNG.standard_normal(g.types[g.inputs[0]].shape).astype(np.float32) * 4
    want = interp.run(g, {g.inputs[0]: x})
    got = kern.run([torch.from_numpy(x) if v == g.inputs[0] else torch.from_numpy(np.array(g.constants[v]))
                    for v in kern.inputs])
    for v, t in zip(kern.outputs, got):
        ref = want[v]
        np.testing.assert_allclose(t.numpy(), ref, rtol=2e-5, atol=2e-5 * max(1.0, float(np.abs(ref).max())))
    return kern


@pytest.mark.parametrize("linear", ["conv", "matmul"])
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_is_fused_and_right(linear, name):
    nodes, inits, label = ACTIVATIONS[name]
    kern = _run(_model(linear, nodes, inits))
    assert f"{label} fused" in kern.detail, kern.detail


@pytest.mark.parametrize("linear", ["conv", "matmul"])
@pytest.mark.parametrize("name", sorted(NOT_FUSED))
def test_other_chains_stay_separate_and_right(linear, name):
    nodes, inits = NOT_FUSED[name]
    kern = _run(_model(linear, nodes, inits))
    assert "fused" not in kern.detail.replace("bias add folded", ""), kern.detail


def test_chain_whose_value_is_needed_elsewhere_is_not_fused():
    """SiLU's sigmoid is also a graph output: the activation cannot swallow it."""
    nodes, inits, _ = ACTIVATIONS["silu"]
    kern = _run(_model("conv", nodes, inits, extra_output="s"))
    assert "swish fused" not in kern.detail, kern.detail


def test_identify_by_values():
    x = _PROBE.astype(np.float64)
    assert identify(np.maximum(x, 0).astype(np.float32))[0] == "relu"
    assert identify(np.clip(x, -1.5, 2.5).astype(np.float32)) == ("hardtanh", (-1.5, 2.5), "")
    name, (slope,), _ = identify(np.where(x >= 0, x, 0.2 * x).astype(np.float32))
    assert name == "leaky_relu" and abs(slope - 0.2) < 1e-6
    assert identify((x * x).astype(np.float32)) is None  # no such activation
    assert identify(np.maximum(x, 0.001).astype(np.float32)) is None  # off by 1e-3 near zero
    assert identify(np.clip(x, 0, 1e5).astype(np.float32)) is None  # a relu up to 1e5 only
    assert identify(np.full_like(x, np.nan, dtype=np.float32)) is None
