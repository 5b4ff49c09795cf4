"""Ahead-of-time compilation of generated GPU sources for sm_90, run as a subprocess by
test_triton_compile.py: Triton decides at import whether its own library is interpreted, so the
compiler cannot run in a process that already imported triton under TRITON_INTERPRET=1.

    python tests/cuda/cuda_aot.py        one JSON line per case: [label, null | error]
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CODEGEN_TESTS = HERE.parent / "codegen"
TY = {"float32": "*fp32", "float64": "*fp64", "int32": "*i32", "int64": "*i64", "bool": "*i1", "int8": "*i8",
      "uint8": "*u8", "int16": "*i16"}
OPS = ["tanh_float32", "pow_float32", "round_float32", "softplus_float32", "erf_float64", "mod_float32",
       "div_int64", "mod_int32", "prod_float32_axis1", "rmax_bool", "sum_bool", "cast_float32_bool", "sign_int64",
       "where_int64", "not_bool", "sqrt_float64"]
LOOPED = {"softmax_odd_rows": 256, "group_norm": 32, "residual_layernorm": 256, "multi_output_stats": 32}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"aot_{name}", CODEGEN_TESTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def cases():
    """(label, graph, members, outputs, config): every fused class, a few looped tiles, the ops
    whose GPU form differs from the interpreter's (libdevice) or is easy to get wrong."""
    from kernorch.codegen.triton_lower import TritonConfig

    sys.path.insert(0, str(CODEGEN_TESTS))
    cg, fused, ops = _load("cg_util"), _load("test_fused"), _load("test_ops")
    out = [(f"fused/{n}", *cg.one_kernel(fn), TritonConfig()) for n, fn in fused.CASES.items()]
    out += [(f"looped/{n}", *cg.one_kernel(fused.CASES[n]), TritonConfig(b, 4)) for n, b in LOOPED.items()]
    out += [(f"ops/{n}", *ops.CASES[n](), TritonConfig()) for n in OPS]
    return out


def compile_spec(spec, triton, ASTSource, GPUTarget) -> None:
    from kernorch.codegen.triton import emit_triton
    from kernorch.codegen.triton_kernel import load_module

    src, table = emit_triton(spec, interpret=False)
    mod = load_module(src, spec.name)
    dtypes = [a.dtype for a in spec.args] + ([str(table.dtype)] if len(table) else [])
    for grp in spec.groups:
        fn = getattr(mod, grp.name)
        sig = {a: TY[d] for a, d in zip(fn.arg_names, dtypes)}
        k = triton.compile(ASTSource(fn, sig), target=GPUTarget("cuda", 90, 32), options={"num_warps": grp.warps})
        assert k.asm.get("cubin"), f"{grp.name}: no cubin"
        fn.cache_key  # noqa: B018 - hashing records the globals each launch re-checks with !=
        unequal = [name for (name, _), (value, _) in fn.used_global_vals.items() if value != value]
        assert not unequal, f"{grp.name}: globals a launch finds changed (nan != nan): {unequal}"


def main() -> None:
    os.environ.pop("TRITON_INTERPRET", None)
    sys.path.insert(0, str(HERE.parents[1]))
    from kernorch.codegen.triton_lower import lower_triton

    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as e:
        print(json.dumps(["skip", f"no ahead-of-time compiler API in this triton ({e})"]))
        return
    if importlib.util.find_spec("triton.backends.nvidia") is None:
        print(json.dumps(["skip", "triton has no CUDA backend here"]))
        return
    for label, g, members, outputs, config in cases():
        try:
            compile_spec(lower_triton(g, members, outputs, config), triton, ASTSource, GPUTarget)
            err = None
        except Exception as e:  # noqa: BLE001 - reported per case
            err = f"{type(e).__name__}: {e}"[:2000]
        print(json.dumps([label, err]), flush=True)


if __name__ == "__main__":
    main()
