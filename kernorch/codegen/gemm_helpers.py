"""The C helpers of generated GEMMs (codegen/gemm.py), printed once in every C kernel's header
(c.py): the register-blocked tile, the dot products of a few output channels, and the copies of a
convolution's windows. Kernels call them with compile-time constants, so gcc specializes them."""

from kernorch.codegen.gemm_product import MIN_WINDOW_COLUMNS

MR, NR = 6, 32  # tile rows x columns: 12 accumulators of 16 floats with AVX-512 (kn_gemm_tile)
MR_NARROW, NR_NARROW = 12, 16  # the same 12 accumulators for products of at most 16 columns (kn_gemm_tile16)

HELPERS = r"""#include <string.h>
/* One vector of KN_VW floats, the width the ISA compiled for has (-march: AVX-512 16, AVX 8, else 4): a
   vector wider than the registers is lowered through the stack. Unaligned (aligned(4)) and allowed to alias
   float data (may_alias), so KN_LOAD / KN_STORE are one full-width move under any -mtune (a memcpy through
   a temporary is split by tunings that cap moves at 256 bits, e.g. sapphirerapids: a store-forwarding stall
   at every k). The tiles below budget 12 accumulators: 32 registers hold them with AVX-512, 16 with AVX. */
#if defined(__AVX512F__)
#define KN_VW 16
#elif defined(__AVX__)
#define KN_VW 8
#else
#define KN_VW 4
#endif
typedef float kn_vec __attribute__((vector_size(4 * KN_VW), aligned(4), may_alias));
#define KN_LOAD(p) (*(const kn_vec *)(p))
#define KN_STORE(p, v) (*(kn_vec *)(p) = (v))
#define KN_ACCS 12
/* Independent sums that keep the FMA units busy: latency 4 x 2 ports on Zen 3-5 and Intel since Skylake. */
#define KN_CHAINS 8
/* c + a * b rounded once. Written as the ISA's FMA builtin, not as a*b + c left to contraction: gcc's Zen
   tunings (avoid_fma_chains) turn a contracted multiply-add on one accumulator's chain into a multiply and
   an add, which rounds twice (the reference interpreter and the other tunings round once). */
#if defined(__FMA__) && defined(__AVX512F__)
#define KN_FMA(a, b, c) __builtin_ia32_vfmaddps512_mask((a), (b), (c), (unsigned short)-1, 4)
#elif defined(__FMA__) && KN_VW == 8
#define KN_FMA(a, b, c) __builtin_ia32_vfmaddps256((a), (b), (c))
#else
#define KN_FMA(a, b, c) ((a) * (b) + (c))
#endif
#if defined(__FMA__)
#define KN_FMAF(a, b, c) __builtin_fmaf((a), (b), (c))
#else
#define KN_FMAF(a, b, c) ((a) * (b) + (c))
#endif
/* Keeps a loaded vector in a register: gcc's tunings would fold its load into each FMA that reads it (the
   load repeated per use, e.g. one weight vector read twice for two pixels in kn_dots_2_1). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KN_KEEP(v) __asm__("" : "+v"(v))
#else
#define KN_KEEP(v) ((void)0)
#endif
#if defined(__AVX512F__)
#define KN_VREGS 32
#else
#define KN_VREGS 16
#endif
%(tiles)s
/* acc[j*N + n] (16 lanes) and tail[j*N + n] += the products of x[j*xs : j*xs + len] and w[n*ldw : n*ldw + len],
   j < P pixels, n < N channels: the dot products of kn_dot_rows and kn_window_dots, vectorized along k.
   One function per (P, N) (kn_dots[P / 2][N - 1], printed by gemm_helpers.py) so the P*N accumulators
   live in registers; P = 2 or 4 pixels share every weight load and give the FMAs independent chains. */
%(dots)s
/* kn_dots_P_N for P = 4 pixels up to KN_DOTS4_N channels, P = 2 up to KN_DOTS2_N: more spill (gcc's Zen
   tunings spill 4 x 4 accumulators on 32 registers, 2 x 4 on 16 with the vectors kept in registers) */
#if defined(__AVX512F__)
#define KN_DOTS4_N %(d4)d
#define KN_DOTS2_N %(d2)d
#else
#define KN_DOTS4_N %(d4_narrow)d
#define KN_DOTS2_N %(d2_narrow)d
#endif
/* tile[(r0 + j)*%(nr)d + n] = the sums of acc[j*N + n]'s lanes and tail[j*N + n], j < P, n < N. */
static void kn_dots_store(int P, int64_t N, const kn_vec *acc, const float *tail, float *tile, int64_t r0) {
  for (int j = 0; j < P; j++)
    for (int n = 0; n < N; n++) {
      float s = tail[j * N + n];
      for (int l = 0; l < KN_VW; l++) s += acc[j * N + n][l];
      tile[(r0 + j) * %(nr)d + n] = s;
    }
}
/* tile[r*%(nr)d + n] = sum over k of a[r*lda + k] * w[n*K + k], r < mr, n < N <= %(nd)d: a convolution with
   fewer output channels than a tile's columns (a network's last one, to RGB) as dot products along k. */
static void kn_dot_rows(int64_t mr, int64_t K, const float *restrict a, int64_t lda, int64_t N,
                        const float *restrict w, float *restrict tile) {
  kn_vec acc[4 * %(nd)d];
  float tail[4 * %(nd)d];
  for (int64_t r = 0; r < mr; ) {
    const int P = r + 4 <= mr && N <= KN_DOTS4_N ? 4 : r + 2 <= mr && N <= KN_DOTS2_N ? 2 : 1;
    for (int i = 0; i < P * N; i++) { acc[i] = (kn_vec){0}; tail[i] = 0.0f; }
    kn_dots[P / 2][N - 1](a + r * lda, lda, w, K, K, acc, tail);
    kn_dots_store(P, N, acc, tail, tile, r);
    r += P;
  }
}
/* The same dot products read in place from a channels-last image whose kernel rows are runs of KW*C floats
   (ws == C, unit dilation along w): no window is copied (for 3 output channels a copy costs more than the
   products). Four pixels of one output row at a time where their windows lie inside the image along w.
   Arguments as kn_window_rows's, then N, the weight (N, K) and the tile. */
static void kn_window_dots(int64_t rows, int64_t p0, const float *restrict x, int64_t C, int64_t H, int64_t W,
                           int64_t cs, int64_t hs, int64_t ws, int64_t OW, int64_t KH, int64_t KW, int64_t sh,
                           int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t N,
                           const float *restrict w, float *restrict tile) {
  const int64_t K = C * KH * KW;
  (void)cs; (void)dw;
  kn_vec acc[4 * %(nd)d];
  float tail[4 * %(nd)d];
  for (int64_t r = 0; r < rows; ) {
    const int64_t oh = (p0 + r) / OW, ow = (p0 + r) %% OW, iw0 = ow * sw - pw;
    int64_t lo = iw0 < 0 ? -iw0 : 0, hi = W - iw0;  /* taps [lo, hi) of each kernel row lie inside */
    hi = hi > KW ? KW : hi;
    int P = 1;  /* pixels of this output row whose windows lie inside the image along w */
    for (int q = N <= KN_DOTS4_N ? 4 : N <= KN_DOTS2_N ? 2 : 1; q > 1 && P == 1; q /= 2)
      if (r + q <= rows && ow + q <= OW && iw0 >= 0 && iw0 + (q - 1) * sw + KW <= W) P = q;
    for (int i = 0; i < P * N; i++) { acc[i] = (kn_vec){0}; tail[i] = 0.0f; }
    for (int64_t kh = 0; kh < KH && hi > lo; kh++) {
      const int64_t ih = oh * sh - ph + kh * dh;
      if (ih >= 0 && ih < H)
        kn_dots[P / 2][N - 1](x + ih * hs + (iw0 + lo) * ws, sw * ws, w + (kh * KW + lo) * C, K, (hi - lo) * C,
                               acc, tail);
    }
    kn_dots_store(P, N, acc, tail, tile, r);
    r += P;
  }
}
%(window_rows)s/* wo[k] = the offset of tap k of a window (K ordered as kn_window_rows's) from its first element: a row of A
   read in place, where kn_window_inside says the whole window lies in the image. Arguments as kn_window_rows's. */
static void kn_window_offsets(int64_t C, int64_t H, int64_t W, int64_t cs, int64_t hs, int64_t ws, int64_t OW,
                              int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh,
                              int64_t dw, int32_t *restrict wo) {
  (void)H; (void)W; (void)OW; (void)sh; (void)sw; (void)ph; (void)pw;
  int64_t k = 0;
  if (cs != 1) {
    for (int64_t c = 0; c < C; c++)
      for (int64_t kh = 0; kh < KH; kh++)
        for (int64_t kw = 0; kw < KW; kw++) wo[k++] = (int32_t)(c * cs + kh * dh * hs + kw * dw * ws);
  } else {
    for (int64_t kh = 0; kh < KH; kh++)
      for (int64_t kw = 0; kw < KW; kw++)
        for (int64_t c = 0; c < C; c++) wo[k++] = (int32_t)(c + kh * dh * hs + kw * dw * ws);
  }
}
/* The offset in x of the first window of output pixels p0 .. p0 + rows - 1 when they lie in one output row
   and all their windows inside the image (A's rows are then x + that + r * sw * ws + wo[k]), else -1. */
static inline int64_t kn_window_inside(int64_t rows, int64_t p0, int64_t H, int64_t W, int64_t hs, int64_t ws,
                                       int64_t OW, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph,
                                       int64_t pw, int64_t dh, int64_t dw) {
  const int64_t oh = p0 / OW, ow = p0 %% OW, ih = oh * sh - ph, iw = ow * sw - pw;
  if (ow + rows > OW || ih < 0 || ih + (KH - 1) * dh >= H || iw < 0 || iw + (rows - 1) * sw + (KW - 1) * dw >= W)
    return -1;
  return ih * hs + iw * ws;
}
#define KN_WINDOW_PARAMS int64_t rows, int64_t p0, const float *restrict x, int64_t C, int64_t H, int64_t W, \
  int64_t cs, int64_t hs, int64_t ws, int64_t OW, int64_t KH, int64_t KW, int64_t sh, int64_t sw, int64_t ph, \
  int64_t pw, int64_t dh, int64_t dw
/* kn_window_rows for a row block that kn_window_inside rejects; a block inside is read in place. */
static void kn_window_fill(KN_WINDOW_PARAMS, float *restrict ap) {
  if (kn_window_inside(rows, p0, H, W, hs, ws, OW, KH, KW, sh, sw, ph, pw, dh, dw) < 0)
    kn_window_rows(rows, p0, x, C, H, W, cs, hs, ws, OW, KH, KW, sh, sw, ph, pw, dh, dw, ap);
}
/* The tile of a row block of windows (narrow: kn_gemm_tile16's): read in place through the offsets wo when
   the block lies inside the image (no copy: a stem's windows are runs of a few floats per channel), else
   from its copy in ap. */
static void kn_window_tile(KN_WINDOW_PARAMS, int narrow, const int32_t *restrict wo, const float *restrict ap,
                           const float *restrict bp, float *restrict tile, int64_t pf) {
  const int64_t K = C * KH * KW, at = kn_window_inside(rows, p0, H, W, hs, ws, OW, KH, KW, sh, sw, ph, pw, dh, dw);
  if (at >= 0) (narrow ? kn_gemm_tile16_at : kn_gemm_tile_at)(rows, K, x + at, sw * ws, wo, bp, tile, pf);
  else (narrow ? kn_gemm_tile16 : kn_gemm_tile)(rows, K, ap, K, bp, tile, pf);
}
"""


def _contracting(head: str, autovectorize: bool = True) -> str:
    """``head`` (a C function's opening line) with multiply-adds contracting to FMAs in its body only;
    ``autovectorize=False``: gcc leaves its scalar loops scalar (a tail of fewer than KN_VW steps,
    which it would otherwise turn into a shuffle-heavy in-order reduction that spills)."""
    gcc = '"fp-contract=fast"' + ('' if autovectorize else ', "no-tree-vectorize"')
    return (f"#if defined(__clang__)\n{head}\n#pragma clang fp contract(fast)\n#else\n"
            f"__attribute__((optimize({gcc})))\n{head}\n#endif")


def _tile(name: str, mr: int, nr: int, offsets: bool) -> str:
    """The register-blocked tile ``name``: ``tile[r][0:nr] = sum over k of A[r, k] * bp[k*nr + 0:nr]``,
    r < mr <= ``mr``, with A[r, k] = ``a[r*lda + k]``, or ``a[r*lda + wo[k]]`` (``offsets``: a
    convolution's windows read in place). Multiply-adds contract to FMAs here only. ``pf`` != 0:
    also prefetch the panel ``pf`` floats past bp (the next panel of a weight streamed from
    memory) while this tile's multiply-adds run, so loading it overlaps computing this one.

    A row of the tile is ``nr / KN_VW`` vectors; a pass sums KN_ACCS accumulators: at most two
    vectors of columns (``{NAME}_PASS_VECS``) on ``{NAME}_PASS_ROWS`` rows, each pass a copy of
    ``{name}_rows1`` specialized for its row count (a switch), so the accumulators of a partial tile
    stay in registers too; a pass of one to four rows (a remainder, a one-row product) sums every 2nd
    or 4th k into a set of its own (``{name}_rows2/4``): R x 2 sums alone would each wait for the
    last FMA's result (4 cycles) while both FMA units idle. Two vectors a row keep the pass in 16
    registers (12 accumulators, 2 of B, 1 broadcast of A: the 6x16 tile of AVX2 BLAS kernels); 3 rows
    x 4 vectors would need 17, and
    gcc's znver3 tuning then folds every B load into its FMA (15 loads for 12 FMAs a k step, 1.2-1.7x
    slower on Zen 3). With AVX-512 a pass is the whole tile width, as before."""
    nv, rows, vecs = f"({nr} / KN_VW)", f"{name.upper()}_PASS_ROWS", f"{name.upper()}_PASS_VECS"
    args = ("int64_t K, const float *restrict a, int64_t lda, " + ("const int32_t *restrict wo, " if offsets else "")
            + "const float *restrict bp, float *restrict tile, int64_t pf")
    unroll = f"#pragma GCC unroll {max(mr, 32)}"

    def step(indent: str, s: str, k: str) -> list[str]:
        """One k step of the pass into the accumulator set ``s``."""
        at = f"a[r * lda + wo[{k}]]" if offsets else f"a[r * lda + {k}]"
        return [f"{indent}if (pf) for (int v = 0; v < {nr}; v += 16) "
                f"__builtin_prefetch(bp + pf + ({k}) * {nr} + v, 0, 2);",
                f"{indent}kn_vec b[{vecs}];", unroll,
                f"{indent}for (int v = 0; v < {vecs}; v++) b[v] = KN_LOAD(bp + ({k}) * {nr} + v * KN_VW);", unroll,
                f"{indent}for (int r = 0; r < R; r++) {{",
                f"{indent}  const float x = {at};", unroll,
                f"{indent}  for (int v = 0; v < {vecs}; v++) acc[{s}][r][v] += x * b[v];",
                f"{indent}}}"]

    def rows_fn(sets: int) -> str:
        """``{name}_rows{sets}``: the pass with every ``sets``-th k summed into accumulators of its own,
        added up at the end."""
        head = f"static inline __attribute__((always_inline)) void {name}_rows{sets}(const int R, {args}) {{"
        lines = [_contracting(head),
                 f"  kn_vec acc[{sets}][{rows}][{vecs}];", unroll,
                 f"  for (int s = 0; s < {sets}; s++)", unroll, "  for (int r = 0; r < R; r++)", unroll,
                 f"    for (int v = 0; v < {vecs}; v++) acc[s][r][v] = (kn_vec){{0}};",
                 "  int64_t k = 0;",
                 f"  for (; k + {sets} <= K; k += {sets}) {{"]
        if sets == 1:
            lines += step("    ", "0", "k")
        else:
            lines += [unroll, f"    for (int s = 0; s < {sets}; s++) {{", *step("      ", "s", "k + s"), "    }"]
        lines.append("  }")
        if sets > 1:
            lines += ["  for (; k < K; k++) {", *step("    ", "0", "k"), "  }", unroll,
                      f"  for (int s = 1; s < {sets}; s++)", unroll, "  for (int r = 0; r < R; r++)", unroll,
                      f"    for (int v = 0; v < {vecs}; v++) acc[0][r][v] += acc[s][r][v];"]
        lines += [unroll, "  for (int r = 0; r < R; r++)", unroll,
                  f"    for (int v = 0; v < {vecs}; v++) KN_STORE(tile + r * {nr} + v * KN_VW, acc[0][r][v]);", "}"]
        return "\n".join(lines)

    call = ("K, a + r0 * lda, lda, " + ("wo, " if offsets else "")
            + f"bp + c0, tile + r0 * {nr} + c0, r0 || c0 ? 0 : pf")
    # a pass of c rows sums in 4 or 2 sets of accumulators where that many still make at most KN_CHAINS
    cases = "\n".join(f"#if {c} <= {rows}\n      case {c}:\n"
                       + "\n".join(f"        {'if' if n == 4 else 'else if'} ({c} * {vecs} * {n} <= KN_CHAINS) "
                                   f"{name}_rows{n}({c}, {call});" for n in (4, 2))
                       + f"\n        else {name}_rows1({c}, {call});\n        break;\n#endif"
                       for c in range(1, mr + 1))
    return "\n".join([
        f"#define {vecs} ({nv} < 2 ? {nv} : 2)",
        f"#define {rows} (KN_ACCS / {vecs} < {mr} ? KN_ACCS / {vecs} : {mr})",
        *(rows_fn(n) for n in (1, 2, 4)),
        _contracting(f"static void {name}(int64_t mr, {args}) {{"),
        f"  for (int64_t c0 = 0; c0 < {nr}; c0 += {vecs} * KN_VW)",
        f"  for (int64_t r0 = 0; r0 < mr; r0 += {rows})",
        f"    switch (mr - r0 < {rows} ? mr - r0 : {rows}) {{", cases, "    }",
        "}"])


# kn_gemm_tile: 12 accumulators of 16 floats. kn_gemm_tile16, for products of at most 16 columns (a stem
# to 16 channels, a 1x1 projection to 8..16): the same 12 accumulators on twice the rows; a 32-column tile
# would spend half of its multiply-adds on the zero padding of its panel. The _at variants read A in place.
_TILES = "\n".join(_tile(name + at, mr, nr, bool(at)) for at in ("", "_at")
                   for name, mr, nr in (("kn_gemm_tile", MR, NR), ("kn_gemm_tile16", MR_NARROW, NR_NARROW)))


def _dots(P: int, N: int) -> str:
    """kn_dots_P_N: the P*N dot products of kn_dots[...] written out, accumulators in locals."""
    pairs = [(j, n) for j in range(P) for n in range(N)]
    head = (f"static void kn_dots_{P}_{N}(const float *restrict x, int64_t xs, const float *restrict w, int64_t ldw, "
            "int64_t len, kn_vec *restrict acc, float *restrict tail) {")
    lines = [_contracting(head, autovectorize=False),
             "  " + " ".join(f"kn_vec a{j}_{n} = acc[{j * N + n}];" for j, n in pairs),
             "  int64_t k = 0;",
             "  for (; k + KN_VW <= len; k += KN_VW) {",
             "    " + " ".join(f"kn_vec x{j} = KN_LOAD(x + {j} * xs + k);" for j in range(P)),
             "    " + " ".join(f"kn_vec w{n} = KN_LOAD(w + {n} * ldw + k);" for n in range(N)),
             *(["    " + " ".join(f"KN_KEEP(x{j});" for j in range(P))] if N > 1 else []),
             # the weights too where registers remain (two for gcc's temporaries)
             *([f"#if {P * N + P + N} <= KN_VREGS - 2", "    " + " ".join(f"KN_KEEP(w{n});" for n in range(N)),
                "#endif"] if P > 1 else []),
             "    " + " ".join(f"a{j}_{n} = KN_FMA(x{j}, w{n}, a{j}_{n});" for j, n in pairs),
             "  }",
             "  for (; k < len; k++) {",
             "    " + " ".join(f"tail[{i}] = KN_FMAF(x[{j} * xs + k], w[{n} * ldw + k], tail[{i}]);"
                          for i, (j, n) in enumerate(pairs)),
             "  }",
             "  " + " ".join(f"acc[{j * N + n}] = a{j}_{n};" for j, n in pairs),
             "}"]
    return "\n".join(lines)


_ND = MIN_WINDOW_COLUMNS - 1
_PIXELS = (1, 2, 4)  # kn_dots[i]: _PIXELS[i] pixels at a time
# (KN_DOTS4_N, KN_DOTS2_N): four and two pixels at a time up to these many channels, with 32 vector
# registers (AVX-512) and with 16; fewer channels than _ND otherwise run one pixel at a time.
DOTS_CHANNELS = {"avx512": (3, _ND), "narrow": (1, 3)}
_DOTS4_N = max(four for four, _ in DOTS_CHANNELS.values())


def _made(P: int, N: int) -> bool:
    return P < 4 or N <= _DOTS4_N


_DOTS = "\n".join(_dots(P, N) for P in _PIXELS for N in range(1, _ND + 1) if _made(P, N)) + (
    "\nstatic void (*const kn_dots[%d][%d])(const float *restrict, int64_t, const float *restrict, int64_t, int64_t,"
    " kn_vec *restrict, float *restrict) = {%s};" % (len(_PIXELS), _ND, ", ".join(
        "{" + ", ".join(f"kn_dots_{P}_{n}" if _made(P, n) else "0" for n in range(1, _ND + 1)) + "}" for P in _PIXELS)))
# ap[r*LD + ..] = a convolution's windows: kn_window_rows on float images (LD = K), kn_window_rows_bf16 on
# bf16 images for AMX tiles (LD = K rounded up to whole 32-element k steps, codegen/amx.py).
_WINDOW_ROWS = r"""/* ap[r*LD + ..] = the window of output pixel p0 + r (r < rows) of a 2-D convolution's image x (C x H x W,
   element strides cs, hs, ws), zeros where it leaves the image: K ordered (kh, kw, c) when the channels
   are contiguous (cs == 1: a copy per tap), else (c, kh, kw). gemm_product.Window describes it. */
static void KN_NAME(int64_t rows, int64_t p0, const KN_T *restrict x, int64_t C, int64_t H, int64_t W,
                           int64_t cs, int64_t hs, int64_t ws, int64_t OW, int64_t KH, int64_t KW, int64_t sh,
                           int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, KN_T *restrict ap) {
  const int64_t K = C * KH * KW;
  for (int64_t r = 0; r < rows; r++) {
    const int64_t oh = (p0 + r) / OW, ow = (p0 + r) % OW;
    KN_T *restrict dst = ap + r * (KN_LD);
    if (cs != 1) {  /* K ordered (c, kh, kw): a row of taps per channel and kernel row */
      for (int64_t c = 0; c < C; c++)
        for (int64_t kh = 0; kh < KH; kh++) {
          const int64_t ih = oh * sh - ph + kh * dh;
          const KN_T *row = x + c * cs + ih * hs;
          KN_T *d = dst + (c * KH + kh) * KW;
          const int64_t iw0 = ow * sw - pw;
          if (ws == 1 && dw == 1 && ih >= 0 && ih < H && iw0 >= 0 && iw0 + KW <= W) {  /* inside: one run */
            memcpy(d, row + iw0, KW * sizeof(KN_T));
            continue;
          }
          for (int64_t kw = 0; kw < KW; kw++) {
            const int64_t iw = ow * sw - pw + kw * dw;
            if (ih >= 0 && ih < H && iw >= 0 && iw < W) d[kw] = row[iw * ws]; else d[kw] = 0;
          }
        }
      continue;
    }
    for (int64_t kh = 0; kh < KH; kh++) {  /* K ordered (kh, kw, c) */
      const int64_t ih = oh * sh - ph + kh * dh;
      KN_T *d = dst + kh * KW * C;
      if (ws == C && dw == 1) {  /* the row's taps are one run of KW*C elements: copy its inside part */
        const int64_t iw0 = ow * sw - pw;
        if (ih >= 0 && ih < H && iw0 >= 0 && iw0 + KW <= W) {  /* inside: a copy of a constant size */
          memcpy(d, x + ih * hs + iw0 * ws, KW * C * sizeof(KN_T));
          continue;
        }
        int64_t lo = iw0 < 0 ? -iw0 : 0, hi = W - iw0;  /* taps [lo, hi) lie inside the image */
        if (ih < 0 || ih >= H || lo > KW) lo = KW;
        hi = hi > KW ? KW : hi < lo ? lo : hi;
        memset(d, 0, lo * C * sizeof(KN_T));
        if (hi > lo) memcpy(d + lo * C, x + ih * hs + (iw0 + lo) * ws, (hi - lo) * C * sizeof(KN_T));
        memset(d + hi * C, 0, (KW - hi) * C * sizeof(KN_T));
        continue;
      }
      for (int64_t kw = 0; kw < KW; kw++, d += C) {  /* a run of C channels per tap */
        const int64_t iw = ow * sw - pw + kw * dw;
        if (ih >= 0 && ih < H && iw >= 0 && iw < W) memcpy(d, x + ih * hs + iw * ws, C * sizeof(KN_T));
        else memset(d, 0, C * sizeof(KN_T));
      }
    }
  }
}
"""
_WINDOWS = "".join(_WINDOW_ROWS.replace("KN_NAME", name).replace("KN_T", ctype).replace("KN_LD", ld)
                   for name, ctype, ld in (("kn_window_rows", "float", "K"),
                                           ("kn_window_rows_bf16", "uint16_t", "(K + 31) / 32 * 32")))
HELPERS = HELPERS % {"window_rows": _WINDOWS, "nr": NR, "nd": _ND, "d4": DOTS_CHANNELS["avx512"][0], "d2": DOTS_CHANNELS["avx512"][1],
                     "d4_narrow": DOTS_CHANNELS["narrow"][0], "d2_narrow": DOTS_CHANNELS["narrow"][1], "dots": _DOTS.replace("%", "%%"),
                     "tiles": _TILES.replace("%", "%%")}
