"""bf16 products on AMX tiles (codegen/amx.py) against the interpreter: whole and partial row
blocks, K and N that are not whole tiles, one row, A computed in the kernel, batched matmuls, 1x1
convolutions on channels-last pixels with bias, activation and residual epilogues — on the AMX
path where the CPU and OS give it, on AVX512-BF16's pair dot products where the CPU has them
(compiled without AMX), and always on the float fallback the same function compiles to without
either, so any machine still checks the packing, the tails and the epilogue. All compute float32
sums of exact bf16 products; the order of the sums differs, so a result may round to the
neighbouring bf16: bf16's tolerance."""

import numpy as np
import pytest
import torch

from kernorch import codegen
from kernorch.codegen import amx, templates
from kernorch.ir import interp, layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.ir.tensors import BFLOAT16, to_numpy
from tests.codegen.cg_util import THREADS, finish

NO_AMX = "-mno-amx-tile -mno-amx-bf16 -mno-amx-int8"
PATHS = {"amx": ("amx_bf16", ""), "avx512_bf16": ("avx512_bf16", NO_AMX), "fallback": (None, f"{NO_AMX} -mno-avx512bf16")}


@pytest.fixture(params=list(PATHS))
def path(request, monkeypatch):
    """Offer bf16 products to the GEMM on any CPU, compiled for one path of the tile: AMX, AVX512-BF16's
    pair dot products (no AMX), or the float loops (neither)."""
    monkeypatch.setattr(amx, "available", lambda: True)
    needs, flags = PATHS[request.param]
    if needs and needs not in amx.isa.host().extras:
        pytest.skip(f"this CPU has no {needs} (the fallback case still runs)")
    monkeypatch.setenv("KERNORCH_CFLAGS", flags)
    return request.param


def _weight(rng, shape):
    return b16(rng.standard_normal(shape))


def b16(a):
    return np.asarray(a, np.float32).astype(BFLOAT16)


def _check(b, out, seed=0):
    g, members, outputs = finish(b, out)
    kern = codegen.build_kernel(g, members, outputs, num_threads=THREADS)
    assert kern.spec.template == "gemm" and "amx tiles" in kern.spec.traits, kern.spec.traits
    rng = np.random.default_rng(seed)
    fed = [b16(rng.standard_normal(g.types[v].shape)) if g.types[v].dtype == "bfloat16" else
           rng.standard_normal(g.types[v].shape).astype(g.types[v].dtype) for v in g.inputs]
    env = {**dict(zip(g.inputs, fed)), **g.constants}
    got = to_numpy(kern.run([env[v] for v in kern.inputs])[0]).astype(np.float32)
    ref = interp.run(g, fed)[out].astype(np.float32)
    assert got.shape == ref.shape
    scale = float(np.abs(ref).max())
    np.testing.assert_allclose(got, ref, rtol=1e-2, atol=1e-2 * scale)
    return kern


@pytest.mark.parametrize("M,K,N", [(64, 64, 64), (70, 40, 50), (1, 768, 96), (33, 100, 17), (96, 32, 160), (21, 27, 40)])
def test_matmul_on_tiles(path, M, K, N):
    rng = np.random.default_rng(M + K + N)
    b = Builder()
    x = b.input((M, K), "bfloat16")
    y = b.matmul(x, b.constant(_weight(rng, (K, N))))
    kern = _check(b, y)
    assert "A in place" in kern.spec.traits
    assert ("row remainder" in kern.spec.traits) == bool(M % amx.MR)
    assert ("column remainder" in kern.spec.traits) == bool(N % amx.NR)


def test_transposed_weight_and_float32_epilogue(path):
    """A Linear's weight stored (N, K) and read transposed; the product widened, biased and
    activated in float32 and stored as float32."""
    rng = np.random.default_rng(3)
    b = Builder()
    x = b.input((2, 45, 96), "bfloat16")
    w = b.constant(_weight(rng, (80, 96)))
    wt = b.view(w, layout.permute((80, 96), (1, 0)))
    y = b.cast(b.matmul(x, wt), "float32")
    out = b.unary(Op.RELU, b.binary(Op.ADD, y, b.broadcast_to(b.constant(rng.standard_normal(80).astype(np.float32)),
                                                               (2, 45, 80))))
    kern = _check(b, out)
    assert "batched" in kern.spec.traits


def test_computed_a_is_rounded_into_the_scratch(path):
    """A computed in the kernel (a float32 activation rounded to bf16) fills ``ap`` row block by row block."""
    rng = np.random.default_rng(4)
    b = Builder()
    x = b.input((50, 72))
    a = b.cast(b.unary(Op.TANH, x), "bfloat16")
    y = b.matmul(a, b.constant(_weight(rng, (72, 40))))
    kern = _check(b, y)
    assert "A computed" in kern.spec.traits and "panel groups" not in kern.spec.traits  # 2 panels, 2 threads


def test_pointwise_convolution_on_channels_last_pixels(path):
    """A 1x1 convolution whose image is the NHWC half of a layout pair: pixels are A's rows, with
    its float32 bias, the bf16 rounding, a residual add and a ReLU in the epilogue."""
    rng = np.random.default_rng(5)
    n, c, h, w, co = 1, 48, 7, 9, 64
    b = Builder()
    nhwc = b.input((n, h, w, c), "bfloat16")
    x = b.view(nhwc, layout.permute((n, h, w, c), (0, 3, 1, 2)))
    bias = b.constant(rng.standard_normal(co).astype(np.float32))
    y = b.conv(x, b.constant(_weight(rng, (co, c, 1, 1))), bias, ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1))
    res = b.input((n, co, h, w), "bfloat16")
    s = b.binary(Op.ADD, b.cast(y, "float32"), b.cast(res, "float32"))
    out = b.cast(b.unary(Op.RELU, s), "bfloat16")
    _check(b, out)


def test_packed_pairs_brute_force():
    """amx.pairs: [p, kk, n, e] = x[2kk + e, p*panel + n], zeros past K and N."""
    x = torch.arange(70 * 45, dtype=torch.float32).reshape(70, 45).to(torch.bfloat16)
    got = amx.pairs(x, amx.NR)
    kp = amx.padded_k(70)
    assert got.shape == (2, kp // 2, amx.NR, 2) and kp == 96
    for p in range(2):
        for kk in range(kp // 2):
            for n in range(amx.NR):
                for e in range(2):
                    k, col = 2 * kk + e, p * amx.NR + n
                    want = x[k, col] if k < 70 and col < 45 else 0
                    assert got[p, kk, n, e] == want


def test_no_amx_means_no_generated_bf16_product(monkeypatch):
    """Without AMX bf16 tiles a bf16 product is left to the vendor library; a 1x1 convolution on
    channels-first pixels (the weight as A) is left to it always."""
    b = Builder()
    x = b.input((16, 32), "bfloat16")
    y = b.matmul(x, b.constant(b16(np.ones((32, 32)))))
    g, members, outputs = finish(b, y)
    prims = [p for p in g.prims]
    monkeypatch.setattr(amx, "available", lambda: False)
    assert "not on float32" in templates.reasons(g, prims, outputs)["gemm"]
    monkeypatch.setattr(amx, "available", lambda: True)
    assert templates.first(g, prims, outputs).name == "gemm"
    b = Builder()
    img = b.input((1, 8, 10, 10), "bfloat16")
    y = b.conv(img, b.constant(b16(np.ones((16, 8, 1, 1)))), None, ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1))
    g, members, outputs = finish(b, y)
    assert "channels-first" in templates.reasons(g, list(g.prims), outputs)["gemm"]


@pytest.mark.parametrize("image,kernel,strides,pads,layout_", [
    ((1, 32, 9, 11), (3, 3), (1, 1), (1, 1, 1, 1), "nhwc"),  # borders copied with zeros, K = 288
    ((2, 24, 10, 10), (3, 3), (2, 2), (1, 0, 1, 0), "nhwc"),  # strided, uneven pads, K = 216 (not whole)
    ((1, 3, 17, 17), (7, 7), (2, 2), (3, 3, 3, 3), "nchw"),  # a stem on a channels-first image
    ((1, 40, 8, 8), (1, 1), (2, 2), (0, 0, 0, 0), "nhwc"),  # a strided 1x1 (a downsampling shortcut)
    ((1, 64, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), "nhwc"),  # 49 rows, 5 panels of a small weight: all per row block
    ((1, 128, 7, 7), (3, 3), (1, 1), (1, 1, 1, 1), "nhwc"),  # 9 panels of a 1.3 MB weight: groups of 5 and 4
])
def test_convolution_windows_on_tiles(path, image, kernel, strides, pads, layout_):
    """Any other convolution: each row block's windows copied into ``ap`` as bf16 (zeros in the
    pads), the weight packed in the windows' k order."""
    rng = np.random.default_rng(sum(image))
    n, c, h, w = image
    co = {64: 160, 128: 288}.get(c, 48)
    b = Builder()
    if layout_ == "nhwc":
        x = b.view(b.input((n, h, w, c), "bfloat16"), layout.permute((n, h, w, c), (0, 3, 1, 2)))
    else:
        x = b.input(image, "bfloat16")
    bias = b.constant(rng.standard_normal(co).astype(np.float32))
    y = b.conv(x, b.constant(_weight(rng, (co, c, *kernel))), bias, ConvAttrs(strides, pads, (1, 1), 1))
    out = b.unary(Op.RELU, b.cast(y, "float32"))
    kern = _check(b, out)
    assert "windows copied" in kern.spec.traits
    # a fill per row block for all panels (a small weight) or for each group of panels, never one per panel
    assert bool({"panel groups", "every panel per row block"} & set(kern.spec.traits)) == (co > amx.NR)
    assert ("panel groups" in kern.spec.traits) == (co == 288)


def test_product_of_two_activations_packs_b_per_unit(path):
    """Attention's scores: Q (rounded to bf16 in the kernel) times K transposed, per head, B packed
    in bf16 pairs per work unit (zero rows past K = 40, zero columns past N = 50), a scale after."""
    b = Builder()
    q = b.cast(b.input((3, 50, 40)), "bfloat16")
    k = b.input((3, 50, 40), "bfloat16")
    kt = b.view(k, layout.permute((3, 50, 40), (0, 2, 1)))
    s = b.binary(Op.MUL, b.cast(b.matmul(q, kt), "float32"), b.scalar(0.125))
    kern = _check(b, s)
    assert {"A computed", "batched", "column remainder", "row remainder"} <= set(kern.spec.traits)
    assert not kern.spec.packs  # nothing packed once: B is packed per unit


@pytest.mark.skipif(not amx.matrix_units(), reason="needs AMX tiles to read the configuration back")
def test_tile_configuration_reaches_the_unit():
    """kn_amx_begin's 64-byte configuration is what the tile unit holds afterwards (gcc 12's
    _tile_loadconfig declared 8 bytes read, so -O3 dropped the rows and columns: a #GP in the
    native driver on MobileNetV3, while these tests passed by luck of inlining)."""
    import ctypes

    from kernorch.codegen import toolchain
    from kernorch.codegen.c import HEADER

    probe = HEADER + "\nvoid kn_probe_config(uint8_t *out) { kn_amx_begin(); _tile_storeconfig(out); kn_amx_end(); }\n"
    lib = ctypes.CDLL(str(toolchain.compile_source(probe)))
    out = (ctypes.c_uint8 * 64)()
    lib.kn_probe_config(out)
    got = bytes(out)
    colsb = np.frombuffer(got[16:48], np.uint16)
    assert got[0] == 1 and list(colsb[:8]) == [64] * 8 and list(got[48:56]) == [16] * 8
    assert not any(colsb[8:]) and not any(got[56:])
