"""Structure and plumbing of the code generator: the golden softmax loop structure, refusals with
reasons, compiler errors, the build cache, canonical sources, sub-kernels reading values of the
surrounding graph, multi-threaded schedules, and the index normalization the loops rely on."""

import math
import re
import subprocess

import numpy as np
import onnx
import pytest
import torch
from hypothesis import given, settings, strategies as st

from cg_util import check, finish, layer_norm, softmax
from kernorch import codegen
from kernorch.codegen import toolchain as cbuild
from kernorch.codegen.indexing import flat
from kernorch.errors import CompilerError, InputError
from kernorch.ir import index as ix
from kernorch.ir import interp, layout
from kernorch.ir.graph import Builder, TensorType
from kernorch.ir.prims import Op
from kernorch.options import Env


def _softmax_graph(shape=(512, 1024)):
    b = Builder()
    return finish(b, softmax(b, b.input(shape), -1))


def test_golden_softmax_has_one_parallel_loop():
    g, members, outs = _softmax_graph()
    src = codegen.emit_module([codegen.lower(g, members, outs, num_threads=2)])
    body = src[src.index("void kn_", src.index("*/\nvoid kn_")):]  # the kernel, past the header's helpers
    assert body.count("#pragma omp parallel") == 1
    assert body.count("#pragma omp for") == 1
    assert len(re.findall(r"#pragma omp simd reduction\(max:\w+\) reduction\(\|:\w+_nan\)", body)) == 1
    assert len(re.findall(r"#pragma omp simd reduction\(\+:\w+\)", body)) == 1
    assert body.count("for (int64_t") == 4  # rows, then max / exp+sum / divide over the row
    assert "expf(" in body and "args[2]" not in body  # no workspace


def test_refusals_name_the_culprit():
    b = Builder()
    x = b.input((4, 4), "float16")
    y = b.unary(Op.EXP, x)
    g, members, outs = finish(b, y)
    assert "float16" in codegen.why_not(g, members, outs)
    assert codegen.why_not(g, set(), outs) == "empty kernel"
    b = Builder()
    x = b.input((4, 4))
    y = b.unary(Op.EXP, x)
    z = b.unary(Op.NEG, y)
    g, members, _ = finish(b, z)
    assert "not computed by the kernel" in codegen.why_not(g, {z}, [y])
    node = onnx.helper.make_node("Relu", ["a"], ["b"])
    op = b.opaque("Relu", [z], TensorType((4, 4), "float32"), node.SerializeToString(), 17)
    g, members, outs = finish(b, op)
    assert "must be alone" in codegen.why_not(g, members, outs)
    assert codegen.why_not(g, {op}, [op]) is None
    with pytest.raises(codegen.CannotGenerate, match="must be alone"):
        codegen.lower(g, members, outs)


def test_opaque_kernel_runs_the_reference():
    b = Builder()
    x = b.input((3, 5))
    node = onnx.helper.make_node("Relu", ["a"], ["b"])
    op = b.opaque("Relu", [x], TensorType((3, 5), "float32"), node.SerializeToString(), 17)
    g, members, outs = finish(b, op)
    kernel = codegen.build_kernel(g, members, outs)
    assert kernel.provider == "reference"
    check(kernel, g, outs)


def test_compiler_errors_are_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNORCH_CACHE_DIR", str(tmp_path))
    with pytest.raises(CompilerError, match="rejected generated code: .*error") as err:
        cbuild.compile_source("int f( {")
    assert "\n" not in str(err.value)
    cbuild.compiler.cache_clear()
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    try:
        with pytest.raises(CompilerError, match="no C compiler found"):
            cbuild.compiler()
    finally:
        cbuild.compiler.cache_clear()


def test_a_compiler_killed_by_a_signal_is_named_so(monkeypatch, tmp_path):
    """A compiler stopped by a signal (the OOM killer, a user's kill) did not reject the code: the
    one-line error says which signal, not "unknown error"."""
    monkeypatch.setenv("KERNORCH_CACHE_DIR", str(tmp_path))
    fake = tmp_path / "fakecc"
    fake.write_text("#!/bin/sh\nkill -9 $$\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CC", str(fake))
    cbuild.compiler.cache_clear()
    try:
        with pytest.raises(CompilerError, match="fakecc was killed by signal 9 while compiling") as err:
            cbuild.compile_source("int f(void) { return 0; }")
        assert "\n" not in str(err.value)
    finally:
        cbuild.compiler.cache_clear()


def test_build_cache_reuses_libraries(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNORCH_CACHE_DIR", str(tmp_path))
    src = "int kn_answer(void) { return 42; }\n"
    first = cbuild.compile_source(src)
    assert first.parent == tmp_path and first.exists()
    mtime = first.stat().st_mtime_ns
    assert cbuild.compile_source(src) == first and first.stat().st_mtime_ns == mtime


def test_a_kernel_compiled_in_a_batch_is_loaded_from_that_library_again(monkeypatch, tmp_path):
    """build_many compiles its kernels as one unit; building one of them again later (a plan's
    kernel, timed as a candidate in a batch) loads it from that library, nothing compiled; a
    library that went missing is compiled again."""
    monkeypatch.setenv("KERNORCH_CACHE_DIR", str(tmp_path))
    b = Builder()
    x = b.input((8, 33))
    t = b.unary(Op.TANH, x)
    e = b.unary(Op.EXP, t)
    b.g.outputs = [e]
    items = [(b.g, {t}, [t]), (b.g, {t, e}, [e])]
    first = codegen.build_many(items)
    compiled = []
    real = cbuild.compile_source
    monkeypatch.setattr(cbuild, "compile_source", lambda *a, **k: compiled.append(a[0]) or real(*a, **k))
    (again,) = codegen.build_many(items[1:])
    assert compiled == [] and again.lib is first[1].lib
    xv = np.linspace(-2, 2, 8 * 33, dtype=np.float32).reshape(8, 33)
    np.testing.assert_allclose(again.run([xv])[0].numpy(), np.exp(np.tanh(xv)), rtol=1e-5)
    (tmp_path / first[1].lib._name.rsplit("/", 1)[-1]).unlink()
    (rebuilt,) = codegen.build_many(items[1:])
    assert len(compiled) == 1 and again.spec.name in compiled[0] and first[0].spec.name not in compiled[0]
    np.testing.assert_allclose(rebuilt.run([xv])[0].numpy(), np.exp(np.tanh(xv)), rtol=1e-5)


def test_the_kernels_header_is_read_precompiled(monkeypatch, tmp_path):
    """compile_source(..., header=...) includes the header through a copy precompiled with the very
    flags of the compile (gcc -H marks a precompiled header it reads with "!"; a flag that differs
    makes gcc parse the text again, silently); a corrupt copy is ignored, the text read instead."""
    monkeypatch.setenv("KERNORCH_CACHE_DIR", str(tmp_path))
    header = "static inline int kn_twice(int x) { return 2 * x; }\n"
    lib = cbuild.load(cbuild.compile_source("int kn_four(void) { return kn_twice(2); }", header=header))
    assert lib.kn_four() == 4
    env = Env.read()
    where = cbuild.precompiled_header(header, env)
    gch = where / (cbuild.HEADER_NAME + ".gch")
    macros = subprocess.run([cbuild.compiler(env.cc), "-dM", "-E", "-x", "c", "/dev/null"], capture_output=True,
                            text=True).stdout
    if "__GNUC__" not in macros or "__clang__" in macros:
        pytest.skip("precompiled headers are checked with gcc")
    assert gch.exists()
    src = tmp_path / "probe.c"
    src.write_text(f'#include "{cbuild.HEADER_NAME}"\nint kn_six(void) {{ return kn_twice(3); }}\n')
    shown = subprocess.run([cbuild.compiler(env.cc), *cbuild.flags(env), "-I", str(where), "-H", str(src), "-o",
                            str(tmp_path / "probe.so")], capture_output=True, text=True).stderr
    assert f"! {gch}" in shown
    gch.write_bytes(b"not a precompiled header")
    lib = cbuild.load(cbuild.compile_source("int kn_eight(void) { return kn_twice(4); }", header=header))
    assert lib.kn_eight() == 8


def test_identical_kernels_have_identical_sources():
    b = Builder()
    y1 = softmax(b, b.input((8, 33)), -1)
    e = b.unary(Op.EXP, y1)
    y2 = softmax(b, e, -1)
    g, _, _ = finish(b, y2)
    first = {p.output for p in g.prims if p.output <= y1}
    second = {p.output for p in g.prims if p.output > e}
    a, c = codegen.lower(g, first, [y1]), codegen.lower(g, second, [y2])
    assert a.name == c.name and codegen.emit_module([a]) == codegen.emit_module([c])


def test_sub_kernel_reads_values_of_the_graph():
    b = Builder()
    x = b.input((16, 40))
    w = b.constant(np.linspace(-1, 1, 40, dtype=np.float32))
    h = b.unary(Op.TANH, b.binary(Op.MUL, x, w))  # computed by an earlier kernel
    y = layer_norm(b, h)
    g, _, _ = finish(b, y)
    members = {p.output for p in g.prims if p.output > h}
    kernel = codegen.build_kernel(g, members, [y])
    assert h in kernel.inputs
    env = interp.run(g, [np.random.default_rng(0).standard_normal((16, 40)).astype(np.float32)], keep=True)
    got = kernel.run([env[v] for v in kernel.inputs])[0].numpy()
    np.testing.assert_allclose(got, env[y], rtol=1e-5, atol=1e-5)


def test_run_checks_inputs_and_fills_preallocated_outputs():
    b = Builder()
    x = b.input((6, 10))
    s = b.unary(Op.RELU, x)
    g, members, outs = finish(b, s, b.reduce(Op.SUM, s, [1], keepdims=False))
    kernel = codegen.build_kernel(g, members, outs)
    xv = np.random.default_rng(0).standard_normal((6, 10)).astype(np.float32)
    out = [torch.full((6, 10), 7.0), torch.full((6,), 7.0)]
    res = kernel.run([torch.from_numpy(xv)], out=out)
    assert res[0] is out[0] and res[1] is out[1]
    np.testing.assert_allclose(out[1].numpy(), np.maximum(xv, 0).sum(1), rtol=1e-5)
    with pytest.raises(InputError, match="input 0"):
        kernel.run([np.zeros((6, 11), np.float32)])
    with pytest.raises(InputError, match="output 1"):
        kernel.run([xv], out=[torch.empty(6, 10), torch.empty(5)])


def test_a_prepared_call_runs_the_kernel_on_its_buffers_and_is_what_measurement_times():
    from kernorch.orchestrate.measure import time_kernel

    b = Builder()
    x = b.input((6, 10))
    g, members, outs = finish(b, b.unary(Op.RELU, x))
    kernel = codegen.build_kernel(g, members, outs)
    xv = torch.from_numpy(np.random.default_rng(1).standard_normal((6, 10)).astype(np.float32))
    out = torch.full((6, 10), 7.0)
    call = kernel.prepared([xv], [out])
    call()
    np.testing.assert_array_equal(out.numpy(), np.maximum(xv.numpy(), 0))
    timed = []

    def timer(fn, provider):
        timed.append(fn)
        fn()
        return 1e-5
    assert time_kernel(kernel, [xv.numpy()], timer).seconds == 1e-5
    (fn,) = timed
    assert fn.__qualname__ == call.__qualname__  # the prepared call, not ``_run``


THREADED = {
    "softmax": lambda b: softmax(b, b.input((256, 300)), -1),
    "softmax_middle": lambda b: softmax(b, b.input((8, 64, 100)), 1),
    "residual_layernorm": lambda b: (lambda s: [s, layer_norm(b, s)])(b.binary(Op.ADD, b.input((64, 768)),
                                                                             b.input((64, 768)))),
    "column_sum": lambda b: b.reduce(Op.SUM, b.input((300, 200)), [0]),
    "transpose": lambda b: b.unary(Op.NEG, b.permute(b.input((200, 300)), (1, 0))),
    "column_stats_then_rows": lambda b: softmax(b, b.binary(Op.SUB, *(lambda x: (x, b.reduce(Op.RMAX, x, [0])))(
        b.input((100, 256)))), -1),
}


def test_threaded_schedules_match_interpreter():
    items = {}
    for name, fn in THREADED.items():
        b = Builder()
        outs = fn(b)
        items[name] = finish(b, *(outs if isinstance(outs, list) else [outs]))
    kernels = codegen.build_many(list(items.values()), num_threads=2)
    for (name, (g, _, outs)), k in zip(items.items(), kernels):
        assert all(p.threads for p in k.spec.body), name
        check(k, g, outs, rtol=2e-5, atol=2e-5)
    assert kernels[-1].spec.workspace > 0 and len(kernels[-1].spec.body) == 2


def _factorizations(n: int, parts: int):
    if parts == 1:
        return [(n,)]
    return [(d, *rest) for d in range(1, n + 1) if n % d == 0 for rest in _factorizations(n // d, parts - 1)]


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.integers(1, 60), st.integers(1, 4), st.integers(1, 4), st.data())
def test_normalized_reshape_offsets_are_exact(n, ra, rb, data):
    """The flat offset of a reshape read, normalized, equals the row-major offset of the output
    (and is affine when the reshape only merges or splits dims)."""
    a = data.draw(st.sampled_from(_factorizations(n, ra)))
    b = data.draw(st.sampled_from(_factorizations(n, rb)))
    m = layout.reshape(a, b)  # b-index -> a-index
    off = flat(m.index, a, b)
    grid = list(np.indices(b))
    want = sum(g * math.prod(b[i + 1:]) for i, g in enumerate(grid))
    assert np.array_equal(np.broadcast_to(ix.evaluate(off, grid), b), want)
    merge_only = all(math.prod(a[: i + 1]) in {math.prod(b[: j + 1]) for j in range(len(b))} or a[i] == 1
                     for i in range(len(a)))
    split_only = all(math.prod(b[: j + 1]) in {math.prod(a[: i + 1]) for i in range(len(a))} or b[j] == 1
                     for j in range(len(b)))
    if merge_only or split_only:
        assert all(isinstance(atom, ix.Var) for atom, _ in off.terms), (a, b, off)
