"""A 1x1 convolution of upsampled maps runs before the upsampling (rewrite/upsample.py): ONNX
models with Resize (nearest, linear, cubic; several coordinate modes) feeding a 1x1 convolution,
directly or through a channel concat, match onnxruntime after the rewrite, and the convolution
really moved (it reads the small map). Convolutions that do not commute with the resize (3x3,
strided), downsampling, a resize with other readers, a channel-scaling resize and a convolution
that widens a tiny map (the upsampling would carry more than the convolution saves) are left alone."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from kernorch.ir.prims import Op

from .onnx_oracle import model_of, rewrite_matches_ort

RULE = "conv_before_upsample"


def _model(pieces, cout=6, kernel=1, stride=1, bias=True, extra_output=False, pads=None, seed=0):
    """pieces: (channels, (h, w), resize or None): resize = (mode, coordinate mode, (H, W), channel scale)."""
    rng = np.random.default_rng(seed)
    inputs, nodes, inits, cat = [], [], [], []
    for i, (c, (h, w), resize) in enumerate(pieces):
        name = f"x{i}"
        inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, c, h, w]))
        if resize is None:
            cat.append(name)
            continue
        mode, coords, size, cscale = resize
        inits.append(numpy_helper.from_array(np.array([1, c * cscale, *size], np.int64), f"size{i}"))
        attrs = {"mode": mode, "coordinate_transformation_mode": coords}
        if mode == "nearest":
            attrs["nearest_mode"] = "floor"
        nodes.append(helper.make_node("Resize", [name, "", "", f"size{i}"], [f"up{i}"], **attrs))
        cat.append(f"up{i}")
    cin = sum(c * (r[3] if r else 1) for c, _, r in pieces)
    inits.append(numpy_helper.from_array(rng.standard_normal((cout, cin, kernel, kernel)).astype(np.float32), "w"))
    conv_in = cat[0]
    if len(cat) > 1:
        nodes.append(helper.make_node("Concat", cat, ["cat"], axis=1))
        conv_in = "cat"
    conv_inputs = [conv_in, "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b"))
        conv_inputs.append("b")
    nodes.append(helper.make_node("Conv", conv_inputs, ["y"], kernel_shape=[kernel, kernel], strides=[stride, stride],
                                  pads=[kernel // 2 if pads is None else pads] * 4))
    nodes.append(helper.make_node("Relu", ["y"], ["out"]))
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(cat[-1], TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "up", inputs, outputs, inits)
    return model_of(graph)


def _check(model, fired: int):
    return rewrite_matches_ort(model, RULE, fired)


def _conv_inputs(g):
    return sorted(g.types[p.inputs[0]].shape[2:] for p in g.prims if p.op is Op.CONV)


RESIZES = [
    ("linear", "half_pixel"),
    ("linear", "align_corners"),
    ("linear", "pytorch_half_pixel"),
    ("nearest", "asymmetric"),
    ("cubic", "half_pixel"),
]


@pytest.mark.parametrize("mode,coords", RESIZES)
def test_segmentation_head_fuse_moves_before_each_upsampling(mode, coords):
    model = _model([(5, (4, 4), (mode, coords, (16, 16), 1)), (3, (8, 8), (mode, coords, (16, 16), 1)),
                    (4, (16, 16), None)])
    out = _check(model, 1)
    assert _conv_inputs(out) == [(4, 4), (8, 8), (16, 16)]


@pytest.mark.parametrize("bias", [True, False])
def test_single_upsampled_input_and_every_piece_upsampled(bias):
    out = _check(_model([(7, (5, 3), ("linear", "half_pixel", (11, 9), 1))], cout=4, bias=bias), 1)
    assert _conv_inputs(out) == [(5, 3)]
    out = _check(_model([(3, (4, 4), ("linear", "align_corners", (9, 9), 1)),
                         (2, (2, 2), ("nearest", "asymmetric", (9, 9), 1))], bias=bias), 1)
    assert _conv_inputs(out) == [(2, 2), (4, 4)]


@pytest.mark.parametrize("case", ["3x3", "3x3 unpadded", "strided", "downsampling", "other reader", "no resize", "widening"])
def test_left_alone(case):
    pieces = [(4, (4, 4), ("linear", "half_pixel", (8, 8), 1)), (3, (8, 8), None)]
    kwargs = {}
    if case == "3x3":
        kwargs["kernel"] = 3
    elif case == "3x3 unpadded":
        kwargs["kernel"], kwargs["pads"] = 3, 0
    elif case == "strided":
        kwargs["stride"] = 2
    elif case == "downsampling":
        pieces[0] = (4, (16, 16), ("linear", "half_pixel", (8, 8), 1))
    elif case == "other reader":
        pieces = pieces[::-1]
        kwargs["extra_output"] = True
    elif case == "widening":  # 2 -> 64 channels: the upsampling would carry 32x more than it saves
        pieces = [(2, (4, 4), ("linear", "half_pixel", (8, 8), 1))]
        kwargs["cout"] = 64
    else:
        pieces[0] = (4, (8, 8), None)
    _check(_model(pieces, **kwargs), 0)


def test_channel_scaling_resize_is_left_alone():
    """A Resize that also scales channels mixes them: it does not commute with the convolution."""
    _check(_model([(2, (4, 4), ("nearest", "asymmetric", (8, 8), 2)), (3, (8, 8), None)]), 0)
