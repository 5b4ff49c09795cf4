"""Micro-benchmark of the float math functions generated kernels inline (codegen/c.py: kn_sigmoidf,
kn_tanhf, kn_erff, rational functions of x) against the libm calls they replace (glibc's libmvec SIMD
variants where it exists, as kernels called them before codegen c28), in the loops models run them
in: a SiLU, a tanh and an erf GELU over one 96 x 112 x 112 activation. Calls of the variants alternate
in one process, so the machine's drift hits them alike.

    python -m bench.math_micro [--threads 2] [--repeat 30] [--rounds 3]

Prints the machine, a table (median microseconds, the speed-up, each variant's largest error against
float64 NumPy/SciPy) and asserts nothing (timings belong here, not in tests).
"""

from __future__ import annotations

import ctypes

import numpy as np
import scipy.special

from bench import micro
from bench.peers import machine_header
from kernorch.codegen import toolchain
from kernorch.codegen.c import HEADER
from kernorch.targets.gemm_check import alternated_us

N = 96 * 112 * 112

# name: (the inlined loop body, libm's, the exact value in float64); v is the input element
FUNCTIONS = {
    "silu": ("v * kn_sigmoidf(v)", "v * (1.0f / (1.0f + expf(-v)))", lambda x: x * scipy.special.expit(x)),
    "tanh": ("kn_tanhf(v)", "tanhf(v)", np.tanh),
    "gelu (erf)": ("0.5f * v * (1.0f + kn_erff(v * 0.70710678f))", "0.5f * v * (1.0f + erff(v * 0.70710678f))",
                   lambda x: 0.5 * x * (1 + scipy.special.erf(x / np.sqrt(2)))),
}


def _source() -> str:
    loop = ("void {name}(const float *restrict x, float *restrict y, int64_t n, int nt) {{\n"
            "#pragma omp parallel for num_threads(nt)\n"
            "  for (int64_t i = 0; i < n; i++) {{ const float v = x[i]; y[i] = {body}; }}\n}}\n")
    return HEADER + "".join(loop.format(name=f"f{i}_{variant}", body=body)
                            for i, bodies in enumerate(FUNCTIONS.values())
                            for variant, body in zip(("inlined", "libm"), bodies[:2]))


def main(argv=None) -> None:
    args = micro.parse(__doc__, argv)
    print(machine_header(args.threads))
    lib = toolchain.load(toolchain.compile_source(_source()))
    x = (np.random.default_rng(0).standard_normal(N) * 4).astype(np.float32)
    exact_in = x.astype(np.float64)
    print(f"{'function':12} {'inlined':>10} {'libm':>10} {'libm / inlined':>15} {'max |err| inlined':>18} "
          f"{'max |err| libm':>15}")
    for i, (name, (*_, exact)) in enumerate(FUNCTIONS.items()):
        outs, calls = [], []
        for variant in ("inlined", "libm"):
            fn = getattr(lib, f"f{i}_{variant}")
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
            y = np.empty_like(x)
            outs.append(y)
            calls.append(lambda fn=fn, y=y: fn(x.ctypes.data, y.ctypes.data, N, args.threads))
        inlined, libm = alternated_us(calls, args.rounds, args.repeat)
        want = exact(exact_in)
        errs = [float(np.max(np.abs(y.astype(np.float64) - want))) for y in outs]
        print(f"{name:12} {inlined:10.1f} {libm:10.1f} {libm / inlined:14.2f}x {errs[0]:18.2e} {errs[1]:15.2e}")


if __name__ == "__main__":
    main()
