"""Every switch that changes generated C code is a CodegenOptions field (kernorch/options.py), and
each one is in the keys: flipped, it changes the code of some kernel, that code still matches the
reference interpreter, and its prices live under a version of their own in the tuning database
(a compile with the switch flipped never reads the default code's prices, nor the reverse)."""

import dataclasses

import numpy as np
import pytest

from cg_util import THREADS, check, finish, window_reduce
from kernorch import codegen
from kernorch.codegen import gemm, window, winograd
from kernorch.codegen.version import CODEGEN_VERSION, codegen_version
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.orchestrate.candidate import multi_output
from kernorch.orchestrate.from_graph import dag_from_graph
from kernorch.orchestrate.measure import MeasuredCost
from kernorch.orchestrate.tuning_db import TuningDB
from kernorch.options import DEFAULT_CODEGEN, CodegenOptions, Options, OptionsError

FIELDS = [f.name for f in dataclasses.fields(CodegenOptions)]


def _flipped(name: str) -> list[CodegenOptions]:
    """The other values worth trying for one field: a switch off, a size at both extremes."""
    default = getattr(DEFAULT_CODEGEN, name)
    values = [not default] if isinstance(default, bool) else [0, 1 << 30]
    return [dataclasses.replace(DEFAULT_CODEGEN, **{name: v}) for v in values]


def _conv(nhwc: bool, side: int = 28, cin: int = 16, cout: int = 64, k: int = 3):
    rng = np.random.default_rng(3)
    b = Builder()
    x = b.permute(b.input((1, side, side, cin)), (0, 3, 1, 2)) if nhwc else b.input((1, cin, side, side))
    w = b.constant(rng.standard_normal((cout, cin, k, k)).astype(np.float32))
    y = b.conv(x, w, b.constant(rng.standard_normal(cout).astype(np.float32)), ConvAttrs((1, 1), (k // 2,) * 4,
                                                                                           (1, 1), 1))
    return finish(b, b.unary(Op.RELU, b.permute(y, (0, 2, 3, 1)) if nhwc else y))


def _matmul(m: int, k: int = 64, n: int = 96):
    rng = np.random.default_rng(4)
    b = Builder()
    return finish(b, b.matmul(b.input((1, m, k)), b.constant(rng.standard_normal((k, n)).astype(np.float32))))


def _depthwise():
    rng = np.random.default_rng(5)
    b = Builder()
    x = b.permute(b.input((1, 10, 10, 24)), (0, 3, 1, 2))
    y = b.conv(x, b.constant(rng.standard_normal((24, 1, 3, 3)).astype(np.float32)), None,
               ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 24))
    return finish(b, b.permute(y, (0, 2, 3, 1)))


def _avg_pool():
    b = Builder()
    x = b.input((1, 8, 14, 14))
    return finish(b, b.binary(Op.MUL, window_reduce(b, x, Op.SUM, 3, 1, 1, 0.0), b.scalar(1 / 9)))


# kernels whose code some switch decides: Winograd and windows read in place (convolutions), the
# GEMM's prefetch and its split by rows (short along k; a small weight with many row blocks), depthwise row tiles
KERNELS = {"conv3x3 channels-last": lambda: _conv(True), "conv3x3 NCHW": lambda: _conv(False, side=20),
           "matmul 24 rows": lambda: _matmul(24), "matmul k=16": lambda: _matmul(24, k=16),
           "matmul 1024 rows": lambda: _matmul(1024, k=48), "matmul 288 KiB weight": lambda: _matmul(512, 256, 288),
           "average pool": _avg_pool, "depthwise 3x3 channels-last": _depthwise}


@pytest.fixture(scope="module")
def default_sources():
    return {name: codegen.lower(*make(), num_threads=THREADS) for name, make in KERNELS.items()}


@pytest.mark.parametrize("name", FIELDS)
def test_each_switch_changes_some_kernel_and_that_code_is_right(name, default_sources):
    for options in _flipped(name):
        changed = []
        for kernel, make in KERNELS.items():
            g, members, outputs = make()
            spec = codegen.lower(g, members, outputs, num_threads=THREADS, options=options)
            if spec.body != default_sources[kernel].body or spec.packs != default_sources[kernel].packs:
                changed.append(kernel)
                built = codegen.build_kernel(g, members, outputs, num_threads=THREADS, options=options)
                assert built.provider == "c" and built.spec.options == options
                check(built, g, outputs, rtol=1e-4, atol=1e-4)
        assert changed, f"{options.changed()} changed the code of none of {sorted(KERNELS)}"


@pytest.mark.parametrize("name", FIELDS)
def test_each_switch_is_in_the_version_that_keys_prices(name, tmp_path):
    versions = {codegen_version(o) for o in _flipped(name)}
    assert CODEGEN_VERSION not in versions and len(versions) == len(_flipped(name))
    g, members, outputs = _matmul(24)
    db = TuningDB(tmp_path / "t.sqlite")
    dag = dag_from_graph(g)
    cand = multi_output(dag, dag.succs)
    flipped = MeasuredCost(g, db, threads=THREADS, providers=[], codegen_options=_flipped(name)[0])
    assert flipped.version in versions
    assert flipped(cand) is not None  # measured and stored under the flipped version
    default = MeasuredCost(g, db, threads=THREADS, providers=[])
    assert default.version == CODEGEN_VERSION
    assert db.get(default.key(cand), default.target, default.version) == {}  # the default code's price is unknown
    assert db.get(flipped.key(cand), flipped.target, flipped.version)


def test_no_switch_left_as_a_module_global():
    """The switches that were module globals once: gone, so flipping one means a CodegenOptions."""
    left = [f"{m.__name__}.{n}" for m, names in ((winograd, ["WINOGRAD"]), (window, ["WINDOW_SUMS"]),
                                                 (gemm, ["PREFETCH", "SHORT_K", "ROWS_FIRST_BYTES", "WINDOWS_IN_PLACE"]))
            for n in names if hasattr(m, n)]
    assert not left


def test_options_carry_them_and_unknown_names_are_one_line():
    assert Options().codegen == DEFAULT_CODEGEN and DEFAULT_CODEGEN.tag() == "" and DEFAULT_CODEGEN.changed() == {}
    off = CodegenOptions(winograd=False)
    assert CodegenOptions.from_changed(off.changed()) == off
    with pytest.raises(OptionsError, match="^unknown code generator option\\(s\\) winogrd$"):
        CodegenOptions.from_changed({"winogrd": False})
