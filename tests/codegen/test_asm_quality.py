"""The generated GEMM's hot loops, read in the assembly gcc makes of them for CPUs we do not have.

Speed measured on one processor says nothing about another: a memcpy into a vector temporary
compiled to one 64-byte move under -mtune=znver4 and to two 32-byte loads, stores and a 64-byte
reload (a store-forwarding stall at every k, 3-9x slower) under tunings that cap moves at 256 bits
(gcc 12's -march=native on a Sapphire Rapids VM: rocketlake). So the hot loops
are compiled with ``-S`` for a matrix of -march / -mtune targets and must show, on each: FMAs of
the widest vectors the target has, one per accumulator, no vector register spilled to or reloaded
from the stack, and no vector moved in halves. Runs on any x86 machine with gcc (nothing executes).
"""

from __future__ import annotations

import platform
import shutil
import subprocess

import pytest

from kernorch.codegen import depthwise, gemm_helpers, toolchain
from tests.codegen.asm_loops import TILE_PROBES, Loop, functions, inner_loops

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or not shutil.which("gcc"),
                                reason="reads x86 assembly made by gcc")

# name -> flags replacing -march=native. Zen 4 needs gcc 13; an older gcc gets Zen 3 with Zen 4's
# AVX-512 subsets (the ISA the code is written for; the tuning is Zen 3's).
TARGETS = {
    "x86-64-v3": ["-march=x86-64-v3"],
    "skylake-avx512": ["-march=skylake-avx512"],
    "icelake-server": ["-march=icelake-server"],
    "sapphirerapids": ["-march=sapphirerapids"],
    "rocketlake": ["-march=rocketlake"],  # what gcc 12's -march=native makes of a Sapphire Rapids VM
    "skylake-avx512, tuned sapphirerapids": ["-march=skylake-avx512", "-mtune=sapphirerapids"],
    "znver3": ["-march=znver3"],
    "znver4": ["-march=znver4"],
    "native, tuned generic": ["-march=native", "-mtune=generic"],
}
ZNVER4_ON_OLD_GCC = ["-march=znver3", "-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl", "-mavx512vnni",
                     "-mavx512bf16"]

PROBES = TILE_PROBES + r"""
void probe_dot_rows(int64_t mr, int64_t K, const float *a, int64_t lda, int64_t N, const float *w, float *t)
{ kn_dot_rows(mr, K, a, lda, N, w, t); }
void __attribute__((flatten)) probe_tile_1row(int64_t K, const float *a, const float *bp, float *t)
{ kn_gemm_tile(1, K, a, K, bp, t, 0); }  /* a one-row product (a classifier head, a decoding step) */
void probe_dw_1(const float *x, int64_t hs, int64_t ws, int64_t kh0, int64_t kh1, int64_t KW, int64_t sw, int64_t dw,
                const float *w, float *t, int64_t ld) { kn_dw_inside(1, x, hs, ws, kh0, kh1, KW, sw, dw, w, t, ld); }
void probe_dw_2(const float *x, int64_t hs, int64_t ws, int64_t kh0, int64_t kh1, int64_t KW, int64_t sw, int64_t dw,
                const float *w, float *t, int64_t ld) { kn_dw_inside(2, x, hs, ws, kh0, kh1, KW, sw, dw, w, t, ld); }
void probe_dw_tile_2(const float *x, const float *w, float *t)  /* as a kernel calls it: 144 channels at 56x56 */
{ kn_dw_tile(28, 5, 0, x, 56, 56, 8064, 144, 3, 3, 1, 1, 1, 1, 1, 1, w, 144, 160, t); }
"""


def _flags(target: str) -> list[str]:
    own = [f for f in toolchain.FLAGS if f not in ("-march=native", "-shared", "-w")]
    flags = TARGETS[target]
    probe = subprocess.run(["gcc", *flags, "-x", "c", "-E", "-", "-o", "/dev/null"], input="", text=True,
                           capture_output=True)
    if probe.returncode != 0 and target == "znver4":
        flags = ZNVER4_ON_OLD_GCC
    return [*own, *flags, "-w"]


def _width(flags: list[str]) -> str:
    """The widest vector register the flags give: z (AVX-512), y (AVX) or x, from gcc's own macros."""
    macros = subprocess.run(["gcc", *flags, "-dM", "-E", "-x", "c", "-"], input="", text=True,
                            capture_output=True, check=True).stdout
    return "z" if "__AVX512F__" in macros else "y" if "__AVX__" in macros else "x"


@pytest.fixture(scope="module", params=sorted(TARGETS))
def compiled(request, tmp_path_factory):
    flags = _flags(request.param)
    src = tmp_path_factory.mktemp("asm") / "helpers.c"
    src.write_text("#include <stdint.h>\n" + gemm_helpers.HELPERS + depthwise.HELPERS + PROBES)
    asm = subprocess.run(["gcc", *flags, "-S", str(src), "-o", "-"], capture_output=True, text=True, check=True)
    return request.param, _width(flags), functions(asm.stdout)


def _hot_loops(fns: dict[str, list[str]], names: tuple[str, ...], width: str) -> list[Loop]:
    """The innermost loops of ``names`` (a probe and what may be inlined into it) that sum products in
    vectors: packed multiply-adds and no scalar arithmetic (which marks the scalar tail along k, when
    gcc vectorizes it as an in-order reduction of a few lanes)."""
    loops = [lp for name in names if name in fns for lp in inner_loops(name, fns[name])]
    return [lp for lp in loops if lp.packed_products(width) and not lp.scalar_float_ops()]


def _check(target: str, width: str, loops: list[Loop], accumulators: int, what: str) -> None:
    assert loops, f"{target}: {what} has no loop of {width}mm FMAs"
    counts = [lp.packed_products(width) for lp in loops]
    # the main loop: one FMA per accumulator a k step, unrolled at most 4 times; a tile's other loops are
    # its partial passes (fewer rows, or every 2nd or 4th k of a few) and their tails
    mains = [lp for lp, n in zip(loops, counts) if n % accumulators == 0 and n <= 4 * accumulators]
    assert mains, f"{target}: {what}'s main loop should have {accumulators} {width}mm FMAs a k step (one per " \
                  f"accumulator, unrolled at most 4 times): {counts}"
    for lp in loops:
        assert not lp.vector_stack_traffic(), f"{target}: {what} spills vectors in a hot loop: " \
                                              f"{lp.vector_stack_traffic()[:3]}"
        assert not lp.narrow_moves(width), f"{target}: {what} moves {width}mm vectors in halves: " \
                                           f"{lp.narrow_moves(width)[:3]}"
    # the main loop only: gcc's Zen tunings fold B's loads into the FMAs of a partial pass (fewer rows,
    # registers to spare) too, a tail that runs for a tile's last rows
    for lp in mains:
        assert not lp.repeated_reads(), \
            f"{target}: {what} reloads values it should keep in registers: {lp.repeated_reads()[:3]}"


@pytest.mark.parametrize("tile", ["kn_gemm_tile", "kn_gemm_tile16", "kn_gemm_tile_at"])
def test_gemm_tiles_keep_accumulators_in_registers(compiled, tile):
    target, width, fns = compiled
    if width == "x":
        pytest.skip("no FMA on this target")
    probe = "probe_" + tile.removeprefix("kn_gemm_")
    loops = _hot_loops(fns, (probe, tile, tile + "_pass", *(f"{tile}_rows{n}" for n in (1, 2, 4))), width)
    _check(target, width, loops, 12, tile)


def test_a_one_row_pass_sums_enough_chains_to_fill_the_fma_units(compiled):
    """A pass of one row and two vectors sums every 4th k into its own pair of accumulators: KN_CHAINS (8)
    independent FMAs a step rather than 2, each waiting 4 cycles on the one before it."""
    target, width, fns = compiled
    if width == "x":
        pytest.skip("no FMA on this target")
    _check(target, width, _hot_loops(fns, ("probe_tile_1row",), width), 8, "a one-row pass")


def test_dot_products_keep_accumulators_in_registers(compiled):
    """Every kn_dots_P_N the kernels call on this ISA (KN_DOTS4_N, KN_DOTS2_N)."""
    target, width, fns = compiled
    if width == "x":
        pytest.skip("no FMA on this target")
    four, two = gemm_helpers.DOTS_CHANNELS["avx512" if width == "z" else "narrow"]
    for p, n_max in ((1, gemm_helpers._ND), (2, two), (4, four)):
        for n in range(1, n_max + 1):
            name = f"kn_dots_{p}_{n}"
            _check(target, width, _hot_loops(fns, (name,), width), p * n, name)


@pytest.mark.parametrize("probe", ["dw_1", "dw_2", "dw_tile_2"])
def test_depthwise_taps_keep_accumulators_in_registers(compiled, probe):
    """kn_dw_inside: one FMA per pixel and vector at each tap, the weight vectors loaded once a tap; and the whole
    tile as a kernel calls it, sizes constant (gcc's predictive commoning carried loads across taps there and
    spilled an accumulator, until KN_DW_OPT turned it off)."""
    target, width, fns = compiled
    if width == "x":
        pytest.skip("no FMA on this target")
    name, vectors = f"probe_{probe}", int(probe[-1])
    names = (name, "kn_dw_inside", *(f for f in fns if f.startswith("kn_dw_tile")))
    _check(target, width, _hot_loops(fns, names, width), depthwise.PIXELS * vectors, name)


def test_the_checks_catch_a_split_memcpy_load():
    """The checks fail on the code that was slow on Sapphire Rapids: a 64-byte memcpy into a vector."""
    slow = gemm_helpers.HELPERS.replace(
        "#define KN_LOAD(p) (*(const kn_vec *)(p))",
        "static inline kn_vec kn_load(const float *p) { kn_vec v; memcpy(&v, p, sizeof v); return v; }\n"
        "#define KN_LOAD(p) kn_load(p)")
    assert slow != gemm_helpers.HELPERS
    flags = _flags("rocketlake")
    asm = subprocess.run(["gcc", *flags, "-S", "-x", "c", "-", "-o", "-"], input="#include <stdint.h>\n" + slow
                         + PROBES, capture_output=True, text=True, check=True).stdout
    loops = _hot_loops(functions(asm), ("probe_tile", "kn_gemm_tile", "kn_gemm_tile_rows1"), "z")
    with pytest.raises(AssertionError, match="spills|halves|main loop"):
        _check("rocketlake", "z", loops, 12, "kn_gemm_tile")


def test_the_checks_catch_a_tile_wider_than_the_registers():
    """The checks fail on the tile that was slow on Zen 3: passes of 3 rows x 4 AVX2 vectors need 17
    registers, and gcc's znver3 tuning folded each B load into its FMAs (read 3 times a k step)."""
    wide = gemm_helpers.HELPERS.replace("#define KN_GEMM_TILE_PASS_VECS ((32 / KN_VW) < 2 ? (32 / KN_VW) : 2)",
                                        "#define KN_GEMM_TILE_PASS_VECS (32 / KN_VW)")
    assert wide != gemm_helpers.HELPERS
    asm = subprocess.run(["gcc", *_flags("znver3"), "-S", "-x", "c", "-", "-o", "-"], input="#include <stdint.h>\n"
                         + wide + PROBES, capture_output=True, text=True, check=True).stdout
    loops = _hot_loops(functions(asm), ("probe_tile", "kn_gemm_tile", "kn_gemm_tile_rows1"), "y")
    with pytest.raises(AssertionError, match="reloads|spills"):
        _check("znver3", "y", loops, 12, "kn_gemm_tile")


def test_the_checks_catch_a_one_row_pass_of_two_chains():
    """The one-row check fails on the pass before c29: one row summed k after k in two accumulators."""
    serial = gemm_helpers.HELPERS.replace("#define KN_CHAINS 8", "#define KN_CHAINS 0")
    assert serial != gemm_helpers.HELPERS
    asm = subprocess.run(["gcc", *_flags("znver3"), "-S", "-x", "c", "-", "-o", "-"], input="#include <stdint.h>\n"
                         + serial + PROBES, capture_output=True, text=True, check=True).stdout
    with pytest.raises(AssertionError, match="main loop"):
        _check("znver3", "y", _hot_loops(functions(asm), ("probe_tile_1row",), "y"), 8, "a one-row pass")


def _requantized_add(dtype: str):
    """A residual add of two dequantized ``dtype`` tensors, requantized: an int8 plan's kernel (or, on
    float32 data, the same arithmetic without the bytes)."""
    from kernorch.ir.graph import Builder, Graph
    from kernorch.ir.prims import Op

    g = Graph()
    b = Builder(g)
    xs = [b.input((1, 8, 8, 256), dtype) for _ in range(2)]  # NHWC, as int8 plans keep it
    d = [b.binary(Op.MUL, b.binary(Op.SUB, b.cast(x, "float32"), b.scalar(3.0)), b.scalar(0.05)) for x in xs]
    y = b.unary(Op.ROUND, b.binary(Op.DIV, b.binary(Op.ADD, *d), b.scalar(0.07)))
    y = b.binary(Op.MIN, b.binary(Op.MAX, y, b.scalar(0.0)), b.scalar(255.0))
    g.outputs = [b.cast(y, dtype)]
    return g


@pytest.mark.parametrize("target", ["rocketlake", "sapphirerapids", "skylake-avx512"])
def test_byte_kernels_convert_in_512_bit_vectors(target):
    """A kernel reading and writing uint8 widens bytes to floats in zmm registers even where the
    tuning prefers 256-bit vectors (KN_BYTES); a float32 kernel keeps the tuning's choice."""
    from kernorch.codegen.c import HEADER, emit_kernel
    from kernorch.codegen.lower import lower

    sources = {}
    for dtype in ("uint8", "float32"):
        g = _requantized_add(dtype)
        sources[dtype] = emit_kernel(lower(g, {p.output for p in g.prims}, g.outputs, name=f"k_{dtype}",
                                           num_threads=2))
    assert "KN_BYTES void k_uint8" in sources["uint8"] and "KN_BYTES" not in sources["float32"]
    header = HEADER % {"mvec": ""} if "%(mvec)s" in HEADER else HEADER
    asm = subprocess.run(["gcc", *_flags(target), "-S", "-x", "c", "-", "-o", "-"], input=header + sources["uint8"],
                         capture_output=True, text=True, check=True).stdout
    loops = [lp for name, body in functions(asm).items() if name.startswith("k_uint8")
             for lp in inner_loops(name, body)]
    assert any(lp.count("vcvtdq2ps", "z") for lp in loops), f"{target}: no zmm conversion in the uint8 kernel's loops"
