"""int8 linear steps (providers/onednn_int8.py) against the reference interpreter: a quantized
convolution or matmul (a QDQ node imported, rewrite/quantized.py, the layout pairs) runs as one
int8 oneDNN call with its scale, bias, ReLU and requantization, and matches the interpreter on the
oracle's feeds and on full-range uint8 activations (a quantized output within one step at 1% of
its elements, a float one at float32's tolerance)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernorch.codegen import isa
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp, oracle
from kernorch.providers import TorchProvider, verify
from kernorch.ir.tensors import to_torch
from kernorch.rewrite.layouts import channels_last_pairs
from kernorch.rewrite.pipeline import apply_rewrites
from kernorch.rewrite.quantized import integer_linear

needs_int8 = pytest.mark.skipif(not isa.host().int8, reason="this CPU has no int8 dot products (VNNI, AMX)")
RNG = np.random.default_rng(3)


def _qdq_model(kind: str, relu: bool, requant: bool, groups: int = 1, stride: int = 1, k: int = 3):
    """DequantizeLinear(x: uint8) -> Conv / MatMul(DequantizeLinear(per-channel int8 weight), bias)
    -> [Relu] -> [QuantizeLinear to uint8]."""
    if kind == "conv":
        cin, cout, x_shape = 8, 16, [1, 8, 9, 9]
        w = RNG.integers(-127, 128, (cout, cin // groups, k, k)).astype(np.int8)
        axis, n = 0, cout
    else:
        cin, cout, x_shape = 24, 10, [6, 24]
        w = RNG.integers(-127, 128, (cin, cout)).astype(np.int8)
        axis, n = 1, cout
    inits = [numpy_helper.from_array(w, "wq"),
             numpy_helper.from_array(RNG.uniform(0.002, 0.01, n).astype(np.float32), "ws"),
             numpy_helper.from_array(np.zeros(n, np.int8), "wz"),
             numpy_helper.from_array(np.asarray(0.05, np.float32), "xs"),
             numpy_helper.from_array(np.asarray(120, np.uint8), "xz"),
             numpy_helper.from_array(np.asarray(0.04, np.float32), "ys"),
             numpy_helper.from_array(np.asarray(7 if relu else 128, np.uint8), "yz"),
             numpy_helper.from_array(RNG.standard_normal(n).astype(np.float32), "bias")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=axis)]
    if kind == "conv":
        nodes.append(helper.make_node("Conv", ["xd", "wd", "bias"], ["y0"], pads=[k // 2] * 4, group=groups,
                                      strides=[stride, stride]))
    else:
        nodes += [helper.make_node("MatMul", ["xd", "wd"], ["m"]), helper.make_node("Add", ["m", "bias"], ["y0"])]
    last = "y0"
    if relu:
        nodes.append(helper.make_node("Relu", [last], ["r"]))
        last = "r"
    if requant:
        nodes.append(helper.make_node("QuantizeLinear", [last, "ys", "yz"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    graph = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", TensorProto.UINT8, x_shape)],
                              [helper.make_empty_tensor_value_info("y")], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _kernel_graph(model, layouts: bool):
    g, _ = import_onnx(model)
    g, n = integer_linear(g)
    assert n == 1
    g, _ = apply_rewrites(g)
    return channels_last_pairs(g)[0] if layouts else g


CASES = {"conv3x3": dict(kind="conv"), "conv1x1_s2": dict(kind="conv", k=1, stride=2),
         "depthwise": dict(kind="conv", groups=8), "matmul": dict(kind="matmul")}


@needs_int8
@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("requant", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_quantized_linear_is_one_int8_step(case, requant, relu):
    model = _qdq_model(relu=relu, requant=requant, **CASES[case])
    for layouts in ([False, True] if CASES[case]["kind"] == "conv" else [False]):
        g = _kernel_graph(model, layouts)
        members, outputs = [p.output for p in g.prims], list(g.outputs)
        prov = TorchProvider("onednn", threads=2)
        assert prov.can_run(g, members, outputs) is True
        kern = prov.build(g, members, outputs)
        assert "oneDNN int8" in kern.detail and ("requantized to u8" in kern.detail) == requant, kern.detail
        ok, err, detail = verify(kern, g, members, outputs)
        assert ok, detail
        x = RNG.integers(0, 256, g.types[g.inputs[0]].shape).astype(np.uint8)  # the full uint8 range
        (got,) = kern.run([to_torch(x)])
        want = interp.run(g, {g.inputs[0]: x})[g.outputs[0]]
        ok, err, detail = oracle.check(outputs, [got], {outputs[0]: want}, quantized=oracle.quantizes(g, members))
        assert ok, detail


def test_an_off_by_one_everywhere_is_not_quantization_rounding():
    ref = np.arange(200, dtype=np.uint8).reshape(10, 20)
    assert oracle.compare(ref + 1, ref, quantized=True)[0] is False
    near = ref.copy()
    near[0, 0] += 1
    assert oracle.compare(near, ref, quantized=True)[0] is True
    assert oracle.compare(near, ref)[0] is False
    far = ref.copy()
    far[0, 0] += 2
    assert oracle.compare(far, ref, quantized=True)[0] is False


def test_a_quantized_kernels_float_output_may_be_one_step_off_at_few_elements():
    ref = np.linspace(-1, 1, 400, dtype=np.float32)
    one = ref.copy()
    one[7] += 1 / 127  # one int8 step of the output's scale, at one element
    assert oracle.compare(one, ref, quantized=True)[0] is True and oracle.compare(one, ref)[0] is False
    assert oracle.compare(ref + 1 / 127, ref, quantized=True)[0] is False  # everywhere: a wrong kernel
    big = ref.copy()
    big[7] += 0.1  # far more than a step
    assert oracle.compare(big, ref, quantized=True)[0] is False


@needs_int8
@pytest.mark.parametrize("name", ["block", "convnet"])
def test_every_kernel_around_a_quantized_linear_prim_verifies(name):
    """Windows of consecutive prims around each linear prim of a quantized model, as the
    enumeration cuts them: whatever the step takes in passing (a dequantized activation another
    prim also reads, a partial epilogue), the kernel matches the interpreter."""
    from kernorch.rewrite.pipeline import apply_rewrites
    from tests.frontend.qdq_nets import qdq_model

    g, _ = import_onnx(qdq_model(name))
    g, _ = apply_rewrites(integer_linear(g)[0])
    prov, readers, int8_steps = TorchProvider("onednn", threads=2), g.consumers(), 0
    linear = [i for i, p in enumerate(g.prims) if p.op.name in ("CONV", "MATMUL")]
    for i in linear:
        for lo in range(max(0, i - 5), i + 1):
            for hi in range(i + 1, min(len(g.prims), i + 12) + 1):
                members = [p.output for p in g.prims[lo:hi]]
                inside = set(members)
                outputs = [v for v in members if v in g.outputs or any(r.output not in inside for r in readers.get(v, []))]
                if prov.can_run(g, members, outputs) is not True:
                    continue
                kern = prov.build(g, members, outputs)
                ok, _, detail = verify(kern, g, members, outputs)
                assert ok, f"prims {lo}..{hi}: {kern.detail}: {detail}"
                int8_steps += "oneDNN int8" in kern.detail
    assert int8_steps > len(linear)


@needs_int8
def test_int8_kernel_seeds_are_whole_int8_steps():
    """``int8_kernels`` offers, per quantized convolution / matmul, the kernel from its uint8
    activation to its requantized uint8 result: the torch provider runs each as one int8 call
    that requantizes, and it matches the interpreter."""
    from kernorch.orchestrate.candidate import multi_output
    from kernorch.orchestrate.from_graph import dag_from_graph
    from kernorch.providers.onednn_int8 import int8_kernels
    from kernorch.rewrite.pipeline import apply_rewrites
    from tests.frontend.qdq_nets import qdq_model

    g, _ = import_onnx(qdq_model("convnet"))
    g, _ = channels_last_pairs(apply_rewrites(integer_linear(g)[0])[0])
    seeds = int8_kernels(g)
    assert len(seeds) == 4  # three convolutions and the classifier
    dag, prov = dag_from_graph(g), TorchProvider("onednn", threads=2)
    requantized = 0
    for seed in seeds:
        cand = multi_output(dag, seed)
        members = sorted(cand.nodes, key=dag.position.__getitem__)
        outputs = sorted(cand.outputs, key=dag.position.__getitem__)
        assert prov.can_run(g, members, outputs) is True
        kern = prov.build(g, members, outputs)
        assert "oneDNN int8" in kern.detail, kern.detail
        requantized += "requantized to u8" in kern.detail
        ok, _, detail = verify(kern, g, members, outputs)
        assert ok, detail
    assert requantized >= 3
