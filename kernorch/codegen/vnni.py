"""int8 products on VNNI: the generated GEMM's tile when A is uint8 integers and B a constant of
int8 integers (a quantized model after rewrite/quantized.py: ``linear(cast(xq) - zx, wq)``).

Why: oneDNN's int8 convolution through PyTorch costs about 30 us per call on a Zen 4 VM even on
a 4x4 image (``python -m bench.int8_floor``), and a MobileNetV3 has 62 convolutions; the float32 GEMM the
generator wrote instead multiplies the integers at float32's speed. ``VPDPBUSD`` adds four
u8 x s8 products per int32 lane, four times float32's products per instruction, exactly.

The tile: 32 rows x 32 columns of int32 sums in 8-row strips (the rows left one at a time, two
chains of sums each), A's rows read in place or computed a row block at a time (uint8, K
contiguous), B's 32-column panel in quads along k (``quads``: B[4kk + e, n] at byte
``kk * 128 + 4n + e``, zeros past K and N), copied once. A zero point ``zx`` is taken out after
the sums: ``sum (a - zx) b = sum a b - zx * sum b``, the column sums found by the same
instruction on a row of ones. The sums are exact (int32); the tile hands float32 to the
epilogue, which scales, adds the bias and requantizes. Without VNNI a scalar loop computes the
same sums (correct, slow; the solver prices it out).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

MR, NR = 32, 32  # tile rows, columns
TRANSFORM = "s8_quads"  # the weight's copy in KernelSpec.packs


def padded_k(k: int) -> int:
    """K rounded up to whole quads: a panel holds padded_k(K) * NR bytes."""
    return -(-k // 4) * 4


def quads(x: torch.Tensor, panel: int) -> torch.Tensor:
    """The (K, N) matrix ``x`` of int8 integers as int8 (npanels, Kp / 4, panel, 4):
    ``[p, kk, n, e] = x[4kk + e, p*panel + n]``, zeros past K and N."""
    k, n = x.shape
    npan = -(-n // panel)
    x = F.pad(x, (0, npan * panel - n, 0, padded_k(k) - k))
    return x.reshape(padded_k(k) // 4, 4, npan, panel).permute(2, 0, 3, 1).contiguous().to(torch.int8)


def panel_floats(k: int) -> int:
    """A packed panel's length in float32 elements: the kernel's weight argument is a float
    pointer (the graph's constant is float32), so panel offsets are counted in 4-byte units."""
    return padded_k(k) * NR // 4


HELPERS = r"""/* int8 products on VNNI (codegen/vnni.py). */
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include <immintrin.h>
static inline __attribute__((always_inline)) void kn_dp_quad(__m512i *c, int32_t quad, const int8_t *bk) {
  const __m512i ai = _mm512_set1_epi32(quad);
  c[0] = _mm512_dpbusd_epi32(c[0], ai, _mm512_loadu_si512(bk));
  c[1] = _mm512_dpbusd_epi32(c[1], ai, _mm512_loadu_si512(bk + 64));
}
/* R rows' sums (r < R of ar[]) into c[r][0..1], over k quads [0, whole) and a partial quad of K % 4 bytes; with one
   row, even and odd quads into separate sums (two chains, an instruction's latency hidden), added at the end */
static inline __attribute__((always_inline)) void kn_i8_strip(const int R, const uint8_t *const *ar, int64_t K,
                                                              const int8_t *b, __m512i (*c)[2]) {
  const int64_t whole = K / 4;
  __m512i odd[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
  for (int i = 0; i < R; i++) c[i][0] = c[i][1] = _mm512_setzero_si512();
  int64_t kk = 0;
  if (R == 1)
    for (; kk + 1 < whole; kk += 2) {
      int32_t q0, q1;
      memcpy(&q0, ar[0] + 4 * kk, sizeof q0);
      memcpy(&q1, ar[0] + 4 * kk + 4, sizeof q1);
      kn_dp_quad(c[0], q0, b + kk * 128);
      kn_dp_quad(odd, q1, b + kk * 128 + 128);
    }
  for (; kk < whole; kk++)
    for (int i = 0; i < R; i++) {
      int32_t quad;
      memcpy(&quad, ar[i] + 4 * kk, sizeof quad);
      kn_dp_quad(c[i], quad, b + kk * 128);
    }
  if (K % 4)
    for (int i = 0; i < R; i++) {
      int32_t quad = 0;
      memcpy(&quad, ar[i] + 4 * whole, K % 4);  /* little-endian: the low bytes, zeros past K */
      kn_dp_quad(c[i], quad, b + whole * 128);
    }
  if (R == 1) {
    c[0][0] = _mm512_add_epi32(c[0][0], odd[0]);
    c[0][1] = _mm512_add_epi32(c[0][1], odd[1]);
  }
}
#endif
/* tl[r*32 + n] = sum over k < K of (a[r*lda + k] - zx) * B[k, n], r < rows, n < 32 (rows up to 32).
   a: uint8 rows, read in place (a K that is not a multiple of 4 ends in a partial quad, zeros past K); 8-row strips,
   then the rows left one at a time; bw: the panel as int8 quads, (Kp/4) x 32 x 4, behind a float pointer. */
static void kn_i8_tile(int64_t rows, int64_t K, const uint8_t *a, int64_t lda, const float *bw, int64_t zx,
                       float *tl) {
  const int8_t *b = (const int8_t *)bw;
  const int64_t kq = (K + 3) / 4;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
  __m512i zs[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
  if (zx) {
    for (int64_t kk = 0; kk < kq; kk++) kn_dp_quad(zs, 0x01010101, b + kk * 128);
    zs[0] = _mm512_mullo_epi32(zs[0], _mm512_set1_epi32((int32_t)zx));
    zs[1] = _mm512_mullo_epi32(zs[1], _mm512_set1_epi32((int32_t)zx));
  }
  for (int64_t r0 = 0; r0 < rows;) {
    const int R = rows - r0 >= 8 ? 8 : 1;
    const uint8_t *ar[8];
    __m512i c[8][2];
    for (int i = 0; i < R; i++) ar[i] = a + (r0 + i) * lda;
    if (R == 8)
      kn_i8_strip(8, ar, K, b, c);
    else
      kn_i8_strip(1, ar, K, b, c);
    for (int i = 0; i < R; i++) {
      _mm512_storeu_ps(tl + (r0 + i) * 32, _mm512_cvtepi32_ps(_mm512_sub_epi32(c[i][0], zs[0])));
      _mm512_storeu_ps(tl + (r0 + i) * 32 + 16, _mm512_cvtepi32_ps(_mm512_sub_epi32(c[i][1], zs[1])));
    }
    r0 += R;
  }
#else
  for (int64_t r = 0; r < rows; r++)
    for (int n = 0; n < 32; n++) {
      int32_t s = 0;
      for (int64_t k = 0; k < K; k++) s += ((int32_t)a[r * lda + k] - (int32_t)zx) * b[(k / 4) * 128 + n * 4 + k % 4];
      tl[r * 32 + n] = (float)s;
    }
  (void)kq;
#endif
}
"""
