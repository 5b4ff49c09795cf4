"""The code generator's version: part of the key of every price, kept plan and saved kernel check.

Bump CODEGEN_VERSION when generated code changes for the same kernel (its price no longer holds);
a non-default CodegenOptions (kernorch/options.py) adds its own tag, so code generated with a switch
flipped is priced apart from the default code.
"""

from __future__ import annotations

from kernorch.options import CodegenOptions

# c18: small window sums (average pools) are written out tap by tap where they are read (codegen/window.py);
# c17: 3x3 convolutions with unit strides are Winograd F(6,3) along rows (codegen/winograd.py);
# c21: kernels on 1-byte integers use 512-bit vectors where the ISA has them (KN_BYTES, codegen/c.py);
# c20: a value compared with its own max/min (ArgMax, Hardmax, x == maxpool(x)) is stored once per kernel;
# a kernel holding only the reduction or the comparison reads it from memory (codegen/extremes.py);
# c19: GEMM tiles and dot products move vectors of the compiled ISA's width with typed unaligned loads and
# stores (not memcpy: split by -mtune=sapphirerapids), rows summed in passes of 12 accumulators, partial
# tiles specialized per row count (codegen/gemm_helpers.py);
# c16: products of a small packed weight (CodegenOptions.gemm_rows_first_bytes) with many row blocks split rows only;
# c15: a convolution's row blocks of windows inside the image are read in place (kn_window_tile), not copied;
# products of a packed weight short along k split rows only (CodegenOptions.gemm_short_k);
# c14: a GEMM tile prefetches the next panel of a packed weight, NCHW outputs 2 KiB-strided go through a
# staging tile, a reduce read through a permutation is
# computed in the permuted order (codegen/reduce_order.py); c13: products of at most 16 columns use 12x16
# tiles (kn_gemm_tile16);
# c12: dot products of a few output channels run 2 or 4 pixels at a time, accumulators in registers (kn_dots);
# c11: layout conversions transpose whole 16x16 tiles in registers (codegen/transpose.py);
# c10: KxK (and strided 1x1) convolutions are generated GEMMs too, each pixel's window of the image a row of A;
# c9: a 1x1 convolution's computed image (prologue) read channels-last makes pixel rows, computed per row block;
# GEMM loads are not clamped (contiguous vector loads: one-row dot products 3-6x faster); constant GEMM weights
# are packed once in panels;
# c8: depthwise and pixel-rows GEMM weights are read from copies packed once (KernelSpec.packs); c7: one-row
# products are a dot product per column; c6: channels-last 1x1 convolutions are GEMMs with the pixels as rows;
# c5: matmuls are generated C GEMMs (codegen/gemm.py); c4: C stencils (stencil.py)
# c37: int8 tiles take A computed in the kernel (as uint8 rows) and rows past the 8-row strips one at a time;
# c36: a quantized model's depthwise convolutions read their uint8 image, widened once per unit (depthwise.py);
# c35: QuantizeLinear's clamps before a narrowing cast without NaN propagation (codegen/clamps.py);
# c34: a quantized model's uint8 x int8 products on VNNI tiles, A read in place (codegen/vnni.py);
# c33: without AMX, a bf16 tile runs on AVX512-BF16 (VDPBF16PS), A read in place (codegen/amx.py);
# c32: with AVX2 (no AVX-512) a layout conversion's 16x16 tiles are four 8x8 ymm transposes, not scalar copies;
# c31: float tanh through the same rational function as sigmoid (2 sigmoid(2x) - 1, c.py kn_tanhf);
# c30: float erf as a rational function inlined in the loop (c.py kn_erff), not libmvec erff;
# c29: a GEMM tile pass of one to four rows sums every 2nd or 4th k into accumulators of its own (gemm_helpers.py);
# c28: float sigmoid as a rational function inlined in the loop (c.py kn_sigmoidf), not 1 / (1 + expf(-x));
# c27: channels-last depthwise convolutions as register-blocked row tiles with the GEMM's epilogue (depthwise.py);
# c26: with AVX2 a GEMM tile pass is at most two vectors wide (6x16: 15 of the 16 registers); the dot products'
# multiply-adds are FMA builtins, their reused vectors kept in registers (gemm_helpers.py);
# c25: AMX tiles take products of two activations (B packed in bf16 pairs per work unit); the tile
# configuration is loaded through its whole 64 bytes; c24: kernels on bf16 values use 512-bit vectors (KN_BYTES); a bf16-exact value is not rounded again and is
# stored as its top half (c.py, Note [bf16-exact values]); c23: bf16 products by a constant weight on AMX tiles
# (codegen/amx.py);
# c22: a quotient by a constant that is only rounded (QuantizeLinear) is a product with the reciprocal
# (scalar.py, Note [quantize by reciprocal]);
CODEGEN_VERSION = "c37"


def codegen_version(options: CodegenOptions) -> str:
    """CODEGEN_VERSION, and the hash of the switches ``options`` changes from their defaults."""
    return CODEGEN_VERSION + options.tag()
