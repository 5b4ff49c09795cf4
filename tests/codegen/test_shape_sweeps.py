"""Shape sweeps through every schedule path of the C code generator, against the interpreter.

Sizes sit around every block boundary (15/16/17 for the 16x16 transpose tile, 1023/1024/1025 for
long SIMD loops and parallel splits) and the kernels are chosen to reach each path of
codegen/schedule.py and loops.py: tiled transposed reads (dims >= 16 and not multiples of 16),
split loops (pad masks, concat pieces, edge clamps), multi-stage groups (softmax, layer norm),
per-thread accumulator arrays (column reductions, pooling windows), and scratch memory between
parallel groups. ``test_every_path_is_reached`` fails if the sweep stops reaching one of them.

The last test builds a few of these kernels with AddressSanitizer (gcc -fsanitize=address) in a
subprocess and runs them there: an out-of-bounds read or write fails it even when the values
happen to come out right."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

from cg_util import check, finish, layer_norm, softmax
from kernorch import codegen
from kernorch.codegen.c import emit_kernel
from kernorch.codegen.kernel import Loop, Parallel
from kernorch.codegen.lower import lower
from kernorch.ir import layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op


# ---------------------------------------------------------------------------------------------
# Cases: name -> builder(b) -> outputs; built at a thread count (schedules depend on it)
# ---------------------------------------------------------------------------------------------

def _transpose(shape, perm, extra=Op.EXP):
    def case(b):
        x = b.input(shape)
        t = b.view(x, layout.permute(shape, perm))
        return b.unary(extra, t)
    return case


def _transpose_add(a, c, batch):
    """y = x^T + z: one transposed and one contiguous read (the tile must serve both)."""
    def case(b):
        x = b.input((batch, a, c))
        z = b.input((batch, c, a))
        return b.binary(Op.ADD, b.view(x, layout.permute((batch, a, c), (0, 2, 1))), z)
    return case


def _pad(rows, n, mode, begin=2, end=3):
    def case(b):
        x = b.input((rows, n))
        return b.unary(Op.NEG, b.view(x, layout.pad((rows, n), (0, begin), (0, end), mode, -1.5)))
    return case


def _concat(rows, n1, n2):
    def case(b):
        x, y = b.input((rows, n1)), b.input((rows, n2))
        return b.unary(Op.EXP, b.concat([x, y], 1))
    return case


def _softmax(shape, axis):
    def case(b):
        return softmax(b, b.input(shape), axis)
    return case


def _layer_norm(shape):
    def case(b):
        return layer_norm(b, b.input(shape))
    return case


def _column_softmax(rows, cols):
    """Reduce over the leading axis then divide: stages that cannot share an outer index."""
    def case(b):
        x = b.input((rows, cols))
        e = b.unary(Op.EXP, x)
        return b.binary(Op.DIV, e, b.reduce(Op.SUM, e, [0]))
    return case


def _column_sum(rows, cols):
    def case(b):
        return b.reduce(Op.SUM, b.input((rows, cols)), [0])
    return case


def _pool(n, k, s, p):
    def case(b):
        x = b.input((1, 2, n, n))
        oh = (n + 2 * p - k) // s + 1
        v = b.view(x, layout.window((1, 2, n, n), (k, k), (s, s), (p, p), (1, 1), (oh, oh), float("-inf")))
        return b.reduce(Op.RMAX, v, [4, 5], keepdims=False)
    return case


def _elementwise(n):
    def case(b):
        x, y = b.input((n,)), b.input((n,))
        return b.binary(Op.MUL, b.unary(Op.TANH, x), y)
    return case


def _cases():
    cases = {}
    for a in (15, 16, 17, 33):
        for c in (15, 16, 17, 33):
            cases[f"transpose_{a}x{c}"] = (_transpose((8, a, c), (0, 2, 1)), 1)
    cases["transpose_2d_17x33"] = (_transpose((17, 33), (1, 0)), 1)
    cases["transpose_add_17x33"] = (_transpose_add(17, 33, 8), 1)
    cases["transpose_add_33x17_t2"] = (_transpose_add(33, 17, 16), 2)
    cases["transpose_3d_17x33x18"] = (_transpose((4, 17, 33, 18), (0, 3, 1, 2)), 1)
    for n in (15, 16, 17, 1023, 1025):
        for mode in ("constant", "edge", "reflect"):
            cases[f"pad_{mode}_{n}"] = (_pad(8, n, mode), 1)
        cases[f"concat_{n}"] = (_concat(8, n, 17), 1)
    for n in (15, 16, 17, 1023, 1024, 1025):
        cases[f"softmax_rows_{n}"] = (_softmax((8, n), 1), 2)
    for n in (15, 16, 17):
        cases[f"softmax_middle_{n}"] = (_softmax((4, n, 17), 1), 2)
        cases[f"layer_norm_{n}"] = (_layer_norm((6, n)), 2)
        cases[f"column_sum_{n}x33"] = (_column_sum(n, 33), 2)
        cases[f"column_softmax_{n}"] = (_column_softmax(64, n), 4)
    cases["layer_norm_1025"] = (_layer_norm((3, 1025)), 2)
    for n, k, s, p in ((15, 3, 2, 1), (16, 3, 1, 1), (17, 2, 2, 0)):
        cases[f"pool_{n}_{k}_{s}_{p}"] = (_pool(n, k, s, p), 2)
    for n in (1023, 1024, 1025):
        cases[f"elementwise_{n}"] = (_elementwise(n), 4)
    return cases


CASES = _cases()


def _paths(spec) -> set[str]:
    """Which schedule paths this kernel took."""
    found = set()
    if spec.workspace:
        found.add("scratch")
    if any("," in n for n in spec.notes):
        found.add("multi-stage")
    if sum(isinstance(s, Parallel) for s in spec.body) > 1:
        found.add("groups")

    def walk(stmts, depth):
        loops = [s for s in stmts if isinstance(s, Loop)]
        # a split: sibling loops over one loop nest (their ranges differ) in the same parent
        if len(loops) > 1 and len({(lp.hi.const - lp.lo.const) for lp in loops if lp.hi.is_const and lp.lo.is_const}) > 1:
            found.add("split")
        for s in stmts:
            if isinstance(s, Parallel):
                if s.arrays:
                    found.add("arrays")
                walk(s.body, depth + 1)
            elif isinstance(s, Loop):
                if not s.hi.is_const:
                    found.add("tile")
                walk(s.body, depth + 1)
    walk(spec.body, 0)
    return found


@pytest.fixture(scope="module")
def built():
    """Every case built, grouped by thread count, one compiler call per group."""
    out = {}
    by_threads: dict[int, list[str]] = {}
    for name, (_, threads) in CASES.items():
        by_threads.setdefault(threads, []).append(name)
    for threads, names in by_threads.items():
        items = []
        for name in names:
            b = Builder()
            outs = CASES[name][0](b)
            items.append(finish(b, *(outs if isinstance(outs, (list, tuple)) else [outs])))
        kernels = codegen.build_many(items, num_threads=threads)
        for name, item, k in zip(names, items, kernels):
            out[name] = (*item, k, threads)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_sweep_matches_interpreter(built, name):
    g, members, outputs, kernel, _ = built[name]
    check(kernel, g, outputs, seed=zlib.crc32(name.encode()) % 1000, rtol=2e-5, atol=2e-5)


def test_every_path_is_reached(built):
    reached: dict[str, list[str]] = {}
    for name, (g, members, outputs, _, threads) in built.items():
        for p in _paths(lower(g, members, outputs, num_threads=threads)):
            reached.setdefault(p, []).append(name)
    for p in ("tile", "split", "multi-stage", "groups", "scratch", "arrays"):
        assert reached.get(p), f"no sweep case reaches the {p} path; reached: {sorted(reached)}"
    # the case: a transposed read whose dims are >= 16 and not multiples of 16 is tiled
    assert "transpose_17x33" in reached["tile"] and "transpose_33x17" in reached["tile"]


# ---------------------------------------------------------------------------------------------
# AddressSanitizer
# ---------------------------------------------------------------------------------------------

ASAN_CASES = ["transpose_17x33", "transpose_33x17", "transpose_add_17x33", "transpose_3d_17x33x18",
              "pad_reflect_17", "pad_constant_1025", "concat_17", "softmax_rows_1025", "column_softmax_17",
              "column_sum_17x33", "pool_15_3_2_1", "layer_norm_1025"]

ASAN_SCRIPT = textwrap.dedent("""
    import sys
    sys.path[:0] = sys.argv[2].split(":")
    from kernorch.codegen import toolchain
    toolchain.FLAGS = tuple(f for f in toolchain.FLAGS if f != "-O3") + ("-O1", "-g", "-fsanitize=address",
                                                                         "-fno-omit-frame-pointer")
    import test_shape_sweeps as T
    from cg_util import check, finish
    from kernorch import codegen
    from kernorch.ir.graph import Builder
    names = sys.argv[1].split(",")
    for name in names:
        fn, threads = T.CASES[name]
        b = Builder()
        outs = fn(b)
        g, m, o = finish(b, *(outs if isinstance(outs, (list, tuple)) else [outs]))
        (k,) = codegen.build_many([(g, m, o)], num_threads=threads)
        check(k, g, o, rtol=2e-5, atol=2e-5)
        print("ok", name, flush=True)
""")


def _libasan() -> str | None:
    try:
        cc = codegen.toolchain.compiler()
        path = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:  # noqa: BLE001 - no compiler: skip
        return None
    return path if path and os.path.isabs(path) and Path(path).exists() else None


def test_kernels_under_address_sanitizer(tmp_path):
    lib = _libasan()
    if lib is None:
        pytest.skip("AddressSanitizer (libasan) is not available to the C compiler")
    here = Path(__file__).resolve().parent
    env = {**os.environ, "LD_PRELOAD": lib, "KERNORCH_CACHE_DIR": str(tmp_path / "build"),
           "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=23:allocator_may_return_null=1"}
    proc = subprocess.run([sys.executable, "-c", ASAN_SCRIPT, ",".join(ASAN_CASES), f"{here}:{here.parent}"],
                          capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0 and "ok " not in proc.stdout and "AddressSanitizer" not in proc.stderr:
        if "ASan runtime does not come first" in proc.stderr or "incompatible" in proc.stderr:
            pytest.skip(f"AddressSanitizer cannot run in this Python: {proc.stderr.strip().splitlines()[-1]}")
    assert "ERROR: AddressSanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-4000:])
    assert proc.stdout.count("ok ") == len(ASAN_CASES), proc.stdout


# ---------------------------------------------------------------------------------------------
# Regressions found by bench/fuzz.py
# ---------------------------------------------------------------------------------------------

def _gather_concat(b):
    """Fuzz seed 100041: Gather with constant indices (a table lookup) read through a concat along
    the gathered axis. In the other concat piece the lookup's argument leaves the table (the
    select discards that value), and the C text indexed the static table out of bounds, then
    the input at a garbage offset: a segfault. Lookups clamp their argument as Triton's do."""
    x = b.input((1, 2, 6, 5))
    gathered = b.view(x, layout.take((1, 2, 6, 5), 2, np.array([-5, -6, 1])))
    both = b.concat([gathered, gathered], 1)
    return b.concat([both, both], 2)


CASES["regression_gather_concat_lookup"] = (_gather_concat, 1)
ASAN_CASES.append("regression_gather_concat_lookup")


def test_rendered_table_lookups_stay_inside_the_table():
    from kernorch.ir import index as ix

    e = ix.lookup([1, 0, 1], ix.var(0) - 3, (6,))
    src = ix.render(e, lambda i: f"i{i}", (6,), lambda t: "T")
    assert "kn_min(" in src and "kn_max(" in src, src
    inside = ix.lookup([1, 0, 1], ix.var(0), (3,))
    assert "kn_min" not in ix.render(inside, lambda i: f"i{i}", (3,), lambda t: "T")
