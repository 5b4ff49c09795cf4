"""The rewrite driver's contract, with hand-written rules: outputs keep their ids and names,
malformed replacements are refused loudly, runaway rules stop at the sweep bound, and
``check=True`` catches a rule that changes the result."""

import numpy as np
import pytest

from kernorch.errors import VerificationError
from kernorch.ir.graph import Builder, GraphError
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.rewrite import RewriteOptions, apply_rewrites, pipeline, run_rules
from kernorch.rewrite.check import mismatches
from kernorch.rewrite.dce import remove_dead


def _graph():
    b = Builder()
    x = b.input((2, 3), name="x")
    e = b.unary(Op.EXP, x)
    y = b.unary(Op.TANH, e)
    b.g.outputs = [y]
    b.g.names[y] = "y"
    b.g.names[e] = "e"
    return b.g, x, e, y


def exp_to_sigmoid(p, ctx):  # deliberately wrong: for the oracle to catch
    if p.op is Op.EXP:
        b = ctx.builder()
        return ctx.replace(b, b.unary(Op.SIGMOID, p.inputs[0]))
    return None


def test_an_output_replaced_by_a_new_prim_keeps_its_id_and_name():
    g, x, e, y = _graph()

    def tanh_to_neg(p, ctx):
        if p.op is Op.TANH:
            b = ctx.builder()
            return ctx.replace(b, b.unary(Op.NEG, p.inputs[0]))
        return None

    out, report = run_rules(g, [("t", tanh_to_neg)])
    assert report["t"] == 1 and out.outputs == [y] and out.names[y] == "y"
    assert [(p.op, p.output) for p in out.prims] == [(Op.EXP, e), (Op.NEG, y)]


def test_an_output_is_never_replaced_by_an_existing_value():
    g, x, e, y = _graph()

    def tanh_to_input(p, ctx):
        return ctx.replace(None, p.inputs[0]) if p.op is Op.TANH else None

    out, report = run_rules(g, [("t", tanh_to_input)])
    assert report["t"] == 0 and [p.op for p in out.prims] == [Op.EXP, Op.TANH]


def test_names_follow_a_replacement_and_the_input_graph_is_untouched():
    g, x, e, y = _graph()
    before = g.to_text()
    out, _ = run_rules(g, [("s", exp_to_sigmoid)])
    assert g.to_text() == before
    assert out.names[out.prims[0].output] == "e" and out.prims[0].op is Op.SIGMOID


def test_a_type_changing_replacement_is_a_bug():
    g, *_ = _graph()

    def bad(p, ctx):
        if p.op is Op.EXP:
            b = ctx.builder()
            return ctx.replace(b, b.cast(p.inputs[0], "float64"))
        return None

    with pytest.raises(GraphError, match="replaced by"):
        run_rules(g, [("bad", bad)])


def test_a_replacement_that_reads_its_own_value_is_a_bug():
    g, *_ = _graph()

    def bad(p, ctx):
        if p.op is Op.EXP:
            b = ctx.builder()
            return ctx.replace(b, b.unary(Op.NEG, p.output))
        return None

    with pytest.raises(GraphError, match="reads a value it replaces"):
        run_rules(g, [("bad", bad)])


def test_a_rule_that_never_settles_stops_at_the_sweep_bound():
    g, *_ = _graph()

    def churn(p, ctx):  # rebuilds every exp forever
        if p.op is Op.EXP:
            b = ctx.builder()
            return ctx.replace(b, b.unary(Op.EXP, p.inputs[0]))
        return None

    with pytest.warns(UserWarning, match="fixed point"):
        out, report = run_rules(g, [("churn", churn)], RewriteOptions(max_sweeps=3))
    assert report["churn"] == 3 and len(out.prims) == 2 and mismatches(g, out) == []


def test_check_catches_a_wrong_rule(monkeypatch):
    g, *_ = _graph()
    monkeypatch.setitem(pipeline.RULES, "algebra", exp_to_sigmoid)
    with pytest.raises(VerificationError, match="algebra"):
        apply_rewrites(g, ("algebra",), check=True)
    out, _ = apply_rewrites(g, ("algebra",))
    assert mismatches(g, out)


def test_remove_dead_drops_prims_and_constants_nobody_reads():
    b = Builder()
    x = b.input((3,), name="x")
    dead = b.binary(Op.ADD, x, b.constant(np.ones(3, "float32")))
    b.unary(Op.EXP, dead)
    y = b.unary(Op.TANH, x)
    b.g.outputs = [y]
    out, n = remove_dead(b.g)
    assert n == 2 and [p.op for p in out.prims] == [Op.TANH] and not out.constants and out.inputs == [x]


def test_folded_constants_are_contiguous():
    b = Builder()
    x = b.input((4, 4), name="x")
    w = b.broadcast_to(b.constant(np.arange(4, dtype="float32").reshape(4, 1)), (4, 4))
    b.g.outputs = [b.matmul(x, w)]
    out, report = apply_rewrites(b.g, ("fold",))
    assert report["fold"] == 1
    assert all(a.flags["C_CONTIGUOUS"] and a.flags["WRITEABLE"] for a in out.constants.values())


def test_batchnorms_fold_before_their_convolutions_merge():
    rng = np.random.default_rng(0)
    b = Builder()
    x = b.input((1, 3, 6, 6), name="x")
    outs = []
    for co in (4, 2):
        y = b.conv(x, b.constant(rng.standard_normal((co, 3, 3, 3)).astype("float32")), None,
                   ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1))
        y = b.binary(Op.MUL, y, b.reshape(b.constant(rng.standard_normal(co).astype("float32")), (co, 1, 1)))
        outs.append(b.unary(Op.RELU, y))
    b.g.outputs = outs
    out, report = apply_rewrites(b.g)
    assert report["bn_fold"] == 2 and report["merge_linear"] == 1
    assert [p.op for p in out.prims].count(Op.CONV) == 1 and Op.MUL not in [p.op for p in out.prims]
    assert mismatches(b.g, out) == []
