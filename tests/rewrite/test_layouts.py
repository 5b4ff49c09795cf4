"""Layout pairs (rewrite/layouts.py): the pass changes no value, pairs every 2-D convolution's
activation and result once, and a compiled model with them matches onnxruntime whichever side
of each pair its kernels cut at."""

import numpy as np
import onnxruntime as ort
import pytest
import torch

import kernorch
from kernorch.ir import interp
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.orchestrate.from_graph import dag_from_graph
from kernorch.orchestrate.knobs import Knobs
from kernorch.orchestrate.partition import partition
from kernorch.rewrite.layouts import activation_cuts, channels_last_pairs


def _two_convs():
    rng = np.random.default_rng(0)
    b = Builder()
    x = b.input((1, 3, 9, 9))
    w1 = b.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    w2 = b.constant(rng.standard_normal((4, 4, 1, 1)).astype(np.float32))
    y = b.unary(Op.RELU, b.conv(x, w1, None, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1)))
    z = b.conv(y, w2, None, ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1))
    b.g.outputs = [b.binary(Op.ADD, z, y), y]
    return b.g


def test_pairs_change_no_value():
    g = _two_convs()
    paired, n = channels_last_pairs(g)
    assert n == 4  # each convolution's activation (x, relu's output) and result
    feeds = {g.inputs[0]: np.random.default_rng(1).standard_normal((1, 3, 9, 9)).astype(np.float32)}
    want, got = interp.run(g, feeds), interp.run(paired, feeds)
    for v in g.outputs:
        np.testing.assert_array_equal(want[v], got[v])
    assert paired.outputs == g.outputs and paired.inputs == g.inputs
    nhwc = [p for p in paired.prims if p.op is Op.VIEW and paired.types[p.output].shape[-1] == 4
            and paired.types[p.output].shape[1] == 9]
    assert nhwc, "no NHWC value of a convolution result in the paired graph"


def test_conv_result_feeding_a_conv_is_paired_once():
    g = _two_convs()
    paired, _ = channels_last_pairs(g)
    conv2 = [p for p in paired.prims if p.op is Op.CONV][1]
    chain = paired.producers()[conv2.inputs[0]]
    assert chain.op is Op.VIEW  # conv 2 reads a view back of relu's output


def test_every_reader_of_a_paired_value_has_its_own_view_back():
    """The residual add reads relu's output through the same NHWC view as conv 2, so one
    kernel writing channels-last memory can serve both."""
    g = _two_convs()
    paired, _ = channels_last_pairs(g)
    conv2 = [p for p in paired.prims if p.op is Op.CONV][1]
    add = next(p for p in paired.prims if p.op is Op.ADD)
    producers = paired.producers()
    back_for_add, back_for_conv = producers[add.inputs[1]], producers[conv2.inputs[0]]
    assert back_for_add.op is back_for_conv.op is Op.VIEW
    assert back_for_add.output != back_for_conv.output  # each reader has its own view back ...
    assert back_for_add.inputs == back_for_conv.inputs  # ... of one shared NHWC view
    assert paired.outputs[1] == g.outputs[1]  # the graph output stays the plain value


def _squeeze_excite():
    """conv -> relu -> a = relu * sigmoid(relu) (read by a pooling and a scale), then conv(a * se):
    the shape of MobileNetV3's blocks."""
    rng = np.random.default_rng(0)
    b = Builder()
    x = b.input((1, 4, 6, 6))
    w1, w2 = (b.constant(rng.standard_normal((4, 4, 1, 1)).astype(np.float32)) for _ in range(2))
    one = ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1)
    r = b.unary(Op.RELU, b.conv(x, w1, None, one))
    a = b.binary(Op.MUL, r, b.unary(Op.SIGMOID, r))
    se = b.unary(Op.SIGMOID, b.reduce(Op.SUM, a, (2, 3)))
    b.g.outputs = [b.conv(b.binary(Op.MUL, a, se), w2, None, one)]
    return b.g, r, a


def test_activation_read_by_a_pooling_and_a_scale_is_paired():
    """Kernels end at the activation (a reduction and a scale read it): pairing it lets the
    kernel before it write channels-last; values inside the chain stay unpaired."""
    g, r, a = _squeeze_excite()
    assert activation_cuts(g) == {r, a}  # relu's output has two readers too
    paired, n = channels_last_pairs(g)
    assert n == 6  # two convolutions' activations and results, relu's output and a
    feeds = {g.inputs[0]: np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)}
    np.testing.assert_array_equal(interp.run(g, feeds)[g.outputs[0]], interp.run(paired, feeds)[g.outputs[0]])
    nhwc_of = {p.inputs[0] for p in paired.prims if p.op is Op.VIEW and paired.types[p.output].shape == (1, 6, 6, 4)}
    assert {r, a} <= nhwc_of


def _residual_blocks(blocks: int):
    """s -> relu(conv(relu(conv(s))) + s), repeated: the stream is the only value live between
    blocks."""
    rng = np.random.default_rng(0)
    b = Builder()
    s = b.input((1, 8, 6, 6))
    same = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1)
    for _ in range(blocks):
        w1, w2 = (b.constant(rng.standard_normal((8, 8, 3, 3)).astype(np.float32)) for _ in range(2))
        t = b.unary(Op.RELU, b.conv(s, w1, None, same))
        s = b.unary(Op.RELU, b.binary(Op.ADD, b.conv(t, w2, None, same), s))
    b.g.outputs = [s]
    return b.g


def test_cuts_between_blocks_fall_on_the_nhwc_view():
    """Segment cuts force their crossing values into memory; crossing on the NHWC view leaves
    every reader in the next segment free to read channels-last or convert."""
    paired, _ = channels_last_pairs(_residual_blocks(6))
    segments = partition(dag_from_graph(paired), max_segment_nodes=24, max_cut_width=4, max_kernel_nodes=12)
    crossing = [v for seg in segments for v in seg.cut_values]
    assert len(segments) > 2 and crossing
    producers = paired.producers()
    for v in crossing:
        assert producers[v].op is Op.VIEW and paired.types[v].shape == (1, 6, 6, 8), producers[v]


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.c3 = torch.nn.Conv2d(8, 8, 1)

    def forward(self, x):
        y = torch.relu(self.c1(x))
        z = torch.sigmoid(self.c2(y)) * y  # read by a pooling and a scale: paired (activation_cuts)
        return torch.relu(self.c3(z * torch.sigmoid(z.mean((2, 3), keepdim=True))) + y)


@pytest.mark.parametrize("layouts", [True, False])
def test_compiled_with_and_without_pairs_matches_onnxruntime(tmp_path, layouts):
    torch.manual_seed(0)
    net, x = _Net().eval(), torch.randn(1, 3, 12, 12)
    path = tmp_path / "net.onnx"
    torch.onnx.export(net, (x,), str(path), dynamo=False, input_names=["x"])
    m = kernorch.compile(str(path), threads=2, regions=False, progress=False, db=tmp_path / "db.sqlite",
                         knobs=Knobs(layouts=layouts))
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    np.testing.assert_allclose(m(x.numpy()), want, rtol=1e-4, atol=1e-4)
    assert (m.report.rewrites.get("channels_last_pairs", 0) == 7) == layouts
    if layouts:  # saved and loaded, the plan with its layout choices gives the same result
        m2 = kernorch.load(m.save(tmp_path / "saved"))
        np.testing.assert_array_equal(m2(x.numpy()), m(x.numpy()))
