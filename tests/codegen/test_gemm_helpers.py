"""The C helpers of generated GEMMs (codegen/gemm_helpers.py) on their own: the register-blocked
tiles and the dot products compiled and run against numpy for every row count a pass or a call
can have, on the ISAs whose vector width changes the code (AVX-512, AVX2, SSE); their multiply-
adds contract to FMAs (the only place they may: the kernels build with -ffp-contract=off); gcc
accepts every optimize attribute; exactly the dot products a kernel can call are printed.

The module's builders (``_tile``, ``_dots``, ...) run once, at import, to make ``HELPERS``: the
fixture executes the module anew, so that the header these tests compile is made under the test.
"""

from __future__ import annotations

import ctypes
import importlib.util
import platform
import shutil
import subprocess

import numpy as np
import pytest

from kernorch.codegen import gemm_helpers, toolchain
from tests.codegen.asm_loops import TILE_PROBES

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or not shutil.which("gcc"),
                                reason="compiles the x86 helpers with gcc")

PROBES = r"""
int probe_vw(void) { return KN_VW; }
int probe_fma(void) {
#ifdef __FMA__
  return 1;
#else
  return 0;
#endif
}
int probe_dots4(void) { return KN_DOTS4_N; }
int probe_dots2(void) { return KN_DOTS2_N; }
""" + TILE_PROBES + r"""
void probe_tile16_at(int64_t mr, int64_t K, const float *a, int64_t lda, const int32_t *wo, const float *bp,
                     float *t, int64_t pf) { kn_gemm_tile16_at(mr, K, a, lda, wo, bp, t, pf); }
/* kn_dots[P / 2][N - 1] on (acc, tail) as given (their sums accumulate); -1 when the table has no function */
int probe_dots(int P, int N, const float *x, int64_t xs, const float *w, int64_t ldw, int64_t len, float *acc,
               float *tail) {
  if (!kn_dots[P / 2][N - 1]) return -1;
  kn_dots[P / 2][N - 1](x, xs, w, ldw, len, (kn_vec *)acc, tail);
  return 0;
}
"""

# the -march the code is compiled for: the native ISA (AVX-512 here), AVX2 + FMA, SSE only (4-float vectors)
ISAS = {"native": "-march=native", "avx2": "-march=x86-64-v3", "sse": "-march=x86-64"}
_F = ctypes.POINTER(ctypes.c_float)


def _fresh_module():
    """gemm_helpers executed anew (under its own name, not put in sys.modules): its builders run now."""
    spec = importlib.util.spec_from_file_location(gemm_helpers.__name__, gemm_helpers.__file__)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _runs_here(march: str) -> bool:
    """Whether code compiled for ``march`` runs on this CPU (its ISA macros are a subset of native's)."""
    def macros(flag):
        out = subprocess.run(["gcc", flag, "-dM", "-E", "-x", "c", "-"], input="", text=True, capture_output=True,
                             check=True).stdout
        return {ln.split()[1] for ln in out.splitlines() if ln.split()[1].startswith(("__SSE", "__AVX", "__FMA"))}
    return macros(march) <= macros("-march=native")


@pytest.fixture(scope="module")
def fresh():
    return _fresh_module()


@pytest.fixture(scope="module", params=sorted(ISAS))
def lib(request, fresh, tmp_path_factory):
    march = ISAS[request.param]
    if not _runs_here(march):
        pytest.skip(f"this CPU does not run {march} code")
    d = tmp_path_factory.mktemp("helpers")
    src = d / "helpers.c"
    src.write_text("#include <stdint.h>\n" + fresh.HELPERS + PROBES)
    flags = [f for f in toolchain.FLAGS if f not in ("-march=native", "-w")]
    out = subprocess.run(["gcc", *flags, march, "-Wattributes", str(src), "-o", str(d / "helpers.so")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    # an optimize attribute gcc does not know is a warning, and is ignored: the FMAs or the scalar tail go
    assert "attribute" not in out.stderr, out.stderr[-3000:]
    so = ctypes.CDLL(str(d / "helpers.so"))
    for name in ("probe_tile", "probe_tile16", "probe_tile_at", "probe_tile16_at", "probe_dots"):
        getattr(so, name).restype = ctypes.c_int if name == "probe_dots" else None
    return request.param, so


def _p(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


def _run_tile(so, name: str, a: np.ndarray, lda: int, K: int, rows: int, bp: np.ndarray, nr: int,
              wo: np.ndarray | None = None, pf: int = 0) -> np.ndarray:
    tile = np.full(((gemm_helpers.MR_NARROW if nr == gemm_helpers.NR_NARROW else gemm_helpers.MR) + 1) * nr, np.nan,
                   np.float32)
    args = [ctypes.c_int64(rows), ctypes.c_int64(K), _p(a), ctypes.c_int64(lda)]
    if wo is not None:
        args.append(_p(wo))
    getattr(so, name)(*args, _p(bp), _p(tile), ctypes.c_int64(pf))
    return tile


TILES = [("probe_tile", gemm_helpers.MR, gemm_helpers.NR), ("probe_tile16", gemm_helpers.MR_NARROW,
                                                              gemm_helpers.NR_NARROW)]


@pytest.mark.parametrize("name, mr, nr", TILES)
@pytest.mark.parametrize("K", [1, 7, 40])
def test_tiles_sum_products_for_every_row_count(lib, name, mr, nr, K):
    """tile[r, 0:nr] = sum_k A[r, k] * bp[k, 0:nr] for 1..mr rows (every pass and its remainder), A
    read with a row stride past K; the rows past ``rows`` and the row past the tile stay untouched."""
    _, so = lib
    rng = np.random.default_rng(K)
    lda = K + 3
    a = rng.standard_normal(mr * lda).astype(np.float32)
    bp = rng.standard_normal(2 * K * nr).astype(np.float32)  # this panel, then the next one (prefetched)
    A = a.reshape(mr, lda)[:, :K].astype(np.float64)
    B = bp[:K * nr].reshape(K, nr).astype(np.float64)
    for rows in range(1, mr + 1):
        for pf in (0, K * nr):
            tile = _run_tile(so, name, a, lda, K, rows, bp, nr, pf=pf).reshape(-1, nr)
            np.testing.assert_allclose(tile[:rows], A[:rows] @ B, rtol=1e-5, atol=1e-5)
            assert np.isnan(tile[rows:]).all(), f"{rows} rows wrote past them"


@pytest.mark.parametrize("name, mr, nr", TILES)
def test_tiles_at_read_a_through_the_offsets(lib, name, mr, nr):
    """The _at tiles read A[r, k] = a[r*lda + wo[k]] (a convolution's windows in place)."""
    _, so = lib
    rng = np.random.default_rng(1)
    K, lda = 13, 5
    wo = rng.permutation(60)[:K].astype(np.int32)
    a = rng.standard_normal(mr * lda + 60).astype(np.float32)
    bp = rng.standard_normal(K * nr).astype(np.float32)
    A = np.array([[a[r * lda + o] for o in wo] for r in range(mr)], np.float64)
    for rows in range(1, mr + 1):
        tile = _run_tile(so, name + "_at", a, lda, K, rows, bp, nr, wo=wo).reshape(-1, nr)
        np.testing.assert_allclose(tile[:rows], A[:rows] @ bp.reshape(K, nr), rtol=1e-5, atol=1e-5)
        assert np.isnan(tile[rows:]).all()


# x0*b0 + x1*b1 with x1*b1 = 1 + 2^-11 + 2^-24 (25 significant bits): a float product rounds the 2^-24 away
# (a tie, to even), an FMA keeps it, so the sum is 2^-24 with FMAs and 0 without
_X = np.array([-1.0, 1 + 2 ** -12], np.float32)
_B = np.array([1 + 2 ** -11, 1 + 2 ** -12], np.float32)


@pytest.mark.parametrize("name, mr, nr", TILES)
def test_tiles_multiply_add_with_fmas(lib, name, mr, nr):
    isa, so = lib
    if not so.probe_fma():
        pytest.skip(f"no FMA on {isa}")
    a = np.tile(_X, mr)
    bp = np.repeat(_B, nr).astype(np.float32)
    tile = _run_tile(so, name, a, 2, 2, mr, bp, nr).reshape(-1, nr)[:mr]
    assert (tile == np.float32(2 ** -24)).all(), tile


def _dots_pn(so, isa: str):
    """The (P, N) a kernel calls on this ISA: one pixel up to the widest, 2 and 4 up to KN_DOTS2_N, KN_DOTS4_N."""
    return [(1, n) for n in range(1, gemm_helpers._ND + 1)] + [(2, n) for n in range(1, so.probe_dots2() + 1)] + \
        [(4, n) for n in range(1, so.probe_dots4() + 1)]


def _run_dots(so, P, N, x, xs, w, ldw, length, acc, tail) -> int:
    return so.probe_dots(P, N, _p(x), ctypes.c_int64(xs), _p(w), ctypes.c_int64(ldw), ctypes.c_int64(length),
                         _p(acc), _p(tail))


def test_dot_products_add_to_their_accumulators(lib):
    """acc[j*N + n] (lanes) + tail[j*N + n] gain sum_k x[j*xs + k] * w[n*ldw + k] over len, for every
    (P, N) a kernel may call, with a scalar tail along k; the sums start from what acc and tail hold."""
    isa, so = lib
    vw = so.probe_vw()
    rng = np.random.default_rng(2)
    for P, N in _dots_pn(so, isa):
        for length in (vw - 1, 2 * vw + 3):
            xs, ldw = length + 2, length + 5
            x = rng.standard_normal(P * xs).astype(np.float32)
            w = rng.standard_normal(N * ldw).astype(np.float32)
            acc = rng.standard_normal(P * N * vw).astype(np.float32)
            tail = rng.standard_normal(P * N).astype(np.float32)
            before = acc.reshape(P * N, vw).sum(1, dtype=np.float64) + tail
            assert _run_dots(so, P, N, x, xs, w, ldw, length, acc, tail) == 0, f"kn_dots[{P // 2}][{N - 1}] is 0"
            got = acc.reshape(P * N, vw).sum(1, dtype=np.float64) + tail
            X = x.reshape(P, xs)[:, :length].astype(np.float64)
            W = w.reshape(N, ldw)[:, :length].astype(np.float64)
            np.testing.assert_allclose(got - before, (X @ W.T).reshape(-1), rtol=1e-4, atol=1e-4,
                                       err_msg=f"kn_dots_{P}_{N}, len {length}")


def test_dot_products_multiply_add_with_fmas(lib):
    """Both the vector loop (lane 0 of acc) and the scalar tail keep the product's low bits."""
    isa, so = lib
    if not so.probe_fma():
        pytest.skip(f"no FMA on {isa}")
    vw = so.probe_vw()
    for P, N in _dots_pn(so, isa):
        length = 2 * vw + 2  # k = 0 and vw in lane 0 of the vector loop, k = 2vw, 2vw + 1 in the tail
        x = np.zeros(P * length, np.float32)
        w = np.zeros(N * length, np.float32)
        for j in range(P):
            x[j * length + np.array([0, vw, 2 * vw, 2 * vw + 1])] = np.tile(_X, 2)
        for n in range(N):
            w[n * length + np.array([0, vw, 2 * vw, 2 * vw + 1])] = np.tile(_B, 2)
        acc = np.zeros(P * N * vw, np.float32)
        tail = np.zeros(P * N, np.float32)
        assert _run_dots(so, P, N, x, length, w, length, length, acc, tail) == 0
        assert (acc.reshape(P * N, vw)[:, 0] == np.float32(2 ** -24)).all(), (P, N, acc)
        assert (tail == np.float32(2 ** -24)).all(), (P, N, tail)


def test_exactly_the_dot_products_a_kernel_calls_are_printed(fresh):
    """kn_dots_P_N for P = 1, 2 up to _ND channels and P = 4 up to the widest KN_DOTS4_N: no other
    (dead code gcc would still compile into every kernel)."""
    four = max(f for f, _ in gemm_helpers.DOTS_CHANNELS.values())
    want = {(1, n) for n in range(1, gemm_helpers._ND + 1)} | {(2, n) for n in range(1, gemm_helpers._ND + 1)} | \
        {(4, n) for n in range(1, four + 1)}
    made = {(P, n) for P in (1, 2, 4) for n in range(1, gemm_helpers._ND + 1) if fresh._made(P, n)}
    assert made == want
    printed = {(P, n) for P in (1, 2, 4) for n in range(1, 9) if f"void kn_dots_{P}_{n}(" in fresh.HELPERS}
    assert printed == want


def test_only_the_dot_products_keep_gcc_from_vectorizing(fresh):
    """The dots' scalar tail stays scalar (no-tree-vectorize); the tiles let gcc vectorize."""
    head = "static void f(void) {"
    assert "no-tree-vectorize" in fresh._contracting(head, autovectorize=False)
    assert "no-tree-vectorize" not in fresh._contracting(head)
    assert "no-tree-vectorize" in fresh._dots(1, 1)
    assert "no-tree-vectorize" not in fresh._tile("kn_t", 2, 32, False)
