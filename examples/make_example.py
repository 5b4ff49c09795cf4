"""Write examples/tiny_cnn.onnx: a tiny image classifier (conv, relu, layer norm, softmax).

It is built with onnx.helper, not exported from PyTorch, so the file is identical on every machine
and needs nothing beyond the onnx package. Run from anywhere: ``python examples/make_example.py``.
"""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
OUT = Path(__file__).resolve().parent / "tiny_cnn.onnx"


def build() -> onnx.ModelProto:
    rng = np.random.default_rng(0)

    def w(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [
        w("conv1.w", 8, 3, 3, 3), w("conv1.b", 8),
        w("conv2.w", 16, 8, 3, 3, scale=0.1), w("conv2.b", 16),
        numpy_helper.from_array(np.array([1, 16, 64], np.int64), "tokens.shape"),
        numpy_helper.from_array((1 + 0.1 * rng.standard_normal(16)).astype(np.float32), "ln.gamma"),
        w("ln.beta", 16, scale=0.1),
        w("fc.w", 10, 16), w("fc.b", 10),
    ]
    nodes = [
        helper.make_node("Conv", ["input", "conv1.w", "conv1.b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "conv2.w", "conv2.b"], ["c2"], name="conv2", pads=[1, 1, 1, 1],
                         strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Reshape", ["r2", "tokens.shape"], ["t"], name="to_tokens"),      # [1,16,64]
        helper.make_node("Transpose", ["t"], ["tt"], name="channels_last", perm=[0, 2, 1]),  # [1,64,16]
        helper.make_node("LayerNormalization", ["tt", "ln.gamma", "ln.beta"], ["ln"], name="norm", axis=-1,
                         epsilon=1e-5),
        helper.make_node("ReduceMean", ["ln"], ["pooled"], name="pool", axes=[1], keepdims=0),  # [1,16]
        helper.make_node("Gemm", ["pooled", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="kernorch-example")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


if __name__ == "__main__":
    onnx.save(build(), OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")
