"""Every strategy on every model: compile, run, compare with onnxruntime.

    python -m bench.check_strategies [--models light,bench,NAME...] [--small] [--cost model|measured] [--db FILE]

The onnx package's light models get random weights (bench.export.randomize_weights: their shipped
weights are constant fills, under which every logit is equal) and their logits are compared too.
Costs are the roofline model by default (no tuning); ``--cost measured`` times the candidates and
keeps the timings in ``--db`` (default: a fresh temporary file, so every kernel is measured).

Prints one line per model x strategy: kernels, max error relative to the output scale, OK/MISMATCH.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any, Iterator

import numpy as np
import onnxruntime as ort

import kernorch
from kernorch.orchestrate.strategies import STRATEGIES

BENCH = ["candy", "segformer_b0", "efficientvit_b0", "vit_tiny", "gpt2_block", "cspdarknet53_mish"]


def models(which: str, small: bool) -> Iterator[tuple[str, Any]]:
    """``(name, ONNX path or ModelProto)`` for each requested model, one at a time (vgg19 with random
    weights is 560 MB)."""
    import onnx

    from bench.export import export_onnx, light_models, randomize_weights

    light = light_models()
    size = "small" if small else None
    for w in which.split(","):
        if w == "light":
            for k, path in light.items():
                yield k, randomize_weights(onnx.load(str(path)))
        elif w in light:
            yield w, randomize_weights(onnx.load(str(light[w])))
        elif w == "bench":
            for m in BENCH:
                yield m, str(export_onnx(m, "torchscript", size=size, verbose=False))
        else:
            yield w, str(export_onnx(w, "torchscript", size=size, verbose=False))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="light,bench", help="comma-separated: light, bench, or model names")
    ap.add_argument("--small", action="store_true", help="benchmark models at their small test sizes")
    ap.add_argument("--cost", choices=("model", "measured"), default="model",
                    help="roofline model (default, fast) or measured kernel timings")
    ap.add_argument("--db", metavar="FILE", help="tuning database for --cost measured (default: a fresh temp file)")
    args = ap.parse_args(argv)
    db = args.db or os.path.join(tempfile.mkdtemp(prefix="kn-strategies-"), "tuning.sqlite")
    bad = 0
    for name, model in models(args.models, args.small):
        src = model if isinstance(model, str) else model.SerializeToString()
        so = ort.SessionOptions()
        so.log_severity_level = 3  # the light models list their initializers as graph inputs: one warning each
        sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
        want = sess.run(None, feeds)
        for s in STRATEGIES:
            t = time.perf_counter()
            m = kernorch.compile(model, strategy=s, cost=args.cost, db=db, progress=False)
            got = m.run(feeds)
            err = max(float(np.abs(got[n].numpy() - w).max()) / max(1.0, float(np.abs(w).max()))
                      for n, w in zip(m.output_names, want))
            ok = err <= 1e-4
            bad += not ok
            print(f"{name:22} {s:13} {len(m.kernels):5} kernels  rel err {err:.2e}  {'OK' if ok else 'MISMATCH'}"
                  f"  ({time.perf_counter() - t:.1f} s)", flush=True)
        del model, sess, src
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
