"""codegen.lower's contract (codegen/lower.py), beyond the kernels it writes: an infeasible
kernel's reason and a library kernel's refusal are raised as they are, no template taking a
feasible kernel names every template's reason, and the spec carries the options, the name and the
thread count it was asked for (the toolchain's default when none is), and the template's name."""

import numpy as np
import pytest

from cg_util import finish, window_reduce
from kernorch import codegen
from kernorch.codegen import templates
from kernorch.codegen.facts import CannotGenerate, kernel_prims
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.options import CodegenOptions


def _grouped_conv(prologue: bool):
    """144 taps per output, grouped: a library kernel, or no kernel at all behind a prologue."""
    rng = np.random.default_rng(3)
    b = Builder()
    x = b.input((1, 32, 8, 8))
    if prologue:
        x = b.unary(Op.RELU, x)
    w = b.constant(rng.standard_normal((4, 16, 3, 3)).astype(np.float32))
    return finish(b, b.conv(x, w, None, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 2)))


def _matmul(m=64):
    b = Builder()
    w = b.constant(np.random.default_rng(4).standard_normal((64, 96)).astype(np.float32))
    return finish(b, b.matmul(b.input((m, 64)), w))


def _channels_last_3x3():
    b = Builder()
    x = b.permute(b.input((1, 14, 14, 16)), (0, 3, 1, 2))
    w = b.constant(np.random.default_rng(5).standard_normal((24, 16, 3, 3)).astype(np.float32))
    y = b.conv(x, w, None, ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1))
    return finish(b, b.unary(Op.RELU, b.permute(y, (0, 2, 3, 1))))


def test_an_infeasible_kernel_raises_why_not():
    g, members, outputs = _grouped_conv(prologue=True)
    reason = codegen.why_not(g, members, outputs)
    assert reason and "computed, not a view" in reason
    with pytest.raises(CannotGenerate) as e:
        codegen.lower(g, members, outputs, num_threads=2)
    assert str(e.value) == reason


def test_a_library_kernel_is_not_a_c_kernel():
    g, members, outputs = _grouped_conv(prologue=False)
    assert codegen.why_not(g, members, outputs) is None  # feasible, but as the vendor library's kernel
    with pytest.raises(CannotGenerate) as e:
        codegen.lower(g, members, outputs, num_threads=2)
    assert str(e.value) == "linear and opaque kernels are not C kernels"


def test_no_template_taking_a_feasible_kernel_names_each_templates_reason(monkeypatch):
    """Every template is asked about this kernel (graph, prims in order, outputs, options) and each
    one's reason is in the message, in template order."""
    b = Builder()
    pooled = window_reduce(b, b.input((1, 4, 9, 9)), Op.SUM, 3, 1, 1, 0.0)
    g, members, outputs = finish(b, b.unary(Op.EXP, pooled), pooled)
    prims = kernel_prims(g, members)
    options = CodegenOptions(winograd=False)
    asked = []

    def refuse(*args):
        asked.append(args)
        return f"refused {len(args[1])} prims writing {len(args[2])} outputs"
    fake = templates.Template("fake", refuse, lambda *a: None)
    kept = (*templates.TEMPLATES[:-1], fake)  # all but the catch-all, and one that refuses everything
    assert [t.name for t in kept] == ["winograd", "gemm", "depthwise", "fake"]
    want = "; ".join(f"{t.name}: {t.why_not(g, prims, outputs, options)}" for t in kept)
    assert want.startswith("winograd: Winograd convolutions are switched off; gemm: ")
    assert want.endswith("; fake: refused 3 prims writing 2 outputs")
    monkeypatch.setattr(templates, "TEMPLATES", kept)
    asked.clear()
    with pytest.raises(CannotGenerate) as e:
        codegen.lower(g, members, outputs, num_threads=2, options=options)
    assert str(e.value) == want
    assert asked and all(a[0] is g and a[1] == prims and list(a[2]) == outputs and a[3] is options for a in asked)


def test_the_spec_carries_its_options_and_name():
    g, members, outputs = _channels_last_3x3()
    default = codegen.lower(g, members, outputs, num_threads=2)
    assert default.options == CodegenOptions() and default.name.startswith("kn_")
    assert any("Winograd" in n for n in default.notes)
    off = CodegenOptions(winograd=False)
    spec = codegen.lower(g, members, outputs, name="kn_mine", num_threads=2, options=off)
    assert spec.options == off and spec.name == "kn_mine"
    assert not any("Winograd" in n for n in spec.notes)  # the options reached the templates
    assert spec.outputs == tuple(outputs)
    assert (default.template, spec.template) == ("winograd", "gemm")  # the template that wrote each


def test_the_spec_is_scheduled_for_the_threads_asked_for_else_the_default(monkeypatch):
    g, members, outputs = _matmul()
    by_threads = {t: codegen.lower(g, members, outputs, num_threads=t) for t in (1, 8)}
    assert by_threads[1] != by_threads[8]  # a GEMM splits its rows for the threads
    for env, asked in (("8", 1), ("1", 8)):
        monkeypatch.setenv("KERNORCH_NUM_THREADS", env)
        assert codegen.lower(g, members, outputs, num_threads=asked) == by_threads[asked]
        assert codegen.lower(g, members, outputs) == by_threads[int(env)]
