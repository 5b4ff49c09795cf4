"""The learned cost model's inputs and fit (issue 47): kernel features counted by hand on small
graphs, and gradient-boosted trees recovering a known price function on kernels they never saw."""

import math

import numpy as np
import pytest

from kernorch.codegen import templates
from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.orchestrate.features import FEATURE_NAMES, TEMPLATE_NAMES, kernel_features, view_step


def _named(values) -> dict[str, float]:
    assert len(values) == len(FEATURE_NAMES)
    return dict(zip(FEATURE_NAMES, values))


def test_features_of_a_matmul_with_bias_and_softmax_counted_by_hand():
    b = Builder()
    x = b.input((8, 64))
    w = b.constant(np.ones((64, 32), np.float32))
    y = b.matmul(x, w)
    z = b.binary(Op.ADD, y, b.constant(np.ones((32,), np.float32)))
    m = b.reduce(Op.RMAX, z, [1])
    e = b.unary(Op.EXP, b.binary(Op.SUB, z, m))
    s = b.binary(Op.DIV, e, b.reduce(Op.SUM, e, [1]))
    members = {p.output for p in b.g.prims}
    f = _named(kernel_features(b.g, members, [s], threads=2))
    assert f["linear"] == 1 and f["matmuls"] == 1 and f["convs"] == 0
    assert f["reduce"] == 2 and f["transcendental"] == 1 and f["dividing"] == 1
    assert f["log_linear_k"] == 6 and f["log_linear_n"] == 5  # k = 64, n = 32
    assert f["log_reduce_len"] == 5  # rows of 32 reduced to one
    assert f["log_out_elems"] == math.log2(8 * 32) and f["outputs"] == 1 and f["threads"] == 2
    # inputs: x, the weight, the bias (32 floats): bytes read
    assert f["inputs"] == 3 and f["log_bytes_in"] == math.log2(4 * (8 * 64 + 64 * 32 + 32))
    assert f["log_bytes_out"] == math.log2(4 * 8 * 32)
    flops = 2 * 8 * 32 * 64 + sum(b.g.types[p.output].size if p.kind.value == "elementwise"
                                  else b.g.types[p.inputs[0]].size if p.kind.value == "reduce" else 0
                                  for p in b.g.prims if p.op is not Op.MATMUL)
    assert f["log_flops"] == pytest.approx(math.log2(flops))
    assert f["prims"] == len(b.g.prims)


def test_features_of_a_convolution_count_its_taps_and_channels():
    b = Builder()
    x = b.input((1, 8, 10, 10))
    w = b.constant(np.ones((16, 8, 3, 3), np.float32))
    y = b.conv(x, w, None, ConvAttrs(strides=(1, 1), pads=(1, 1, 1, 1), dilations=(1, 1), groups=1))
    f = _named(kernel_features(b.g, {y}, [y], threads=1))
    assert f["convs"] == 1 and f["conv_taps"] == 9 and f["log_linear_n"] == 4  # 16 output channels
    assert f["log_linear_k"] == math.log2(8 * 9)
    assert f["reduce"] == 0 and f["transcendental"] == 0 and f["narrow_values"] == 0


def test_narrow_values_and_casts_are_counted():
    b = Builder()
    x = b.input((4, 4))
    y = b.cast(b.cast(x, "bfloat16"), "float32")
    f = _named(kernel_features(b.g, {p.output for p in b.g.prims}, [y], threads=1))
    assert f["casts"] == 2 and f["narrow_values"] == 1


def test_learned_cost_recovers_a_known_price_function_on_unseen_kernels():
    """Prices made from the features by a known rule (bytes over a bandwidth, a per-provider
    factor, transcendentals costing extra): trained on some kernels, the model ranks others it never
    saw almost perfectly and within a few percent, far better than a fit ignoring the features."""
    pytest.importorskip("sklearn")
    from scipy.stats import spearmanr

    from kernorch.orchestrate.learned_cost import LearnedCost

    rng = np.random.default_rng(0)
    n = 3000
    feats = rng.uniform(0, 1, (n, len(FEATURE_NAMES)))
    col = {name: k for k, name in enumerate(FEATURE_NAMES)}
    feats[:, col["log_bytes_in"]] = rng.uniform(10, 26, n)
    feats[:, col["transcendental"]] = rng.integers(0, 4, n)
    providers = rng.choice(["codegen:c", "torch"], n).tolist()
    seconds = (2 ** feats[:, col["log_bytes_in"]] / 2e10 * (1 + 0.5 * feats[:, col["transcendental"]])
               * np.where(np.array(providers) == "torch", 1.5, 1.0) + 2e-6)
    model = LearnedCost.fit(feats[:2000], providers[:2000], seconds[:2000])
    pred = model.predict(feats[2000:], providers[2000:])
    assert spearmanr(pred, seconds[2000:]).correlation > 0.99
    assert np.median(np.abs(pred - seconds[2000:]) / seconds[2000:]) < 0.1
    assert model.providers == ("codegen:c", "torch")
    # a provider it never saw still gets a finite price (no one-hot column set)
    assert np.isfinite(model.predict(feats[:1], ["openvino"])).all()


def test_views_count_as_transposes_by_their_innermost_step():
    """A transpose reads its innermost neighbours far apart (features f2): counted with that
    distance; a reshape reads them one apart and a broadcast zero apart: neither counted."""
    b = Builder()
    x = b.input((8, 32))
    t = b.permute(x, (1, 0))  # out (32, 8): neighbours along 8 are 32 elements apart in x
    r = b.view(x, layout.reshape((8, 32), (16, 16)))
    s = b.broadcast_to(b.input((1, 32)), (8, 32))
    f = _named(kernel_features(b.g, {t}, [t], threads=1))
    assert f["transposing_views"] == 1 and f["log_view_stride"] == 5
    for v in (r, s):
        f = _named(kernel_features(b.g, {v}, [v], threads=1))
        assert f["transposing_views"] == 0 and f["log_view_stride"] <= 0
    assert view_step(layout.broadcast((1, 32), (8, 32))) == 1 and view_step(layout.broadcast((8, 1), (8, 32))) == 0


def test_reductions_over_the_innermost_axis_or_an_outer_one():
    b = Builder()
    x = b.input((4, 16, 1))  # the trailing 1 is not the innermost axis that counts
    rows, cols = b.reduce(Op.SUM, x, [1]), b.reduce(Op.SUM, x, [0])
    assert _named(kernel_features(b.g, {rows}, [rows], 1))["inner_reduces"] == 1
    f = _named(kernel_features(b.g, {cols}, [cols], 1))
    assert f["inner_reduces"] == 0 and f["outer_reduces"] == 1


@pytest.mark.parametrize("groups,kernel,strides,channels_last,template", [
    (1, 3, 1, True, "winograd"), (1, 1, 1, False, "gemm"), (1, 3, 2, True, "gemm"), (32, 3, 1, True, "depthwise"),
    (32, 3, 1, False, "loops")])
def test_convolutions_name_their_template_stride_and_depthwise(groups, kernel, strides, channels_last, template):
    """Which template writes a convolution turns on its layout: Winograd and the depthwise row
    tiles read channels-last images in place (a transpose inside the kernel)."""
    b = Builder()
    x = b.permute(b.input((1, 12, 12, 32)), (0, 3, 1, 2)) if channels_last else b.input((1, 32, 12, 12))
    w = b.constant(np.ones((32, 32 // groups, kernel, kernel), np.float32))
    pad = kernel // 2
    y = b.conv(x, w, None, ConvAttrs(strides=(strides,) * 2, pads=(pad,) * 4, dilations=(1, 1), groups=groups))
    f = _named(kernel_features(b.g, {p.output for p in b.g.prims}, [y], threads=1))
    assert f["depthwise"] == (groups == 32) and f["log_conv_stride"] == math.log2(strides * strides)
    assert f["log_linear_m"] == math.log2((12 // strides) ** 2)  # output pixels per channel
    assert f["layout_linear"] == f["transposing_views"] == channels_last
    assert [f[f"t_{t}"] for t in TEMPLATE_NAMES] == [float(t == template) for t in TEMPLATE_NAMES]


def test_a_product_reading_through_a_transpose_counts_as_layout_linear():
    b = Builder()
    x = b.input((16, 8))
    w = b.constant(np.ones((16, 4), np.float32))
    y = b.matmul(b.permute(x, (1, 0)), w)  # (8, 16) @ (16, 4)
    members = {p.output for p in b.g.prims}
    assert _named(kernel_features(b.g, members, [y], 1))["layout_linear"] == 1
    assert _named(kernel_features(b.g, {y}, [y], 1))["layout_linear"] == 0  # the transpose outside


def test_template_columns_follow_the_code_generator():
    """Adding a template changes the features: a new column and a new FEATURES_VERSION."""
    assert TEMPLATE_NAMES == tuple(t.name for t in templates.TEMPLATES)
