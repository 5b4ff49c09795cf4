"""QuantizeLinear / DequantizeLinear edges test_quantize.py does not reach: quotients that are a
tie only in float32 (the division must run in the input's precision, as onnxruntime's does),
float16 and bfloat16 inputs through prims whose operands all share one dtype, the default axis,
per-tensor parameters of shape (1,) on a rank-0 input, the variants kept whole run and compared
(blocked scales, int32 input), and the one-line errors."""

import numpy as np
import pytest
from onnx import TensorProto, helper

from onnx_oracle import assert_close, check, feeds_of, node_model, run_ort, run_reference
from kernorch.errors import UnsupportedOpError
from kernorch.fission.registry import NodeContext
from kernorch.fission.rules.quantize import quantize_dequantize
from kernorch.frontend.onnx_import import import_onnx
from kernorch.ir import interp
from kernorch.ir.graph import Builder, Graph
from kernorch.ir.prims import Kind, Op

RNG = np.random.default_rng(44)


def _near_ties(scale: float) -> np.ndarray:
    """float32 x whose quotient by float32(scale) is exactly k + 0.5 in float32 but not in exact
    arithmetic, and rounds to a different integer each way."""
    s = np.float32(scale)
    out = []
    for k in range(-30, 30):
        for d in range(-4, 5):  # x near (k + 0.5) * scale, d float32 steps away
            x = np.float32((k + 0.5) * scale)
            for _ in range(abs(d)):
                x = np.nextafter(x, np.float32(np.sign(d) * np.inf))
            q32, q64 = x / s, np.float64(x) / np.float64(s)
            if q32 == k + 0.5 and np.round(q64) != np.round(q32):
                out.append(x)
    assert len(out) >= 8
    return np.array(out, np.float32)


def _one_dtype_per_elementwise_prim(model) -> None:
    """Every elementwise prim (but casts and selects) reads operands of a single dtype: a
    parameter left in another precision would compute the node in the wider one."""
    g, report = import_onnx(model)
    assert not report.opaque
    for p in g.prims:
        if p.kind is Kind.ELEMENTWISE and p.op not in (Op.CAST, Op.WHERE):
            assert len({g.types[v].dtype for v in p.inputs}) == 1, (p.op, [g.types[v] for v in p.inputs])


def test_quantize_divides_in_float32_per_tensor_and_per_axis():
    s = np.float32(0.1)
    x = _near_ties(0.1)
    x = x[:len(x) // 2 * 2].reshape(2, -1)
    zp = np.asarray(0, np.int8)
    check("QuantizeLinear", {"x": x, "s": np.asarray(s), "zp": zp}, consts=["s", "zp"], opset=13)
    n = x.shape[1]
    check("QuantizeLinear", {"x": x, "s": np.full(n, s), "zp": np.zeros(n, np.int8)}, consts=["s", "zp"], opset=13,
          axis=1)
    for consts in (["s", "zp"], ["zp"]):
        inputs = {"x": x, "s": np.asarray(s), "zp": zp}
        _one_dtype_per_elementwise_prim(node_model("QuantizeLinear", inputs, consts=consts, opset=13))


@pytest.mark.parametrize("per_axis", [False, True])
@pytest.mark.parametrize("runtime_params", [False, True])
def test_float16_through_prims(per_axis, runtime_params):
    x = (RNG.standard_normal((3, 5)) * 20).astype(np.float16)
    s = RNG.uniform(0.1, 1, 5).astype(np.float16) if per_axis else np.asarray(0.5, np.float16)
    zp = np.arange(5).astype(np.int8) if per_axis else np.asarray(3, np.int8)
    consts = [] if runtime_params else ["s", "zp"]
    q = {"x": x, "s": s, "zp": zp}
    check("QuantizeLinear", q, consts=consts, opset=19, axis=1)
    _one_dtype_per_elementwise_prim(node_model("QuantizeLinear", q, consts=consts, opset=19, axis=1))
    d = {"x": RNG.integers(-128, 128, (3, 5)).astype(np.int8), "s": s, "zp": zp}
    check("DequantizeLinear", d, consts=consts, opset=19, axis=1)
    _one_dtype_per_elementwise_prim(node_model("DequantizeLinear", d, consts=consts, opset=19, axis=1))


def test_bfloat16_quantize_is_prims():
    node = helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, [2, 3])],
                              [helper.make_tensor("s", TensorProto.BFLOAT16, [], [0.5]),
                               helper.make_tensor("zp", TensorProto.INT8, [], [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    _one_dtype_per_elementwise_prim(model)
    g, _ = import_onnx(model)
    assert [p.op for p in g.prims] == [Op.DIV, Op.ROUND, Op.ADD, Op.MAX, Op.MIN, Op.CAST]
    assert g.types[g.prims[0].output].dtype == "bfloat16"


def test_per_axis_default_axis_is_1():
    x = RNG.standard_normal((4, 6, 5)).astype(np.float32)
    inputs = {"x": x, "s": RNG.uniform(0.01, 0.1, 6).astype(np.float32), "zp": RNG.integers(-5, 5, 6).astype(np.int8)}
    check("QuantizeLinear", inputs, consts=["s", "zp"], opset=13)
    d = {"x": RNG.integers(-128, 128, (4, 6, 5)).astype(np.int8), "s": inputs["s"], "zp": inputs["zp"]}
    check("DequantizeLinear", d, consts=["s", "zp"], opset=13)


@pytest.mark.parametrize("op", ["QuantizeLinear", "DequantizeLinear"])
def test_one_element_parameters_of_shape_1_on_a_scalar(op):
    """A per-tensor scale and zero point given as shape (1,) broadcast like scalars: a rank-0
    input stays rank 0."""
    x = np.asarray(3.3, np.float32) if op == "QuantizeLinear" else np.asarray(33, np.int8)
    (out,) = check(op, {"x": x, "s": np.asarray([0.5], np.float32), "zp": np.asarray([3], np.int8)},
                   consts=["s", "zp"], opset=13)
    assert out.shape == ()


def _run_whole(op, inputs, consts, opset, oracle=run_ort, **attrs):
    model = node_model(op, inputs, opset=opset, consts=consts, **attrs)
    feeds = feeds_of(model, inputs)
    g, report = import_onnx(model)
    assert report.opaque == {op: 1}
    by_name = {g.name(v): v for v in g.inputs}
    out = interp.run(g, {by_name[k]: v for k, v in feeds.items()})[g.outputs[0]]
    assert_close(out, oracle(model, feeds)[0])


def test_blocked_variants_run_whole_and_match():
    x8 = RNG.integers(-128, 128, (4, 6)).astype(np.int8)
    _run_whole("DequantizeLinear", {"x": x8, "s": RNG.uniform(0.1, 1, (4, 3)).astype(np.float32),
                                    "zp": RNG.integers(-5, 5, (4, 3)).astype(np.int8)}, ["s", "zp"], 21,
               axis=1, block_size=2)
    # a rank-1 input: the blocked scale is rank 1 too, told apart only by block_size
    _run_whole("DequantizeLinear", {"x": x8.reshape(-1)[:8], "s": RNG.uniform(0.1, 1, 4).astype(np.float32)}, ["s"],
               21, axis=0, block_size=2)
    _run_whole("QuantizeLinear", {"x": RNG.standard_normal(8).astype(np.float32),
                                  "s": RNG.uniform(0.01, 0.1, 4).astype(np.float32), "zp": np.zeros(4, np.int8)},
               ["s", "zp"], 21, axis=0, block_size=2)


def test_int32_input_quantize_runs_whole():
    """QuantizeLinear-13 also takes int32 input, which has no prims here (onnxruntime has no
    kernel for it either: the ONNX reference is the oracle)."""
    _run_whole("QuantizeLinear", {"x": RNG.integers(-1000, 1000, (3, 4)).astype(np.int32),
                                  "s": np.asarray(7.0, np.float32), "zp": np.asarray(3, np.int8)}, ["s", "zp"], 13,
               oracle=run_reference)


def _model(op, x_shape, s_shape, **attrs):
    """No shape inference: ONNX's checker would refuse these nodes before kernorch sees them."""
    node = helper.make_node(op, ["x", "s"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, x_shape)],
                              [helper.make_tensor("s", TensorProto.FLOAT, s_shape, np.ones(s_shape).reshape(-1))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("s_shape,attrs,msg", [
    ((5,), {}, "a scale of 5 elements does not match axis 1 of (4, 6, 5)"),
    ((6,), {"axis": 3}, "a scale of 6 elements does not match axis 3 of (4, 6, 5)"),
    ((6,), {"axis": -4}, "a scale of 6 elements does not match axis -4 of (4, 6, 5)"),
    ((4,), {"axis": 2}, "a scale of 4 elements does not match axis 2 of (4, 6, 5)"),
])
def test_a_scale_that_does_not_fit_its_axis_is_rejected(s_shape, attrs, msg):
    with pytest.raises(UnsupportedOpError) as e:
        import_onnx(_model("QuantizeLinear", [4, 6, 5], s_shape, **attrs))
    assert str(e.value).endswith(msg)


def test_a_variant_kept_whole_without_an_inferred_type_is_rejected():
    g = Graph()
    b = Builder(g)
    x, s = b.input((4, 6), "int8"), b.constant(np.ones((4, 3), np.float32))
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1, block_size=2)
    ctx = NodeContext(node, b, [x, s], 21, [None])
    with pytest.raises(UnsupportedOpError) as e:
        quantize_dequantize(ctx)
    assert str(e.value).endswith("this variant has no fission rule and ONNX infers no output type to run it whole")
