"""precision="bf16" as a graph rewrite (rewrite/precision.py): what it rounds and where, against the
interpreter on the float32 graph (the result stays within bf16's tolerance, and really rounds)."""

import numpy as np

from kernorch.ir import interp, oracle
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.rewrite.precision import bf16_storage


def _residual_block():
    """conv -> relu -> conv + x -> relu -> layer-norm-like reduction -> matmul, float32."""
    rng = np.random.default_rng(0)
    b = Builder()
    x = b.input((1, 8, 6, 6))
    conv = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1)
    w1 = b.constant((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32))
    w2 = b.constant((rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(np.float32))
    bias = b.constant(rng.standard_normal(8).astype(np.float32))
    h = b.unary(Op.RELU, b.conv(x, w1, bias, conv))
    r = b.unary(Op.RELU, b.binary(Op.ADD, b.conv(h, w2, None, conv), x))
    flat = b.reshape(r, (8, 36))
    centred = b.binary(Op.SUB, flat, b.reduce(Op.SUM, flat, [1]))
    out = b.matmul(centred, b.constant(rng.standard_normal((36, 5)).astype(np.float32)))
    b.g.outputs = [out, r]
    return b.g


def test_linear_prims_compute_in_bf16_and_the_signature_stays_float32():
    g = _residual_block()
    bf, rounded = bf16_storage(g)
    linear = [p for p in bf.prims if p.kind.value == "linear"]
    assert len(linear) == 3 and all(bf.types[p.output].dtype == "bfloat16" for p in linear)
    for p in linear:  # operands bf16; a convolution's bias stays float32 (added before the rounding)
        assert [bf.types[v].dtype for v in p.inputs[:2]] == ["bfloat16"] * 2
        assert all(bf.types[v].dtype == "float32" for v in p.inputs[2:])
    assert [bf.types[v] for v in bf.inputs] == [g.types[v] for v in g.inputs]
    assert [bf.types[v] for v in bf.outputs] == [g.types[v] for v in g.outputs]
    # no pair: x is a graph input and r is returned (never rounded on its way out; its reshape is a
    # view); so three widenings and three operand casts (x, h, centred)
    casts = [p for p in bf.prims if p.op is Op.CAST]
    assert rounded == 3 and len(casts) == 6
    assert not [p for p in bf.prims if p.op in (Op.EXP, Op.SUM) and bf.types[p.output].dtype == "bfloat16"]


def test_rewritten_graph_rounds_within_bf16_tolerance():
    g = _residual_block()
    bf, _ = bf16_storage(g)
    feeds = oracle.random_feeds(g, seed=3)
    want, got = interp.run(g, feeds), interp.run(bf, feeds)
    for v in g.outputs:
        assert got[v].dtype == np.float32
        assert oracle.compare(got[v], want[v], rel=oracle.rel_tolerance("bfloat16"))[0]
    assert not oracle.compare(got[g.outputs[0]], want[g.outputs[0]])[0]  # it does round: not float32-exact


def test_a_linear_reader_of_a_paired_value_reads_its_bf16_half():
    """A value several prims read is stored as bf16 once: a convolution reading it takes the bf16
    half of the pair directly, not a second rounding of the widened copy."""
    b = Builder()
    x = b.input((1, 4, 5, 5))
    h = b.unary(Op.RELU, x)
    conv = ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1)
    y = b.binary(Op.ADD, b.conv(h, b.constant(np.ones((4, 4, 1, 1), np.float32)), None, conv), h)
    b.g.outputs = [y]
    bf, _ = bf16_storage(b.g)
    pair = [p for p in bf.prims if p.op is Op.CAST and p.inputs == (h,)]
    assert len(pair) == 1 and bf.types[pair[0].output].dtype == "bfloat16"
    conv_prim = next(p for p in bf.prims if p.op is Op.CONV)
    assert conv_prim.inputs[0] == pair[0].output


def test_grouped_convolutions_stay_float32():
    """Depthwise convolutions are memory-bound: no matrix-unit gain, so they keep float32 and read
    the float32 value even where a dense convolution beside them reads its bf16 half."""
    b = Builder()
    x = b.input((1, 4, 5, 5))
    h = b.unary(Op.RELU, x)
    depthwise = b.conv(h, b.constant(np.ones((4, 1, 3, 3), np.float32)), None, ConvAttrs((1, 1), (1,) * 4, (1, 1), 4))
    dense = b.conv(h, b.constant(np.ones((4, 4, 1, 1), np.float32)), None, ConvAttrs((1, 1), (0,) * 4, (1, 1), 1))
    b.g.outputs = [b.binary(Op.ADD, depthwise, dense)]
    bf, rounded = bf16_storage(b.g)
    convs = [p for p in bf.prims if p.op is Op.CONV]
    assert [bf.types[p.output].dtype for p in convs] == ["float32", "bfloat16"] and rounded == 2
    assert bf.types[convs[0].inputs[0]].dtype == "float32" and bf.types[convs[1].inputs[0]].dtype == "bfloat16"


def test_only_the_chosen_linear_prims_compute_in_bf16():
    """``linear=``: the prims bf16 measured faster for (providers/bf16_choice.py); the others keep
    float32, and the measurement only ever proposes dense float32 linear prims."""
    from kernorch.codegen import isa
    from kernorch.providers.bf16_choice import bf16_faster

    g = _residual_block()
    convs = [p.output for p in g.prims if p.op is Op.CONV]
    bf, rounded = bf16_storage(g, {convs[1]})
    dtypes = [bf.types[p.output].dtype for p in bf.prims if p.kind.value == "linear"]
    assert dtypes == ["float32", "bfloat16", "float32"] and rounded == 1
    if isa.host().bf16:
        assert bf16_faster(g, threads=1) <= {p.output for p in g.prims if p.kind.value == "linear"}


def _residual_into(centred: bool):
    """x + x @ w (x read twice: a pair candidate), then either centred by its row mean (a layer norm's
    first step) or only averaged (a global pool)."""
    rng = np.random.default_rng(1)
    b = Builder()
    x = b.input((16, 32))
    s = b.binary(Op.ADD, x, b.matmul(x, b.constant((rng.standard_normal((32, 32)) * 1e-3).astype(np.float32))))
    mean = b.binary(Op.MUL, b.reduce(Op.SUM, s, [1]), b.constant(np.float32(1 / 32)))
    b.g.outputs = [b.binary(Op.SUB, s, mean) if centred else mean]
    return b.g, x


def test_a_residual_stream_into_a_normalisation_stays_float32():
    """``x - mean(x)`` cancels the leading digits: a residual stream stored in bf16 (rounded by 2^-9 of
    its size) would come out of a layer norm with an error of the order of its own spread. So the values
    that reach a centred reduction through elementwise prims get no storage pair (BERT-base: max
    relative error 2e-2 -> 7e-3), while a residual that is only averaged keeps its pair."""
    g, x = _residual_into(centred=True)
    bf, rounded = bf16_storage(g)
    narrowed = {p.inputs[0] for p in bf.prims if p.op is Op.CAST and bf.types[p.output].dtype == "bfloat16"}
    assert rounded == 1 and narrowed == {x}  # the matmul's operand only: neither x nor the sum is stored in bf16
    feeds = {x: 100 + np.random.default_rng(2).standard_normal((16, 32)).astype(np.float32)}  # mean >> spread
    want, got = interp.run(g, feeds)[g.outputs[0]], interp.run(bf, feeds)[g.outputs[0]]
    assert oracle.compare(got, want, rel=oracle.rel_tolerance("bfloat16"))[0]

    pooled, _ = _residual_into(centred=False)
    _, rounded = bf16_storage(pooled)
    assert rounded == 2  # the matmul and the pair on the residual sum the reduction reads
