"""The kernel templates (codegen/templates.py): the first that takes a kernel writes it, each
names the CodegenOptions fields it reads (every field is some template's), and a template's
refusal comes with its reason."""

import dataclasses

import numpy as np
import pytest

from cg_util import THREADS, check, finish, window_reduce
from kernorch import codegen
from kernorch.codegen import templates
from kernorch.codegen.facts import kernel_prims
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.options import CodegenOptions


def _conv3x3(nhwc: bool):
    rng = np.random.default_rng(5)
    b = Builder()
    x = b.permute(b.input((1, 14, 14, 16)), (0, 3, 1, 2)) if nhwc else b.input((1, 16, 14, 14))
    y = b.conv(x, b.constant(rng.standard_normal((24, 16, 3, 3)).astype(np.float32)), None,
               ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1))
    return finish(b, b.unary(Op.RELU, b.permute(y, (0, 2, 3, 1)) if nhwc else y))


def _pool_softmax():
    b = Builder()
    x = b.input((1, 4, 9, 9))
    pooled = window_reduce(b, x, Op.SUM, 3, 1, 1, 0.0)
    e = b.unary(Op.EXP, pooled)
    return finish(b, b.binary(Op.DIV, e, b.reduce(Op.SUM, e, [1])))


CASES = {  # name -> (kernel, the template expected with default options, ... with Winograd off)
    "3x3 channels-last": (lambda: _conv3x3(True), "winograd", "gemm"),
    "3x3 NCHW": (lambda: _conv3x3(False), "gemm", "gemm"),
    "pool and softmax": (_pool_softmax, "loops", "loops"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_first_template_that_takes_a_kernel_writes_it(name):
    make, expected, without_winograd = CASES[name]
    g, members, outputs = make()
    prims = kernel_prims(g, members)
    for options, want in ((CodegenOptions(), expected), (CodegenOptions(winograd=False), without_winograd)):
        assert templates.first(g, prims, outputs, options).name == want
        said = templates.reasons(g, prims, outputs, options)
        order = [t.name for t in templates.TEMPLATES]
        assert said[want] is None and all(isinstance(said[n], str) and said[n] for n in order[:order.index(want)])
        kernel = codegen.build_kernel(g, members, outputs, num_threads=THREADS, options=options)
        check(kernel, g, outputs, rtol=1e-4, atol=1e-4)


def test_every_option_is_read_by_some_template_and_names_are_fields():
    fields = {f.name for f in dataclasses.fields(CodegenOptions)}
    read = {f for t in templates.TEMPLATES for f in t.reads}
    assert read <= fields, f"templates read unknown options {sorted(read - fields)}"
    assert fields <= read, f"no template says it reads {sorted(fields - read)}"
    assert len({t.name for t in templates.TEMPLATES}) == len(templates.TEMPLATES)
    assert templates.TEMPLATES[-1].name == "loops"  # the catch-all comes last
