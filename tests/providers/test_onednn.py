"""Fused oneDNN linear kernels (the torch provider's ``onednn`` variant) against the reference
interpreter: convolutions (plain, strided, grouped, depthwise, odd sizes) and matmuls, each with
bias / activation / residual / per-channel affine epilogues, read and written in NCHW or through
the NHWC side of a layout pair (rewrite/layouts.py)."""

import numpy as np
import pytest
import torch

from kernorch.ir import interp
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.providers import TorchProvider
from kernorch.rewrite.layouts import channels_last_pairs

RNG = np.random.default_rng(7)


def _const(b, shape):
    return b.constant(RNG.standard_normal(shape).astype(np.float32))


def _epilogue(b, y, kind: str, channel_shape):
    if kind == "none":
        return y
    if kind == "bias":
        return b.binary(Op.ADD, y, _const(b, channel_shape))
    if kind == "relu":
        return b.unary(Op.RELU, b.binary(Op.ADD, y, _const(b, channel_shape)))
    if kind == "sigmoid":
        return b.unary(Op.SIGMOID, y)
    if kind == "residual":
        return b.binary(Op.ADD, y, b.input(b.shape(y)))
    if kind == "residual_relu":
        return b.unary(Op.RELU, b.binary(Op.ADD, b.input(b.shape(y)), y))
    if kind == "sub":
        return b.binary(Op.SUB, y, b.input(b.shape(y)))
    if kind == "affine":
        return b.binary(Op.ADD, b.binary(Op.MUL, y, _const(b, channel_shape)), _const(b, channel_shape))
    raise ValueError(kind)


CONVS = {  # name: (x shape, out channels, kernel, strides, pads, groups)
    "3x3": ((1, 8, 10, 10), 16, 3, (1, 1), (1, 1, 1, 1), 1),
    "1x1_odd": ((2, 5, 7, 9), 3, 1, (1, 1), (0, 0, 0, 0), 1),
    "strided": ((1, 6, 17, 15), 10, 3, (2, 2), (1, 1, 1, 1), 1),
    "grouped": ((1, 8, 9, 9), 12, 3, (1, 1), (1, 1, 1, 1), 4),
    "depthwise": ((1, 16, 12, 11), 16, 3, (1, 1), (1, 1, 1, 1), 16),
    "asym_pads": ((1, 4, 8, 8), 4, 3, (1, 1), (0, 1, 2, 1), 1),
}
EPILOGUES = ["none", "bias", "relu", "sigmoid", "residual", "residual_relu", "sub", "affine"]


def _conv_graph(name: str, epilogue: str, conv_bias: bool):
    shape, cout, k, strides, pads, groups = CONVS[name]
    b = Builder()
    x = b.input(shape)
    w = _const(b, (cout, shape[1] // groups, k, k))
    bias = _const(b, (cout,)) if conv_bias else None
    y = b.conv(x, w, bias, ConvAttrs(strides, pads, (1, 1), groups))
    b.g.outputs = [_epilogue(b, y, epilogue, (1, cout, 1, 1))]
    return b.g


def _matmul_graph(epilogue: str, batched: bool):
    b = Builder()
    x = b.input((2, 13, 24) if batched else (13, 24))
    y = b.matmul(x, _const(b, (24, 9)))
    b.g.outputs = [_epilogue(b, y, epilogue, (9,))]
    return b.g


def _sides(g):
    """Member sets of the paired graph: NCHW in and out; NHWC in; NHWC out."""
    prims = g.prims
    views = [i for i, p in enumerate(prims) if p.op is Op.VIEW]
    everything = [p.output for p in prims]
    sides = {"nchw": (everything, list(g.outputs))}
    if views and views[0] == 0:  # the input pair's first view: start from its NHWC value
        sides["nhwc_in"] = (everything[1:], list(g.outputs))
    conv = next(i for i, p in enumerate(prims) if p.op is Op.CONV)
    if conv + 1 < len(prims) and prims[conv + 1].op is Op.VIEW:  # end at the output pair's NHWC value
        sides["nhwc_out"] = (everything[:conv + 2], [prims[conv + 1].output])
    return sides


def _check(g, members, outputs, expect_fused: str | None = None):
    prov = TorchProvider("onednn", threads=2)
    assert prov.can_run(g, members, outputs) is True
    kern = prov.build(g, members, outputs)
    sub = g.subgraph(members, outputs)
    feeds = {v: (g.constants[v] if v in g.constants else RNG.standard_normal(g.types[v].shape).astype(np.float32))
             for v in sub.inputs}
    want = interp.run(sub, {v: a for v, a in feeds.items() if v in sub.inputs and v not in sub.constants})
    got = kern.run([torch.from_numpy(np.ascontiguousarray(feeds[v])) for v in kern.inputs])
    for v, t in zip(kern.outputs, got):
        ref = want[v]
        assert t.shape == ref.shape
        np.testing.assert_allclose(t.numpy(), ref, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(ref).max())))
    assert "oneDNN" in kern.detail
    if expect_fused:
        assert expect_fused in kern.detail, kern.detail
    return kern


FUSED = {"relu": "relu fused", "sigmoid": "sigmoid fused", "residual": "add fused", "residual_relu": "add+relu fused",
         "sub": "sub fused"}


@pytest.mark.parametrize("name", sorted(CONVS))
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_conv_epilogues_in_both_layouts(name, epilogue):
    g, _ = channels_last_pairs(_conv_graph(name, epilogue, conv_bias=name != "1x1_odd"))
    for side, (members, outputs) in _sides(g).items():
        fused = FUSED.get(epilogue) if side != "nhwc_out" and CONVS[name][4][:2] == CONVS[name][4][2:] else None
        _check(g, members, outputs, fused)


@pytest.mark.parametrize("epilogue", ["none", "bias", "relu", "sigmoid", "residual", "sub", "affine"])
@pytest.mark.parametrize("batched", [False, True])
def test_matmul_epilogues(epilogue, batched):
    g = _matmul_graph(epilogue, batched)
    _check(g, [p.output for p in g.prims], list(g.outputs),
           {"relu": "relu fused", "sigmoid": "sigmoid fused", "residual": "add fused", "sub": "sub fused"}.get(epilogue))


def test_nhwc_output_is_channels_last_memory():
    """A kernel that ends at the NHWC side writes NHWC order: element (n, h, w, c) of its output
    is channel c of the convolution at (h, w)."""
    g, _ = channels_last_pairs(_conv_graph("3x3", "relu", conv_bias=True))
    members, outputs = _sides(g)["nhwc_out"]
    kern = _check(g, members, outputs)
    assert tuple(g.types[outputs[0]].shape) == (1, 10, 10, 16)
    assert kern.run([torch.from_numpy(np.ascontiguousarray(
        g.constants.get(v, RNG.standard_normal(g.types[v].shape).astype(np.float32)))) for v in kern.inputs])[0].shape \
        == (1, 10, 10, 16)


def test_refuses_computed_weights():
    b = Builder()
    x, w = b.input((1, 4, 6, 6)), b.input((4, 4, 3, 3))
    b.g.outputs = [b.conv(x, w, None, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1))]
    assert "constant" in TorchProvider("onednn").can_run(b.g, [p.output for p in b.g.prims], b.g.outputs)


def test_kn_own_plan_with_onednn_kernels_saves_and_loads(tmp_path):
    """A regions-off compile with oneDNN kernels in its plan: matches onnxruntime, and the saved plan
    loads (kernels rebuilt from their prims) to bit-identical results."""
    import onnxruntime as ort

    import kernorch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(8, 8, 5, padding=2, groups=2)  # grouped, 100 taps: no C stencil or GEMM
            self.c2 = torch.nn.Conv2d(8, 8, 1)
            self.fc = torch.nn.Linear(8, 5)

        def forward(self, x):
            y = torch.relu(self.c1(x))
            y = torch.relu(self.c2(y) + y)
            return torch.sigmoid(self.fc(y.mean(dim=(2, 3))))

    torch.manual_seed(0)
    net, x = Net().eval(), torch.randn(2, 8, 10, 10)
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, (x,), str(path), dynamo=False, input_names=["x"])
    m = kernorch.compile(str(path), threads=2, regions=False, progress=False, db=tmp_path / "db.sqlite",
                         providers=("torch_onednn",))
    # which linear kernels oneDNN wins is measured (kernorch's own linear kernels compete); the
    # classifier head's matmul + bias + sigmoid is one kernel only oneDNN can run
    assert any(i.provider == "torch_onednn" for i in m.executable.infos)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(m(x.numpy()), want, rtol=1e-4, atol=1e-5)
    loaded = kernorch.load(m.save(tmp_path / "saved"))
    assert [i.provider for i in loaded.executable.infos] == [i.provider for i in m.executable.infos]
    np.testing.assert_array_equal(loaded(x.numpy()), m(x.numpy()))


@pytest.mark.parametrize("variant", ["eager", "onednn"])
def test_conv_with_a_concatenation_runs_on_the_own_pool(variant):
    """EfficientViT's multi-scale aggregation (a convolution concatenated with its input) and ViT's
    class token (concatenated before the position add) are one PyTorch kernel, not a call into a
    runtime with a pool of its own."""
    b = Builder()
    x = b.input((1, 6, 7, 7))
    y = b.conv(x, _const(b, (6, 1, 5, 5)), None, ConvAttrs((1, 1), (2, 2, 2, 2), (1, 1), 6))
    cat = b.concat([x, y], 1)
    b.g.outputs = [b.binary(Op.ADD, cat, b.input((1, 12, 7, 7)))]
    g = b.g
    members, outputs = [p.output for p in g.prims], list(g.outputs)
    prov = TorchProvider(variant, threads=2)
    assert prov.can_run(g, members, outputs) is True
    kern = prov.build(g, members, outputs)
    feeds = {v: RNG.standard_normal(g.types[v].shape).astype(np.float32) for v in g.inputs}
    want = interp.run(g, feeds)[outputs[0]]
    got = kern.run([torch.from_numpy(feeds[v]) if v in feeds else torch.from_numpy(np.array(g.constants[v]))
                    for v in kern.inputs])[0]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)
