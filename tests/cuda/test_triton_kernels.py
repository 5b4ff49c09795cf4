"""Every kernel class the C generator's tests cover (tests/codegen: fused kernel classes, every op
and dtype, random convex kernels of random graphs), emitted as Triton and run on the target
device (Triton's interpreter on CPU tensors without a GPU), against the reference interpreter.
Plus the tile structure: persistent rows, looped tiles, scratch through memory, lookup tables."""


import re

import numpy as np
import pytest

from cuda_util import compare, load_codegen_cases
from kernorch.codegen.facts import CannotGenerate
from kernorch.codegen.triton import can_generate_triton, emit_triton, tuning_space, why_not_triton
from kernorch.codegen.triton_lower import TritonConfig, lower_triton
from kernorch.ir import interp, layout
from kernorch.ir.graph import Builder
from kernorch.ir.prims import Op



FUSED = load_codegen_cases("test_fused")
OPS = load_codegen_cases("test_ops")
RANDOM = load_codegen_cases("test_random_graphs")
cg = load_codegen_cases("cg_util")

# Reduction-shaped classes rerun with small tiles (name -> elements per tile): looped chunks, odd
# tails, scratch buffers and barriers instead of registers.
LOOPED = {"softmax_odd_rows": 256, "layernorm_odd": 256, "group_norm": 32, "residual_layernorm": 256,
          "multi_output_stats": 32, "reduce_batchnorm_stats": 64, "instance_norm": 32, "rmsnorm": 128}


def _kernel(g, members, outputs, config=None):
    from kernorch.codegen.triton_kernel import build_cuda, cuda_device

    return build_cuda(g, members, outputs, cuda_device(), config)


@pytest.mark.parametrize("name", list(FUSED.CASES))
def test_fused_class_matches_interpreter(name):
    g, members, outputs = cg.one_kernel(FUSED.CASES[name])
    assert can_generate_triton(g, members, outputs), why_not_triton(g, members, outputs)
    compare(_kernel(g, members, outputs), g, outputs, cg.feeds(g))


@pytest.mark.parametrize("name", list(LOOPED))
def test_looped_tiles_match_interpreter(name):
    g, members, outputs = cg.one_kernel(FUSED.CASES[name])
    kern = _kernel(g, members, outputs, TritonConfig(block=LOOPED[name], warps=4))
    assert "for c" in kern.source  # really looped
    compare(kern, g, outputs, cg.feeds(g, seed=3))


@pytest.mark.parametrize("name,block", [("softmax_middle", 64), ("softmax_middle", 4096),
                                        ("column_stats_then_rows", 64), ("reduce_middle_max", 4096)])
def test_kept_lane_reductions_match_interpreter(name, block, monkeypatch):
    # Planned for few threads, a middle-axis reduction shares its group with the elementwise
    # stages: several results per o (a kept lane, axis 1), written to scratch and read back.
    from kernorch.codegen import schedule, triton_lower

    monkeypatch.setattr(triton_lower, "make_schedule",
                        lambda *args, grid: schedule.make_schedule(*args, threads=2))
    g, members, outputs = cg.one_kernel(FUSED.CASES[name])
    kern = _kernel(g, members, outputs, TritonConfig(block=block, warps=4))
    if name == "softmax_middle":
        assert "[None, :, None]" in kern.source and len(kern.spec.groups) == 1
    compare(kern, g, outputs, cg.feeds(g, seed=4))


@pytest.mark.parametrize("name", [n for n in OPS.CASES if n != "pow_int64_scalar"])
def test_op_matches_interpreter(name):
    g, members, outputs = OPS.CASES[name]()
    fed = [OPS.special(g.types[v].dtype, seed) for seed, v in enumerate(g.inputs)]
    if name.startswith("prod"):
        fed = [np.where(np.isinf(f), 1.5, f) if f.dtype.kind == "f" else f if f.dtype == bool else np.clip(f, -2, 2)
               for f in fed]
    if name.startswith("cast_float32_int"):
        fed = [np.nan_to_num(f, posinf=7, neginf=-7) for f in fed]
    compare(_kernel(g, members, outputs), g, outputs, fed, rtol=1e-5, atol=1e-6)


def test_integer_pow_is_refused_with_the_culprit():
    g, members, outputs = OPS.CASES["pow_int64_scalar"]()
    assert "integer pow" in why_not_triton(g, members, outputs)
    with pytest.raises(CannotGenerate, match="integer pow"):
        _kernel(g, members, outputs)


@pytest.mark.parametrize("k", range(len(RANDOM.CASES)))
def test_random_kernel_matches_interpreter(k):
    seed, g, feeds, members, outs = RANDOM.CASES[k]
    env = interp.run(g, feeds, keep=True)
    kern = _kernel(g, members, outs)
    got = kern.run([env[v] for v in kern.inputs])
    for v, t in zip(outs, got):
        np.testing.assert_allclose(t.cpu().numpy(), env[v], rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")


# -- structure -----------------------------------------------------------------------------------
def _spec(name, config=TritonConfig()):
    g, members, outputs = cg.one_kernel(FUSED.CASES[name])
    return lower_triton(g, members, outputs, config)


@pytest.mark.parametrize("name", ["softmax_last", "layernorm", "attention_softmax", "residual_layernorm",
                                  "group_norm", "instance_norm", "max_pool", "gelu_erf_chain"])
def test_row_kernels_are_one_persistent_launch(name):
    spec = _spec(name)
    src, _ = emit_triton(spec)
    assert len(spec.groups) == 1
    assert "for c" not in src and "tl.debug_barrier" not in src  # the row stays in registers
    assert src.count("tl.store(") == len(spec.outputs)


def test_softmax_reads_its_input_once():
    src, _ = emit_triton(_spec("softmax_last"))
    assert src.count("tl.load(") == 1


def test_wide_rows_loop_when_they_do_not_fit():
    spec = _spec("softmax_last", TritonConfig(block=256, warps=4))
    src, _ = emit_triton(spec)
    assert len(spec.groups) == 1 and src.count("for c") == 3  # max, sum, normalize: exp is recomputed
    assert "ws0" not in src


def test_lookup_tables_are_an_argument():
    spec = _spec("nearest_resize_table")
    src, table = emit_triton(spec)
    assert "tab" in src and table.dtype == np.int32 and list(table) == [0, 0, 1, 2, 2, 3, 4, 4, 5, 6]


def test_a_reflect_pads_negative_index_is_folded_by_maximum():
    """Reflect padding reads x[|j|] with j = column - 3 negative on the left edge: the kernel body
    (not the prelude, which defines the floor helpers in every kernel) folds it as max(j, -j)."""
    b = Builder()
    x = b.input((2, 9))
    y = b.view(x, layout.pad((2, 9), (0, 3), (0, 2), "reflect"))
    g, members, outputs = cg.finish(b, b.unary(Op.NEG, y))
    src, _ = emit_triton(lower_triton(g, members, outputs))
    body = src.split("def kt_")[-1]
    assert re.search(r"tl\.maximum\(\(\(v(\d+)\) % 14\) - 3, -1 \* \(\(v\1\) % 14\) \+ 3\)", body), body
    compare(_kernel(g, members, outputs), g, outputs, cg.feeds(g))


def test_interpreter_source_has_no_libdevice_calls():
    g, members, outputs = cg.one_kernel(FUSED.CASES["gelu_tanh_chain"])
    spec = lower_triton(g, members, outputs)
    gpu, _ = emit_triton(spec, interpret=False)
    cpu, _ = emit_triton(spec, interpret=True)
    assert "libdevice.tanh(" in gpu and "libdevice.pow(" in gpu
    assert "libdevice." not in cpu.split("def _mul")[1]


def test_tuning_space_offers_a_persistent_tile_for_wide_rows():
    b = Builder()
    g, members, outputs = cg.finish(b, cg.softmax(b, b.input((4, 10000)), -1))
    spec = lower_triton(g, members, outputs, TritonConfig(4096, 8))
    assert any(c.block >= 16384 for c in tuning_space(spec))
    wide = lower_triton(g, members, outputs, TritonConfig(16384, 16))
    assert "for c" not in emit_triton(wide)[0]


@pytest.mark.parametrize("name", ["softmax_odd_rows", "group_norm", "output_feeds_output"])
def test_tile_sizes_of_one_lowering_all_match_interpreter(name):
    # the tuning path: one schedule, several tile sizes (scratch decisions must not leak between them)
    from kernorch.codegen.triton_kernel import TritonKernel, cuda_device
    from kernorch.codegen.triton_lower import TritonLowering

    g, members, outputs = cg.one_kernel(FUSED.CASES[name])
    low = TritonLowering(g, members, outputs)
    for config in (TritonConfig(16, 4), TritonConfig(4096, 8), TritonConfig(64, 2)):
        spec = low.spec(config)
        assert spec.config == config
        compare(TritonKernel(spec, g.types, cuda_device()), g, outputs, cg.feeds(g, seed=5))
