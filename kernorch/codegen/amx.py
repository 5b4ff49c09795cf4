"""bfloat16 products on AMX tiles: the generated GEMM's tile when both operands are bf16.

Why: a bf16 plan's products went to oneDNN through PyTorch, one library call per kernel, and on
a Sapphire Rapids VM (2 threads) a 32x32 AMX tile loop written here ran as fast or faster than
that call alone (``python -m bench.gemm_micro --bf16``) — and it runs inside the native driver,
with the generated GEMM's epilogue (bias, activation, residual, the bf16 rounding) applied to
the tile while it is in cache.

The tile: 32 rows x 32 columns of float32 sums (four 16x16 accumulator tiles), A's rows in two
16-row tiles of 32 bf16 along k, B's panel in two 16-column tiles of 16 bf16 pairs — the
"VNNI" order ``TDPBF16PS`` reads: B[k, n] and B[k+1, n] side by side. A constant weight is
copied once in that order (``TRANSFORM``, zeros past K and N). A is read in place when its row
block is whole and K a multiple of 32, else copied into a zero-padded scratch ``ap`` (32 x Kp).
Tiles are configured per work unit (a library call between two kernels may reconfigure them)
and the process asks Linux for the AMX state once per library (``arch_prctl``). Where the
compiler or the kernel gives no AMX but the CPU has AVX512-BF16 (Zen 4, Cooper Lake), the same
function computes the tile with ``VDPBF16PS``, which reads B in the same pairs order (twice the
float32 FMA's products per instruction), and A in place whatever its rows and K; elsewhere with float loops (correct, slow; the solver
then prices it out).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from kernorch.codegen import isa

if TYPE_CHECKING:  # gemm_product imports the layers that import this module (packing.py)
    from kernorch.codegen.gemm_product import Product
    from kernorch.ir.graph import Graph

MR, NR, KSTEP = 32, 32, 32  # tile rows, columns, k per step (64 bytes of bf16)
TRANSFORM = "bf16_pairs"  # the weight's copy in KernelSpec.packs


def padded_k(k: int) -> int:
    """K rounded up to whole k steps: the length of a row of ``ap`` and of the packed weight."""
    return -(-k // KSTEP) * KSTEP


def pairs(x: torch.Tensor, panel: int) -> torch.Tensor:
    """The (K, N) matrix ``x`` as (npanels, Kp / 2, panel, 2): ``[p, kk, n, e] = x[2kk + e, p*panel + n]``,
    zeros past K and N (bf16, the order AMX's bf16 dot product reads B in)."""
    k, n = x.shape
    npan = -(-n // panel)
    x = F.pad(x, (0, npan * panel - n, 0, padded_k(k) - k))
    return x.reshape(padded_k(k) // 2, 2, npan, panel).permute(2, 0, 3, 1).contiguous()


@functools.lru_cache(maxsize=None)
def available() -> bool:
    """This CPU computes the tile natively: AMX bf16 tiles (the generated code still checks the OS
    grants them) or AVX512-BF16's pair dot products."""
    return bool({"amx_bf16", "avx512_bf16"} & isa.host().extras)


@functools.lru_cache(maxsize=None)
def matrix_units() -> bool:
    """This CPU has AMX bf16 tiles: every product runs several times faster in bf16 there."""
    return "amx_bf16" in isa.host().extras


def why_not(g: Graph, prod: Product) -> str | None:
    """None when a bf16 product runs on AMX tiles (amx.py): A its rows (a matmul's first operand,
    a 1x1 convolution's channels-last pixels, a convolution's windows), in place, computed or
    copied; B a constant weight packed once, or packed in bf16 pairs per work unit."""
    name = g.name(prod.prim.output)
    if prod.weight_rows:
        return f"bf16 convolution {name} is a 1x1 on channels-first pixels (left to the library)"
    return None


HELPERS = r"""/* bfloat16 products on AMX tiles (codegen/amx.py). */
#if defined(__AVX512BF16__) || (defined(__AMX_TILE__) && defined(__AMX_BF16__))
#include <immintrin.h>
#endif
#if defined(__AMX_TILE__) && defined(__AMX_BF16__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define KN_AMX 1
static int kn_amx_ok;
/* Linux hands a process the AMX tile state only when asked (ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA). */
__attribute__((constructor)) static void kn_amx_permit(void) { kn_amx_ok = syscall(SYS_arch_prctl, 0x1023, 18) == 0; }
typedef struct { uint8_t palette, start; uint8_t reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; } kn_tilecfg;
#endif
/* Every tile 16 rows of 64 bytes: 0-3 the sums, 4-5 A, 6-7 B. */
static void kn_amx_begin(void) {
#ifdef KN_AMX
  if (!kn_amx_ok) return;
  kn_tilecfg c __attribute__((aligned(64)));
  memset(&c, 0, sizeof c);
  c.palette = 1;
  for (int t = 0; t < 8; t++) { c.rows[t] = 16; c.colsb[t] = 64; }
  /* not _tile_loadconfig: gcc 12's declares only 8 of the 64 bytes read, and dead-store elimination then
     dropped the rows and columns (a #GP in the native driver, ResNet-50 ran by luck) */
  __asm__ volatile("ldtilecfg %0" : : "m"(c));
#endif
}
static void kn_amx_end(void) {
#ifdef KN_AMX
  if (kn_amx_ok) _tile_release();
#endif
}
#if defined(__AVX512BF16__) && defined(__AVX512F__)
/* The tile without AMX, on AVX512-BF16 (Zen 4, Cooper Lake): VDPBF16PS adds a[2kk] * B[2kk, n] + a[2kk+1] *
   B[2kk+1, n] per lane — the pairs order B's panel is in — in 8-row strips of 16 accumulators. A is read in place,
   nothing copied or padded: a strip's rows past `rows` repeat the last row (their sums hold any value), and an odd
   K's last pair is a[K-1] with a zero (B's row K is zero, but a[K] may lie past the end, or be an infinity). */
static inline __attribute__((always_inline)) void kn_dp_pair(__m512 *c, int32_t pair, const uint16_t *bk) {
  const __m512bh ai = (__m512bh)_mm512_set1_epi32(pair);
  c[0] = _mm512_dpbf16_ps(c[0], ai, (__m512bh)_mm512_loadu_si512(bk));
  c[1] = _mm512_dpbf16_ps(c[1], ai, (__m512bh)_mm512_loadu_si512(bk + 32));
}
static void kn_dp_tile(int64_t rows, int64_t K, const uint16_t *a, int64_t lda, const uint16_t *b, float *tl) {
  const int64_t whole = K / 2;
  for (int64_t r0 = 0; r0 < rows; r0 += 8) {
    const uint16_t *ar[8];
    __m512 c[8][2];
    for (int i = 0; i < 8; i++) {
      ar[i] = a + (r0 + i < rows ? r0 + i : rows - 1) * lda;
      c[i][0] = c[i][1] = _mm512_setzero_ps();
    }
    for (int64_t kk = 0; kk < whole; kk++)
      for (int i = 0; i < 8; i++) {
        int32_t pair;
        memcpy(&pair, ar[i] + 2 * kk, sizeof pair);
        kn_dp_pair(c[i], pair, b + kk * 64);
      }
    if (K % 2)
      for (int i = 0; i < 8; i++) kn_dp_pair(c[i], ar[i][K - 1], b + whole * 64);  /* the low half: a[K-1] */
    for (int i = 0; i < 8; i++) {
      _mm512_storeu_ps(tl + (r0 + i) * 32, c[i][0]);
      _mm512_storeu_ps(tl + (r0 + i) * 32 + 16, c[i][1]);
    }
  }
}
#endif
/* tl[r*32 + n] = sum over k < K of a[r*lda + k] * B[k, n], r < rows (the rows past it hold any value), n < 32.
   a: bf16 rows; b: a 32-column panel as bf16 pairs, (Kp/2) x 32 x 2; ap: scratch of 32 x Kp bf16. On AMX and the
   float loops a row block that is not whole, or a K that is not a multiple of 32, is copied into ap first, zeros
   past K (kn_dp_tile reads it in place); a == ap: the
   caller filled its rows (row length Kp) and the zeros past K are written here. */
static void kn_amx_tile(int64_t rows, int64_t K, const uint16_t *a, int64_t lda, const uint16_t *b, float *tl,
                        uint16_t *ap) {
  const int64_t Kp = (K + 31) / 32 * 32;
#if defined(__AVX512BF16__) && defined(__AVX512F__)
#ifdef KN_AMX
  if (!kn_amx_ok)
#endif
  {
    kn_dp_tile(rows, K, a, a == ap ? Kp : lda, b, tl);
    return;
  }
#endif
  if (a != ap && (rows < 32 || K % 32)) {
    for (int64_t r = 0; r < rows; r++) memcpy(ap + r * Kp, a + r * lda, K * sizeof(uint16_t));
    a = ap;
  }
  if (a == ap) {
    for (int64_t r = 0; r < 32; r++) memset(ap + r * Kp + K, 0, (Kp - K) * sizeof(uint16_t));
    lda = Kp;
  }
#ifdef KN_AMX
  if (kn_amx_ok) {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int64_t k = 0; k < Kp; k += 32) {
      _tile_loadd(4, a + k, lda * 2);
      _tile_loadd(5, a + 16 * lda + k, lda * 2);
      _tile_loadd(6, b + k * 32, 128);
      _tile_loadd(7, b + k * 32 + 32, 128);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, tl, 128); _tile_stored(1, tl + 16, 128);
    _tile_stored(2, tl + 16 * 32, 128); _tile_stored(3, tl + 16 * 32 + 16, 128);
    return;
  }
#endif
  for (int64_t r = 0; r < rows; r++)
    for (int n = 0; n < 32; n++) {
      float s = 0.0f;
      for (int64_t kk = 0; kk < Kp / 2; kk++)
        s += kn_bf16_load(a[r * lda + 2 * kk]) * kn_bf16_load(b[(kk * 32 + n) * 2])
           + kn_bf16_load(a[r * lda + 2 * kk + 1]) * kn_bf16_load(b[(kk * 32 + n) * 2 + 1]);
      tl[r * 32 + n] = s;
    }
}
"""
