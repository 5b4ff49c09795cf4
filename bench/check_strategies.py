"""Every strategy on every model: compile (roofline costs, no tuning), run, compare with onnxruntime.

    python -m bench.check_strategies [--models light,bench] [--small]

Prints one line per model x strategy: kernels, max error relative to the output scale, OK/MISMATCH.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import onnxruntime as ort

import kernorch
from kernorch.orchestrate.strategies import STRATEGIES

BENCH = ["candy", "segformer_b0", "efficientvit_b0", "vit_tiny", "gpt2_block", "cspdarknet53_mish"]


def models(which: str, small: bool) -> dict[str, str]:
    from bench.export import export_onnx, light_models

    out: dict[str, str] = {}
    for w in which.split(","):
        if w == "light":
            out.update({k: str(v) for k, v in light_models().items()})
        elif w == "bench":
            out.update({m: str(export_onnx(m, "torchscript", size="small" if small else None, verbose=False))
                        for m in BENCH})
        else:
            out[w] = str(export_onnx(w, "torchscript", size="small" if small else None, verbose=False))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="light,bench")
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args(argv)
    bad = 0
    db = tempfile.mkdtemp(prefix="kn-strategies-")
    for name, path in models(args.models, args.small).items():
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
        want = sess.run(None, feeds)
        for s in STRATEGIES:
            t = time.perf_counter()
            m = kernorch.compile(path, strategy=s, cost="model", db=f"{db}/{name}.sqlite", progress=False)
            got = m.run(feeds)
            err = max(float(np.abs(got[n].numpy() - w).max()) / max(1.0, float(np.abs(w).max()))
                      for n, w in zip(m.output_names, want))
            ok = err <= 1e-4
            bad += not ok
            print(f"{name:22} {s:13} {len(m.kernels):5} kernels  rel err {err:.2e}  {'OK' if ok else 'MISMATCH'}"
                  f"  ({time.perf_counter() - t:.1f} s)", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
