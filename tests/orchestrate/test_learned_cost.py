"""The learned cost model's inputs and fit (issue 47): kernel features counted by hand on small
graphs, and gradient-boosted trees recovering a known price function on kernels they never saw."""

import math

import numpy as np
import pytest

from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.orchestrate.features import FEATURE_NAMES, kernel_features


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
