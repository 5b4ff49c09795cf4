"""Targeted tests, one or more per rule: the structure each rewrite must produce, checked against the
reference interpreter on random inputs."""

import numpy as np
import pytest

from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import BroadcastAttrs, ConvAttrs, Op, ViewAttrs
from kernorch.rewrite import ALL_RULES, DEFAULT_RULES, RewriteOptions, UnknownRewriteError, apply_rewrites
from kernorch.rewrite.check import mismatches

RNG = np.random.default_rng(0)
CONV = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1)


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def finish(b, *outs):
    b.g.outputs = list(outs)
    for k, v in enumerate(outs):
        b.g.names.setdefault(v, f"y{k}")
    return b.g


def rewrite(g, rules=DEFAULT_RULES, **kw):
    out, report = apply_rewrites(g, rules, **kw)
    assert mismatches(g, out) == [], out.to_text()
    assert out.outputs == g.outputs
    again, report2 = apply_rewrites(out, rules, **kw)
    assert not any(report2.values()), report2
    return out, report


def ops(g):
    return [p.op for p in g.prims]


# -- constant folding, algebra, CSE, DCE ---------------------------------------------------------

def test_fold_turns_a_transposed_weight_into_a_constant():
    b = Builder()
    x = b.input((3, 4), name="x")
    w = b.permute(b.constant(rand(5, 4)), (1, 0))
    w = b.binary(Op.MUL, w, b.scalar(2.0))
    g = finish(b, b.matmul(x, w))
    out, report = rewrite(g, ("fold",))
    assert ops(out) == [Op.MATMUL] and report["fold"] == 2
    assert out.prims[0].inputs[1] in out.constants


def test_fold_keeps_a_broadcast_scalar_and_respects_the_size_limit():
    b = Builder()
    x = b.input((64, 64), name="x")
    y = b.binary(Op.ADD, x, b.broadcast_to(b.constant(np.ones((1, 1), "float32")), (64, 64)))
    out, report = rewrite(finish(b, y), ("fold",))
    assert report["fold"] == 0 and Op.BROADCAST in ops(out)
    b = Builder()
    x = b.input((8, 8), name="x")
    g = finish(b, b.matmul(x, b.unary(Op.NEG, b.constant(rand(8, 8)))))
    _, report = rewrite(g, ("fold",), options=RewriteOptions(fold_max_elements=32))
    assert report["fold"] == 0


def test_fold_never_turns_an_output_into_a_constant():
    b = Builder()
    b.input((2,), name="x")
    y = b.unary(Op.EXP, b.constant(rand(3)))
    out, report = rewrite(finish(b, y), ("fold",))
    assert report["fold"] == 0 and ops(out) == [Op.EXP] and out.outputs == [y]


def test_algebra_removes_neutral_operands_and_double_negation():
    b = Builder()
    x = b.input((3, 4), name="x")
    y = b.binary(Op.MUL, x, b.constant(np.ones(4, "float32")))
    y = b.binary(Op.ADD, b.scalar(0.0), y)
    y = b.unary(Op.NEG, b.unary(Op.NEG, y))
    y = b.reduce(Op.SUM, b.reshape(y, (3, 1, 4)), [1], keepdims=False)
    z = b.unary(Op.EXP, y)
    out, report = rewrite(finish(b, z), ("algebra", "views"))
    assert ops(out) == [Op.EXP] and out.prims[0].inputs == (x,)


def test_cse_merges_duplicates_including_commuted_operands_and_equal_constants():
    b = Builder()
    x = b.input((3, 4), name="x")
    a1 = b.binary(Op.ADD, x, b.scalar(1.0))
    a2 = b.binary(Op.ADD, b.scalar(1.0), x)
    e1, e2 = b.unary(Op.EXP, a1), b.unary(Op.EXP, a2)
    out, report = rewrite(finish(b, b.binary(Op.MUL, e1, e2)), ("cse",))
    assert ops(out) == [Op.ADD, Op.EXP, Op.MUL] and report["cse"] == 2


def test_cse_keeps_two_outputs_apart_but_dce_drops_unused_prims():
    b = Builder()
    x = b.input((3,), name="x")
    y1, y2 = b.unary(Op.EXP, x), b.unary(Op.EXP, x)
    b.unary(Op.TANH, x)  # dead
    out, report = rewrite(finish(b, y1, y2), ("cse", "dce"))
    assert len(out.prims) == 2 and report["dce"] == 1
    assert [out.names[v] for v in out.outputs] == ["y0", "y1"]


# -- views ----------------------------------------------------------------------------------------

def test_view_chain_collapses_to_one_view():
    b = Builder()
    x = b.input((2, 3, 4), name="x")
    y = b.reshape(x, (6, 4))
    y = b.permute(y, (1, 0))
    y = b.view(y, layout.slice_((4, 6), (1, 0), (1, 2), (3, 3)))
    g = finish(b, b.unary(Op.EXP, y))
    out, report = rewrite(g, ("views",))
    assert ops(out) == [Op.VIEW, Op.EXP] and report["view_chain"] == 2


def test_transpose_pair_identity_view_and_same_shape_broadcast_disappear():
    b = Builder()
    x = b.input((2, 3, 4), name="x")
    y = b.permute(b.permute(x, (2, 0, 1)), (1, 2, 0))
    y = b.prim(Op.VIEW, [y], ViewAttrs(layout.identity((2, 3, 4))))
    y = b.prim(Op.BROADCAST, [y], BroadcastAttrs((2, 3, 4)))
    y = b.view(y, layout.slice_((2, 3, 4), (0, 0, 0), (1, 1, 1), (2, 3, 4)))  # a no-op slice
    y = b.reshape(b.reshape(y, (24,)), (2, 3, 4))
    g = finish(b, b.unary(Op.EXP, y))
    out, _ = rewrite(g, ("views",))
    assert ops(out) == [Op.EXP] and out.prims[0].inputs == (x,)


def test_view_of_an_output_view_keeps_the_output_id_and_name():
    b = Builder()
    x = b.input((4, 6), name="x")
    t = b.permute(b.unary(Op.EXP, x), (1, 0))
    y = b.reshape(t, (24,))
    g = finish(b, y)
    g.names[y] = "flat"
    out, report = rewrite(g, ("views",))
    assert ops(out) == [Op.EXP, Op.VIEW] and out.outputs == [y] and out.names[y] == "flat"
    assert out.prims[-1].output == y


def test_an_identity_view_that_is_an_output_stays():
    b = Builder()
    x = b.input((2, 3), name="x")
    y = b.prim(Op.VIEW, [x], ViewAttrs(layout.identity((2, 3))))
    out, report = rewrite(finish(b, y), ("views",))
    assert report["identity_view"] == 0 and out.outputs == [y] and ops(out) == [Op.VIEW]


def test_broadcast_chain_becomes_one_broadcast():
    b = Builder()
    x = b.input((1, 1, 4), name="x")
    y = b.broadcast_to(b.broadcast_to(x, (1, 3, 4)), (2, 3, 4))
    out, report = rewrite(finish(b, b.unary(Op.EXP, y)), ("views",))
    assert ops(out) == [Op.BROADCAST, Op.EXP] and report["broadcast_chain"] == 1


def test_a_slice_of_a_concat_reads_the_part():
    b = Builder()
    x, y = b.input((2, 3), name="x"), b.input((2, 5), name="y")
    cat = b.concat([x, y], 1)
    part = b.view(cat, layout.slice_((2, 8), (0, 4), (1, 1), (2, 3)))
    out, _ = rewrite(finish(b, b.unary(Op.EXP, part)), ("views",))
    assert ops(out) == [Op.VIEW, Op.EXP] and out.prims[0].inputs == (y,)


# -- folding affine arithmetic into linear prims ----------------------------------------------------

def _conv_bn(b, x, co, bias=True, transpose=False, groups=1):
    c = b.shape(x)[1]
    if transpose:
        w = b.constant(rand(c, co // groups, 3, 3))
        attrs = ConvAttrs((2, 2), (1, 1, 1, 1), (1, 1), groups, (1, 1))
    else:
        w = b.constant(rand(co, c // groups, 3, 3))
        attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), groups)
    y = b.conv(x, w, b.constant(rand(co)) if bias else None, attrs, transpose=transpose)
    scale = b.broadcast_to(b.constant(rand(1, co, 1, 1)), b.shape(y))
    y = b.binary(Op.MUL, y, scale)
    return b.binary(Op.ADD, y, b.reshape(b.constant(rand(co)), (co, 1, 1)))


@pytest.mark.parametrize("bias,transpose,groups", [(True, False, 1), (False, False, 1), (False, False, 2),
                                                    (True, True, 1), (True, True, 2)])
def test_conv_batchnorm_folds_into_one_conv(bias, transpose, groups):
    b = Builder()
    x = b.input((2, 4, 6, 6), name="x")
    g = finish(b, b.unary(Op.RELU, _conv_bn(b, x, 6, bias, transpose, groups)))
    out, report = rewrite(g)
    assert ops(out) == [Op.CONV_TRANSPOSE if transpose else Op.CONV, Op.RELU] and report["bn_fold"] == 2
    assert len(out.prims[0].inputs) == 3


def test_conv_subtracted_from_a_constant_and_divided_folds():
    b = Builder()
    x = b.input((1, 3, 5, 5), name="x")
    y = b.conv(x, b.constant(rand(4, 3, 3, 3)), None, CONV)
    y = b.binary(Op.DIV, y, b.reshape(b.constant(np.abs(rand(4)) + 0.5), (4, 1, 1)))
    y = b.binary(Op.SUB, b.reshape(b.constant(rand(4)), (4, 1, 1)), y)
    out, report = rewrite(finish(b, y))
    assert ops(out) == [Op.CONV] and report["bn_fold"] == 2


def test_conv_with_a_second_consumer_or_spatial_scale_is_not_folded():
    b = Builder()
    x = b.input((1, 3, 5, 5), name="x")
    c = b.conv(x, b.constant(rand(4, 3, 3, 3)), None, CONV)
    y = b.binary(Op.MUL, c, b.reshape(b.constant(rand(4)), (4, 1, 1)))
    out, report = rewrite(finish(b, y, c))
    assert report["bn_fold"] == 0
    b = Builder()
    x = b.input((1, 3, 5, 5), name="x")
    c = b.conv(x, b.constant(rand(4, 3, 3, 3)), None, CONV)
    y = b.binary(Op.MUL, c, b.constant(rand(5, 5)))
    out, report = rewrite(finish(b, y))
    assert report["bn_fold"] == 0


def test_matmul_absorbs_a_per_column_scale():
    b = Builder()
    x = b.input((2, 3, 4), name="x")
    y = b.binary(Op.MUL, b.matmul(x, b.constant(rand(4, 5))), b.constant(rand(5)))
    out, report = rewrite(finish(b, y))
    assert ops(out) == [Op.MATMUL] and report["bn_fold"] == 1


# -- horizontal merge -----------------------------------------------------------------------------

def _qkv(b, x, d, weights=None):
    ws = weights or [b.constant(rand(b.shape(x)[-1], d)) for _ in range(3)]
    return [b.matmul(x, w) for w in ws]


def test_qkv_projections_merge_into_one_matmul():
    b = Builder()
    x = b.input((2, 5, 8), name="x")
    q, k, v = _qkv(b, x, 4)
    s = b.matmul(q, b.permute(k, (0, 2, 1)))
    g = finish(b, b.matmul(s, v))
    out, report = rewrite(g)
    mms = [p for p in out.prims if p.op is Op.MATMUL]
    assert report["merge_linear"] == 1 and len(mms) == 3
    assert [p for p in mms if x in p.inputs][0].inputs[1] in out.constants


def test_merged_projections_that_are_outputs_keep_their_ids_and_names():
    b = Builder()
    x = b.input((5, 8), name="x")
    q, k, v = _qkv(b, x, 3)
    g = finish(b, q, k, v)
    out, report = rewrite(g)
    assert report["merge_linear"] == 1 and out.outputs == [q, k, v]
    assert [out.names[o] for o in out.outputs] == ["y0", "y1", "y2"]
    assert ops(out) == [Op.MATMUL, Op.VIEW, Op.VIEW, Op.VIEW]


def test_computed_weights_merge_only_with_merge_linear_concat():
    b = Builder()
    x = b.input((5, 8), name="x")
    ws = [b.input((8, 3), name=f"w{i}") for i in range(3)]
    g = finish(b, *_qkv(b, x, 3, ws))
    out, report = rewrite(g)
    assert report["merge_linear"] == 0 and ops(out).count(Op.MATMUL) == 3
    out, report = rewrite(g, DEFAULT_RULES + ("merge_linear_concat",))
    assert report["merge_linear_concat"] == 1 and ops(out).count(Op.MATMUL) == 1 and Op.CONCAT in ops(out)


def test_matmuls_of_one_input_merge_across_weight_batch_shapes():
    # e @ V (V computed, [2, 8, 4]) and e @ ones[8, 1] (a sum turned into a matmul): the ones column
    # is broadcast to V's batch shape, then concatenated
    b = Builder()
    e = b.unary(Op.EXP, b.input((2, 5, 8), name="e"))
    v = b.unary(Op.TANH, b.input((2, 8, 4), name="v"))
    g = finish(b, b.matmul(e, v), b.unary(Op.EXP, b.matmul(e, b.constant(np.ones((8, 1), "float32")))))
    out, report = rewrite(g, DEFAULT_RULES + ("merge_linear_concat",))
    assert report["merge_linear_concat"] == 1 and ops(out).count(Op.MATMUL) == 1
    cat = next(p for p in out.prims if p.op is Op.CONCAT)
    assert out.types[cat.output].shape == (2, 8, 5)
    b = Builder()  # constant weights of different batch shapes merge into one constant
    x = b.input((2, 5, 8), name="x")
    g = finish(b, b.matmul(x, b.constant(rand(8, 3))), b.matmul(x, b.constant(rand(2, 8, 4))))
    out, report = rewrite(g)
    assert report["merge_linear"] == 1 and out.types[out.prims[0].inputs[1]].shape == (2, 8, 7)


def test_matmuls_with_different_output_batch_shapes_stay_apart():
    b = Builder()  # x @ W1 is [5, 3], x @ W2 (batched) is [2, 5, 3]: no common merged matmul
    x = b.input((5, 8), name="x")
    g = finish(b, b.matmul(x, b.constant(rand(8, 3))), b.matmul(x, b.input((2, 8, 3), name="w")))
    assert rewrite(g, ALL_RULES)[1]["merge_linear_concat"] == 0


def test_a_reshape_to_the_same_shape_disappears_even_when_large():
    # reshape keeps the shape but reads the size-1 dim at index 0 (not i0); above the probe limit
    b = Builder()
    x = b.input((1, 3, 200, 200), name="x")
    y = b.view(x, layout.reshape((1, 3, 200, 200), (1, 3, 200, 200)))
    out, report = rewrite(finish(b, b.unary(Op.EXP, y)), ("views",))
    assert ops(out) == [Op.EXP] and report["identity_view"] == 1


def test_convs_on_one_input_merge():
    b = Builder()
    x = b.input((1, 3, 6, 6), name="x")
    y1 = b.conv(x, b.constant(rand(4, 3, 3, 3)), b.constant(rand(4)), CONV)
    y2 = b.conv(x, b.constant(rand(2, 3, 3, 3)), None, CONV)
    out, report = rewrite(finish(b, b.unary(Op.EXP, y1), b.unary(Op.TANH, y2)))
    assert report["merge_linear"] == 1 and ops(out).count(Op.CONV) == 1


def test_wide_convs_on_one_input_stay_apart():
    """ResNet's downsample and first 1x1 (256 and 64 channels): merged, the relu on one slice is a
    pass of its own and the tiles were full anyway."""
    b = Builder()
    x = b.input((1, 3, 6, 6), name="x")
    y1 = b.conv(x, b.constant(rand(64, 3, 3, 3)), None, CONV)
    y2 = b.conv(x, b.constant(rand(32, 3, 3, 3)), None, CONV)
    out, report = rewrite(finish(b, b.unary(Op.RELU, y1), y2))
    assert report["merge_linear"] == 0 and ops(out).count(Op.CONV) == 2


# -- Korch's matmul rewrites ----------------------------------------------------------------------

@pytest.mark.parametrize("shape,axes,keep", [((3, 5), [1], True), ((2, 3, 5), [2], False), ((2, 3, 4), [1, 2], False),
                                             ((7,), [0], False), ((2, 6, 3), [1], True), ((2, 6, 3), [1], False)])
def test_sum_becomes_a_matmul_with_ones(shape, axes, keep):
    b = Builder()
    x = b.input(shape, name="x")
    g = finish(b, b.unary(Op.EXP, b.reduce(Op.SUM, x, axes, keepdims=keep)))
    assert apply_rewrites(g)[1].get("sum_to_matmul") is None  # off by default
    out, report = rewrite(g, ALL_RULES)
    assert report["sum_to_matmul"] == 1 and Op.SUM not in ops(out) and Op.MATMUL in ops(out)


def test_sum_over_a_middle_axis_is_left_alone():
    b = Builder()
    x = b.input((2, 3, 4, 5), name="x")
    out, report = rewrite(finish(b, b.reduce(Op.SUM, x, [1])), ALL_RULES)
    assert report["sum_to_matmul"] == 0


def _attention(b, x, dh, div=True):
    q, k, v = _qkv(b, x, dh)
    s = b.binary(Op.MUL, b.matmul(q, b.permute(k, (0, 2, 1))), b.scalar(dh ** -0.5))
    e = b.unary(Op.EXP, b.binary(Op.SUB, s, b.reduce(Op.RMAX, s, [-1])))
    total = b.reduce(Op.SUM, e, [-1])
    p = b.binary(Op.DIV, e, total) if div else b.binary(Op.MUL, e, b.unary(Op.RECIP, total))
    return b.matmul(p, v)


@pytest.mark.parametrize("div", [True, False])
def test_softmax_normalization_moves_past_the_value_matmul(div):
    b = Builder()
    x = b.input((2, 16, 12), name="x")
    g = finish(b, _attention(b, x, 4, div))
    out, report = rewrite(g, DEFAULT_RULES + ("div_past_matmul",))
    assert report["div_past_matmul"] == 1
    last = out.prims[-1]
    assert last.op is (Op.DIV if div else Op.MUL) and out.types[last.output].shape == (2, 16, 4)
    scaled = {p.output: p for p in out.prims}[last.inputs[0]]
    assert scaled.op is Op.MATMUL
    assert apply_rewrites(g)[1].get("div_past_matmul") is None  # off by default


def test_division_stays_when_it_would_not_shrink_or_varies_along_the_contraction():
    b = Builder()
    x = b.input((2, 4, 4), name="x")
    e = b.unary(Op.EXP, x)
    p = b.binary(Op.DIV, e, b.reduce(Op.SUM, e, [-1]))
    g = finish(b, b.matmul(p, b.constant(rand(4, 4))))
    assert rewrite(g, ALL_RULES)[1]["div_past_matmul"] == 0
    b = Builder()
    x = b.input((2, 4, 6), name="x")
    p = b.binary(Op.DIV, x, b.binary(Op.ADD, b.input((6,), name="r"), b.scalar(3.0)))
    g = finish(b, b.matmul(p, b.constant(rand(6, 2))))
    assert rewrite(g, ALL_RULES)[1]["div_past_matmul"] == 0


def test_division_of_the_right_operand_along_rows_moves_too():
    b = Builder()
    y = b.input((2, 8, 3), name="y")
    e = b.unary(Op.EXP, y)
    p = b.binary(Op.DIV, e, b.reduce(Op.SUM, e, [-2]))
    g = finish(b, b.matmul(b.constant(rand(2, 8)), p))
    out, report = rewrite(g, ("div_past_matmul",))
    assert report["div_past_matmul"] == 1 and out.prims[-1].op is Op.DIV


def test_all_rules_on_an_attention_block():
    b = Builder()
    x = b.input((2, 16, 12), name="x")
    g = finish(b, _attention(b, x, 4))
    out, report = rewrite(g, ALL_RULES)
    assert report["merge_linear"] == 1 and report["sum_to_matmul"] == 1 and report["div_past_matmul"] == 1
    assert Op.SUM not in ops(out)


# -- the pipeline ---------------------------------------------------------------------------------

def test_unknown_rule_names_are_refused():
    b = Builder()
    x = b.input((2,), name="x")
    with pytest.raises(UnknownRewriteError, match="nope"):
        apply_rewrites(finish(b, b.unary(Op.EXP, x)), ("fold", "nope"))


def test_default_rules_are_a_subset_of_all_rules():
    assert set(DEFAULT_RULES) <= set(ALL_RULES)
    assert "sum_to_matmul" not in DEFAULT_RULES and "div_past_matmul" not in DEFAULT_RULES


def test_masked_views_compose_only_when_their_pads_agree():
    b = Builder()
    x = b.input((3, 4), name="x")
    y = b.view(x, layout.pad((3, 4), (1, 0), (0, 2), "constant", 0.0))
    y = b.view(y, layout.pad((4, 6), (0, 1), (1, 0), "constant", 0.0))
    y = b.view(y, layout.window((5, 7), (2, 3), (1, 2), (0, 1), (1, 1), (4, 3)))
    out, report = rewrite(finish(b, b.unary(Op.EXP, y)), ("views",))
    assert ops(out) == [Op.VIEW, Op.EXP] and report["view_chain"] == 2
    b = Builder()
    x = b.input((3, 4), name="x")
    y = b.view(x, layout.pad((3, 4), (1, 1), (1, 1), "constant", 0.0))
    y = b.view(y, layout.pad((5, 6), (1, 1), (1, 1), "constant", -1.0))
    out, report = rewrite(finish(b, b.unary(Op.EXP, y)), ("views",))
    assert ops(out) == [Op.VIEW, Op.VIEW, Op.EXP] and report["view_chain"] == 0
