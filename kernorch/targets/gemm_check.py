"""How fast kernorch's generated GEMM runs on this CPU next to the library (oneDNN through PyTorch,
weight prepacked): the per-machine efficiency check of ``kernorch doctor`` and of the first compile
on a CPU, and the cases ``bench/gemm_micro.py`` times.

Generated code's speed depends on what the compiler makes of it for this processor: a tuning that
split vector moves once made it 3-9x slower than oneDNN on one Xeon and level on another. So at
first use per machine (CPU model, ISA, compiler and flags: the machine signature) and code-generator
version, three products are timed, generated against oneDNN, and the ratios cached as JSON in the
build cache. A compile whose CPU runs the generated GEMM far behind says so in one line (the
solver prices both and takes the library where it is faster).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from kernorch import codegen
from kernorch.codegen.version import CODEGEN_VERSION
from kernorch.ir.graph import Builder
from kernorch.ir.prims import ConvAttrs, Op
from kernorch.options import DEFAULT_CODEGEN, CodegenOptions, Env
from kernorch.orchestrate.machine import machine_signature

# (label, case): a ViT-Tiny projection, a ResNet-50 1x1 convolution NCHW and channels-last
CALIBRATION = (("matmul", "matmul", (197, 192, 768)), ("conv1x1", "conv", (64, 256, 3136)),
               ("NHWC 1x1", "conv_nhwc", (128, 512, 784)))
BEHIND = 0.5  # generated / library speed below this: the compile says so
Case = tuple[Callable[[], object], Callable[[], object], Callable[[], object]]  # generated, oneDNN, addmm


def median_us(fn: Callable[[], object], repeat: int, before: Callable[[], object] | None = None) -> float:
    """Median microseconds of ``fn`` over ``repeat`` calls after 5 warm-up calls (``before`` runs
    untimed ahead of each, e.g. to flush the caches)."""
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def alternated_us(calls: list, rounds: int, repeat: int) -> list[float | None]:
    """Each call's median microseconds (``median_us``), the median over ``rounds`` rounds in which
    the calls alternate, so that the machine's drift hits them alike; None for a call that is None."""
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(rounds):
        for t, call in zip(times, calls):
            if call is not None:
                t.append(median_us(call, repeat))
    return [statistics.median(t) if t else None for t in times]


def generated_call(b: Builder, y: int, threads: int, feeds: list[np.ndarray], env: Env | None,
                   options: CodegenOptions = DEFAULT_CODEGEN) -> Callable[[], object]:
    """A call of the C kernel generated for all of ``b``'s graph (output ``y``) on ``feeds``."""
    b.g.outputs = [y]
    members = {p.output for p in b.g.prims}
    kernel = codegen.build_kernel(b.g, members, [y], num_threads=threads, env=env, options=options)
    if kernel.provider != "c":
        raise RuntimeError(f"the product was not generated as C ({kernel.provider})")
    values = dict(zip(b.g.inputs, feeds))
    values.update(b.g.constants)
    ins = [torch.from_numpy(np.ascontiguousarray(values[v])) for v in kernel.inputs]
    outs = kernel.run(ins)
    call = kernel.prepared(ins, outs)  # raw pointers: keep the kernel and its tensors alive with it
    return lambda: call() if (kernel, ins, outs) else None


def matmul_case(m: int, k: int, n: int, threads: int, rng, env: Env | None = None) -> Case:
    x = rng.standard_normal((1, m, k)).astype(np.float32)
    w = rng.standard_normal((k, n)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    b = Builder()
    y = b.binary(Op.ADD, b.matmul(b.input((1, m, k)), b.constant(w)), b.constant(bias))
    gen = generated_call(b, y, threads, [x], env)
    xt, wt, bt = torch.from_numpy(x[0]), torch.from_numpy(w), torch.from_numpy(bias)
    packed = torch.ops.mkldnn._reorder_linear_weight(wt.t().contiguous(), m)
    out = torch.empty(m, n)
    return gen, (lambda: torch.ops.mkldnn._linear_pointwise(xt, packed, bt, "none", [], "")), \
        (lambda: torch.addmm(bt, xt, wt, out=out))


def conv_case(cout: int, cin: int, hw: int, threads: int, rng, env: Env | None = None) -> Case:
    side = int(round(hw ** 0.5))
    x = rng.standard_normal((1, cin, side, side)).astype(np.float32)
    w = rng.standard_normal((cout, cin, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    b = Builder()
    y = b.conv(b.input(x.shape), b.constant(w), b.constant(bias), ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1))
    gen = generated_call(b, y, threads, [x], env)
    xt, wt, bt = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias)
    packed = torch.ops.mkldnn._reorder_convolution_weight(wt, [0, 0], [1, 1], [1, 1], 1, list(x.shape))
    out = torch.empty(cout, hw)
    return gen, (lambda: torch.ops.mkldnn._convolution_pointwise(xt, packed, bt, [0, 0], [1, 1], [1, 1], 1,
                                                                  "none", [], "")), \
        (lambda: torch.addmm(bt.view(cout, 1), wt.view(cout, cin), xt.view(cin, hw), out=out))


def conv_nhwc_case(cout: int, cin: int, hw: int, threads: int, rng, env: Env | None = None) -> Case:
    """The same convolution between channels-last tensors: the generated GEMM's rows are the
    pixels (its input and output are the NHWC halves of layout pairs)."""
    side = int(round(hw ** 0.5))
    x = rng.standard_normal((1, side, side, cin)).astype(np.float32)
    w = rng.standard_normal((cout, cin, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    b = Builder()
    xv = b.permute(b.input(x.shape), (0, 3, 1, 2))
    y = b.conv(xv, b.constant(w), b.constant(bias), ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1))
    gen = generated_call(b, b.permute(y, (0, 2, 3, 1)), threads, [x], env)
    xt = torch.from_numpy(x).permute(0, 3, 1, 2)  # NCHW view of channels-last memory
    wt, bt = torch.from_numpy(w), torch.from_numpy(bias)
    packed = torch.ops.mkldnn._reorder_convolution_weight(wt, [0, 0], [1, 1], [1, 1], 1, list(xt.shape))
    out = torch.empty(hw, cout)
    wtt = wt.view(cout, cin).t()
    return gen, (lambda: torch.ops.mkldnn._convolution_pointwise(xt, packed, bt, [0, 0], [1, 1], [1, 1], 1,
                                                                  "none", [], "")), \
        (lambda: torch.addmm(bt, torch.from_numpy(x).view(hw, cin), wtt, out=out))


CASES = {"matmul": matmul_case, "conv": conv_case, "conv_nhwc": conv_nhwc_case}


def measure(threads: int, repeat: int = 20, env: Env | None = None) -> dict[str, float]:
    """{label: oneDNN's time / the generated GEMM's} for the CALIBRATION products (1.0: level)."""
    rng = np.random.default_rng(0)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        ratios = {}
        for label, kind, dims in CALIBRATION:
            gen, lib, _ = CASES[kind](*dims, threads, rng, env)
            ratios[label] = median_us(lib, repeat) / median_us(gen, repeat)
        return ratios
    finally:
        torch.set_num_threads(before)


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def cached(threads: int, env: Env | None = None, refresh: bool = False) -> dict[str, float]:
    """``measure``'s ratios for this machine, measured once per machine signature, thread count and
    code-generator version (a JSON file in the build cache)."""
    env = env or Env.read()
    path = env.build_dir() / "gemm_check.json"
    key = f"{machine_signature(env.cc, env.cflags)}|t{threads}|{CODEGEN_VERSION}"
    try:
        known = json.loads(path.read_text())
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    if refresh or not isinstance(known.get(key), dict):
        known[key] = measure(threads, env=env)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        tmp.replace(path)
    return {str(k): float(v) for k, v in known[key].items()}


def behind_note(ratios: dict[str, float]) -> str:
    """One line when the generated GEMM runs far behind the library on this CPU, else ''."""
    g = geomean(ratios.values())
    if g >= BEHIND:
        return ""
    return (f"generated GEMMs run at {g:.2f}x oneDNN's speed on this CPU (kernorch doctor): the plan takes "
            f"the library's linear kernels wherever they price faster")
