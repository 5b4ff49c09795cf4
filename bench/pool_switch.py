"""What a thread-pool switch costs: small kernels of kernorch's own pool (PyTorch ops and generated
C, one libgomp pool) alternating with kernels of a runtime that brings its own pool (onnxruntime,
OpenVINO's TBB), against each library's kernels back to back.

    python -m bench.pool_switch [--threads 2] [--n 200]

switch cost = (alternating - mean of the two back-to-back runs) / number of switches.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import onnx
import torch
from onnx import TensorProto, helper


def _relu_model(path: str, n: int) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def _runtimes(path: str, threads: int) -> dict:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    out = {"onnxruntime": lambda a: sess.run(None, {"x": a})}
    try:
        import openvino as ov

        core = ov.Core()
        compiled = core.compile_model(path, "CPU", {"INFERENCE_NUM_THREADS": threads, "INFERENCE_PRECISION_HINT": "f32",
                                                    "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1})
        req = compiled.create_infer_request()
        out["openvino"] = lambda a: req.infer({0: a})
    except ImportError:
        pass
    return out


def _median(fn, rounds: int = 15) -> float:
    fn()
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=200, help="kernels per run")
    ap.add_argument("--elems", type=int, default=1 << 16, help="elements per kernel")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    a = np.random.default_rng(0).standard_normal(args.elems).astype(np.float32)
    t = torch.from_numpy(a)
    out = torch.empty_like(t)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "relu.onnx")
        _relu_model(path, args.elems)
        runtimes = _runtimes(path, args.threads)
        own = _median(lambda: [torch.clamp_min(t, 0.0, out=out) for _ in range(args.n)])
        print(f"load average {os.getloadavg()[0]:.2f}; {args.threads} threads; {args.n} kernels of "
              f"{args.elems} elements per run; median of 15 runs")
        print(f"{'runtime':12s} {'own pool alone':>16s} {'runtime alone':>14s} {'alternating':>12s} "
              f"{'per switch':>11s}")
        for name, run in runtimes.items():
            alone = _median(lambda: [run(a) for _ in range(args.n)])

            def alternate():
                for i in range(args.n):
                    if i % 2:
                        run(a)
                    else:
                        torch.clamp_min(t, 0.0, out=out)
            mixed = _median(alternate)
            switch = (mixed - (own + alone) / 2) / (args.n - 1)
            print(f"{name:12s} {own / args.n * 1e6:13.1f} us {alone / args.n * 1e6:11.1f} us "
                  f"{mixed / args.n * 1e6:9.1f} us {switch * 1e6:8.1f} us")


if __name__ == "__main__":
    main()
