"""Layout conversions run whole 16x16 tiles through ``kn_transpose16`` (codegen/transpose.py) and
the ragged edges through the generic loops: permutations of many shapes match the reference
interpreter exactly, the helper is used where there are whole tiles, and the helper itself (the
AVX-512 shuffles, AVX2's 8x8 blocks and the scalar fallback, each compiled on its own) is a
transpose."""

import ctypes
import platform
import re
import shutil
import subprocess

import numpy as np
import pytest

from kernorch import codegen
from kernorch.codegen.toolchain import compiler
from kernorch.codegen.transpose import HELPER
from kernorch.ir import layout
from kernorch.ir.graph import Builder

from .cg_util import THREADS, check

CASES = [
    ((256, 512), (1, 0), True),                  # tokens <-> features
    ((1, 24, 24, 128), (0, 3, 1, 2), True),      # NHWC -> NCHW, 128 channels
    ((1, 48, 21, 19), (0, 2, 3, 1), True),       # NCHW -> NHWC, ragged pixels
    ((50, 64), (1, 0), True),                    # ragged rows per thread (25)
    ((64, 50), (1, 0), True),                    # ragged columns
    ((37, 53), (1, 0), False),                   # no split into 2 threads keeps 16 to tile
    ((3, 40, 35), (2, 0, 1), False),
    ((2, 17, 33, 16), (0, 3, 1, 2), True),
    ((1, 8, 30, 30), (0, 2, 3, 1), False),       # 8 channels: nothing to tile
    ((5, 7), (1, 0), False),
]


@pytest.mark.parametrize("shape,perm,tiles", CASES)
def test_permutes_match_the_interpreter_exactly(shape, perm, tiles):
    b = Builder()
    y = b.permute(b.input(shape), perm)
    b.g.outputs = [y]
    kernel = codegen.build_kernel(b.g, {p.output for p in b.g.prims}, [y], num_threads=THREADS)
    check(kernel, b.g, [y], rtol=0, atol=0)
    assert ("kn_transpose16(" in _body(kernel)) == tiles


def _body(kernel) -> str:
    """The kernel function itself, after the header's helpers (``kn_transpose16`` among them)."""
    return kernel.source.split("void kn_")[-1]


def test_a_strided_slice_is_transposed_from_its_offset():
    b = Builder()
    x = b.input((40, 70))
    s = b.view(x, layout.slice_((40, 70), (3, 5), (1, 1), (33, 64)))
    y = b.permute(s, (1, 0))
    b.g.outputs = [y]
    kernel = codegen.build_kernel(b.g, {p.output for p in b.g.prims}, [y], num_threads=THREADS)
    check(kernel, b.g, [y], rtol=0, atol=0)
    # The header defines the helper in every kernel: look at the calls in the kernel's own body.
    # One call site (inside the tile loops), reading from the slice's offset 3 * 70 + 5 = 215 with
    # the input's row stride 70 and writing rows of 33.
    calls = [line.strip() for line in _body(kernel).splitlines() if "kn_transpose16(" in line]
    assert len(calls) == 1 and re.search(r"\+ 215\), 70, \(out0 .*\), 33\);$", calls[0]), calls


_PROBE = "\nvoid run(const float *s, int64_t ss, float *d, int64_t ds) { kn_transpose16(s, ss, d, ds); }\n"


@pytest.mark.parametrize("flags", [[], ["-mno-avx512f"], ["-mno-avx512f", "-mno-avx"]],
                         ids=["native", "no-avx512", "no-avx"])
def test_the_helper_is_a_transpose(tmp_path, flags):
    src = tmp_path / "t.c"
    src.write_text("#include <stdint.h>\n" + HELPER + _PROBE)
    lib = tmp_path / "t.so"
    subprocess.run([compiler(), "-O2", "-march=native", *flags, "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    run = ctypes.CDLL(str(lib)).run
    src_rows = np.arange(16 * 21, dtype=np.float32).reshape(16, 21)  # row stride 21, 16 used
    dst = np.full((16, 19), -1, np.float32)
    run(src_rows.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(21), dst.ctypes.data_as(ctypes.c_void_p),
        ctypes.c_int64(19))
    np.testing.assert_array_equal(dst[:, :16], src_rows[:, :16].T)
    assert (dst[:, 16:] == -1).all()


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or not shutil.which("gcc"), reason="x86 assembly")
def test_avx2_blocks_are_transposed_in_registers():
    """With AVX2 (and no AVX-512) a 16x16 block is four 8x8 transposes of ymm shuffles, not 256 scalar
    moves (the fallback a layout conversion ran on Zen 3 before)."""
    asm = subprocess.run(["gcc", "-O3", "-march=x86-64-v3", "-S", "-x", "c", "-", "-o", "-"], capture_output=True,
                         text=True, check=True, input="#include <stdint.h>\n" + HELPER + _PROBE).stdout
    assert "vperm2f128" in asm and "vunpcklps" in asm and "vmovss" not in asm
