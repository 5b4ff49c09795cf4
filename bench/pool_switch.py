"""What a thread-pool switch costs: small kernels of kernorch's own pool (PyTorch ops and generated
C, one libgomp pool) alternating with kernels of a runtime that brings its own pool (onnxruntime,
OpenVINO's TBB), against each library's kernels back to back.

    python -m bench.pool_switch [--threads 2] [--n 200]

Each call is timed on its own; switch cost = (own kernel after the other runtime - own kernel
after itself) + (other runtime after an own kernel - other runtime after itself).
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


def _per_call(fn, n: int, rounds: int = 5) -> list[float]:
    """Seconds of each call of ``fn(i)`` for i in range(n), over ``rounds`` runs (one warm-up)."""
    times: list[float] = []
    for r in range(rounds + 1):
        for i in range(n):
            t = time.perf_counter()
            fn(i)
            if r:
                times.append(time.perf_counter() - t)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=200, help="kernels per run")
    ap.add_argument("--elems", type=int, default=1 << 18, help="elements per kernel")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    a = np.random.default_rng(0).standard_normal(args.elems).astype(np.float32)
    t = torch.from_numpy(a)
    out = torch.empty_like(t)

    def own(_i=0):
        torch.clamp_min(t, 0.0, out=out)

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "relu.onnx")
        _relu_model(path, args.elems)
        runtimes = _runtimes(path, args.threads)
        alone = statistics.median(_per_call(own, args.n))
        print(f"load average {os.getloadavg()[0]:.2f}; {args.threads} threads; relu kernels of {args.elems} "
              f"elements; median per call over {args.n} x 5 calls")
        print(f"{'other runtime':14s} {'own kernel alone':>17s} {'own after other':>16s} {'other alone':>12s} "
              f"{'other after own':>16s} {'switch cost':>12s}")
        for name, run in runtimes.items():
            other_alone = statistics.median(_per_call(lambda i: run(a), args.n))
            mixed = _per_call(lambda i: own() if i % 2 else run(a), args.n)
            own_after = statistics.median(mixed[1::2])
            other_after = statistics.median(mixed[0::2])
            switch = (own_after - alone) + (other_after - other_alone)
            print(f"{name:14s} {alone * 1e6:14.1f} us {own_after * 1e6:13.1f} us {other_alone * 1e6:9.1f} us "
                  f"{other_after * 1e6:13.1f} us {switch * 1e6:9.1f} us")


if __name__ == "__main__":
    main()
