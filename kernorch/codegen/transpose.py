"""Layout conversions as 16x16 block transposes in registers.

A kernel that only moves float32 data between layouts (NCHW <-> NHWC, tokens -> image) reads
along one loop and writes along another. loops.py tiles such nests 16x16 so that both sides stay
in cached lines, but the scalar copy inside a tile still ran at a quarter of a plain copy's speed
(SegFormer's (16384, 256) -> (256, 16384): 2.8 ms against 0.7 ms for a copy of the same bytes).
``kn_transpose16`` loads 16 rows of 16 floats, transposes them with three rounds of shuffles
(AVX-512; four 8x8 blocks of them with AVX2; scalars elsewhere) and stores 16 rows. Full tiles
call it; the ragged edges keep the generic loops.
"""

from __future__ import annotations

from kernorch.codegen.kernel import Call, Let, Loop, Store
from kernorch.ir import index as ix

TILE = 16

HELPER = r"""
/* dst[a*ds + b] = src[b*ss + a] for a, b < 16: a block of floats transposed (codegen/transpose.py). */
#if defined(__AVX512F__)
#include <immintrin.h>
static inline void kn_transpose16(const float *restrict src, int64_t ss, float *restrict dst, int64_t ds) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + i * ss);
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) {  /* r[4i+j], 128-bit lane L: column 4L+j of rows 4i..4i+3 */
    __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int j = 0; j < 4; j++) {
    __m512 v = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88), w = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
    __m512 v2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88), w2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    _mm512_storeu_ps(dst + j * ds, _mm512_shuffle_f32x4(v, v2, 0x88));
    _mm512_storeu_ps(dst + (8 + j) * ds, _mm512_shuffle_f32x4(v, v2, 0xdd));
    _mm512_storeu_ps(dst + (4 + j) * ds, _mm512_shuffle_f32x4(w, w2, 0x88));
    _mm512_storeu_ps(dst + (12 + j) * ds, _mm512_shuffle_f32x4(w, w2, 0xdd));
  }
}
#elif defined(__AVX__)
#include <immintrin.h>
/* An 8x8 block: pairs of rows interleaved, then pairs of pairs, then the 128-bit halves swapped. */
static inline void kn_transpose8(const float *restrict src, int64_t ss, float *restrict dst, int64_t ds) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * ss);
  for (int i = 0; i < 4; i++) {  /* t[2i], t[2i+1]: columns 0,1,4,5 and 2,3,6,7 of rows 2i, 2i+1 */
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; h++) {  /* r[4h + j], lane L: column j + 4L of rows 4h..4h+3 */
    r[4 * h] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
    r[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xee);
    r[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    r[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
  }
  for (int j = 0; j < 4; j++) {
    _mm256_storeu_ps(dst + j * ds, _mm256_permute2f128_ps(r[j], r[4 + j], 0x20));
    _mm256_storeu_ps(dst + (4 + j) * ds, _mm256_permute2f128_ps(r[j], r[4 + j], 0x31));
  }
}
static inline void kn_transpose16(const float *restrict src, int64_t ss, float *restrict dst, int64_t ds) {
  kn_transpose8(src, ss, dst, ds);
  kn_transpose8(src + 8, ss, dst + 8 * ds, ds);
  kn_transpose8(src + 8 * ss, ss, dst + 8, ds);
  kn_transpose8(src + 8 * ss + 8, ss, dst + 8 * ds + 8, ds);
}
#else
static inline void kn_transpose16(const float *restrict src, int64_t ss, float *restrict dst, int64_t ds) {
  for (int a = 0; a < 16; a++)
    for (int b = 0; b < 16; b++) dst[a * ds + b] = src[b * ss + a];
}
#endif
"""


def _stride(e: ix.Expr, v: int) -> int | None:
    """The coefficient of loop variable ``v`` in ``e``, None if ``v`` also appears non-affinely."""
    k = 0
    for atom, c in e.terms:
        if atom == ix.Var(v):
            k += c
        elif v in ix.free_vars(ix.Expr(((atom, 1),), 0)):
            return None
    return k


def block_copy(inner: tuple, vk: int, vi: int):
    """(load buffer, load offset, store buffer, store offset) when ``inner`` copies one float32
    element, read contiguously along ``vk`` and written contiguously along ``vi``; else None."""
    if len(inner) != 2 or not isinstance(inner[0], Let) or not isinstance(inner[1], Store):
        return None
    load, store = inner
    if load.op != "load" or load.dtype != "float32" or store.value != load.name or store.offset is None:
        return None
    src, src_off = load.attr
    if src_off is None or _stride(src_off, vk) != 1 or _stride(store.offset, vi) != 1:
        return None
    if not _stride(src_off, vi) or not _stride(store.offset, vk):
        return None
    return src, src_off, store.buf, store.offset


def tiles(copy, vk: int, nk: int, vi: int, ni: int, tk: int, ti: int, inner: tuple, subst) -> tuple:
    """Loops over full 16x16 tiles (a ``kn_transpose16`` each) and the generic loops for the
    edges. ``tk``/``ti`` are fresh tile variables; ``subst(e, {var: expr})`` substitutes."""
    src, src_off, dst, dst_off = copy
    fk, fi = nk // TILE * TILE, ni // TILE * TILE
    at = {vk: ix.var(tk) * TILE, vi: ix.var(ti) * TILE}
    call = Call("kn_transpose16", ((src, subst(src_off, at)), ix.const(_stride(src_off, vi)),
                                   (dst, subst(dst_off, at)), ix.const(_stride(dst_off, vk))))
    body = [Loop(tk, ix.const(0), ix.const(fk // TILE), (Loop(ti, ix.const(0), ix.const(fi // TILE), (call,)),))]
    if fi < ni:  # the last columns of the full rows
        body.append(Loop(vk, ix.const(0), ix.const(fk), (Loop(vi, ix.const(fi), ix.const(ni), inner),)))
    if fk < nk:  # the last rows
        body.append(Loop(vk, ix.const(fk), ix.const(nk), (Loop(vi, ix.const(0), ix.const(ni), inner),)))
    return tuple(body)
