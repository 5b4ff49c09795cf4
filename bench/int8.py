"""kernorch int8 against the peers, per model, in one process: onnxruntime f32 (the accuracy
reference), OpenVINO bf16 (the fastest peer at any precision on a CPU with AMX), onnxruntime int8
and OpenVINO on the same QDQ model (onnxruntime's ``quantize_static``: per-channel symmetric int8
weights, uint8 activations, min-max), and kn-own int8 (``precision="int8"`` on the same
calibration feeds, measured plan, no provider regions), timed interleaved; each runtime's
accuracy against onnxruntime f32 on the same held-out input.

    python -m bench.int8 [--models resnet50,mobilenetv3_large,bert_base] [--small] [--repeats 9]
                         [--threads 2] [--calibration 8] [--db PATH]

The bench models have random weights and no dataset: the calibration batches are seeded random
inputs of the model's input shapes (the same batches for every quantized runtime), so accuracy
figures say how faithfully each runtime computes the QDQ model, not how a trained model fares.
Run it alone, on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import peers
from bench.precision import accuracy

MODELS = ["resnet50", "mobilenetv3_large", "bert_base"]
INT8 = ("onnxruntime int8", "openvino qdq", "kn-own int8")


def calibration_batches(feeds: dict[str, np.ndarray], n: int, seed: int = 1000) -> list[dict[str, np.ndarray]]:
    """``n`` random batches shaped like ``feeds``: standard normal floats; integers (token ids,
    masks) drawn from the range the bench's own feeds use."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        batch = {}
        for k, a in feeds.items():
            if a.dtype.kind == "f":
                batch[k] = rng.standard_normal(a.shape).astype(a.dtype)
            else:
                batch[k] = rng.integers(int(a.min()), int(a.max()) + 1, a.shape).astype(a.dtype)
        out.append(batch)
    return out


def bench_one(name: str, args, db: str, folder: Path) -> dict:
    import onnx

    from bench.run import load_model
    from kernorch.frontend.quantize import quantize_int8

    m = load_model(name, args)
    path, feeds = m["path"], m["feeds"]
    calib = calibration_batches(feeds, args.calibration)
    qdq = folder / f"{name}.qdq.onnx"
    t0 = time.perf_counter()
    onnx.save(quantize_int8(onnx.load(str(path)), calib), qdq)
    quantize_s = time.perf_counter() - t0
    runners = {"onnxruntime": peers.ort_runner("ort", path, feeds, args.threads, True),
               "onnxruntime int8": peers.ort_runner("ort int8", qdq, feeds, args.threads, True)}
    if peers.openvino_available():
        runners["openvino bf16"] = peers.openvino_runner(path, feeds, args.threads, "bf16")
        runners["openvino qdq"] = peers.openvino_runner(qdq, feeds, args.threads, "bf16")
    model, wall = peers.kernorch_compile(path, "optimal", None, db, args.threads, regions=False, precision="int8",
                                         calibration=calib)
    runners["kn-own int8"] = peers.kernorch_runner("kn-own int8", model, feeds, wall)
    steps = sum("oneDNN int8" in getattr(getattr(k, "built", None), "detail", "") for k in model.kernels)
    ref = runners["onnxruntime"].outputs()
    acc = {k: accuracy(ref, runners[k].outputs()) for k in runners if k != "onnxruntime"}
    samples = peers.interleaved(runners, args.repeats, 0.05, 0.5)
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    noise = {k: (max(v) - min(v)) / statistics.median(v) for k, v in samples.items()}
    return dict(model=name, ms={k: round(v, 3) for k, v in med.items()}, noise={k: round(v, 2) for k, v in noise.items()},
                accuracy=acc, compile_s=round(wall, 1), quantize_s=round(quantize_s, 1),
                kernels=len(model.executable.infos), int8_steps=steps)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--small", action="store_true", help="the bench's small sizes (a smoke run)")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calibration", type=int, default=8, help="calibration batches (default 8)")
    ap.add_argument("--db", default=None, help="tuning database (default: a fresh one)")
    args = ap.parse_args(argv)
    args.exporter, args.depth = "torchscript", None
    folder = Path(tempfile.mkdtemp(prefix="kn-int8-"))
    db = args.db or str(folder / "tuning.sqlite")
    print(peers.machine_header(args.threads), flush=True)
    t0, rows = time.perf_counter(), []
    for name in [m for m in args.models.split(",") if m]:
        rows.append(bench_one(name, args, db, folder))
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.threads} threads, medians of {args.repeats} interleaved samples, {time.perf_counter() - t0:.0f} s")
    cols = ["onnxruntime", "openvino bf16", "onnxruntime int8", "openvino qdq", "kn-own int8"]
    print(f"{'model':18} " + " ".join(f"{c:>16}" for c in cols) + f" {'kn/fastest':>10} {'noise':>6}  accuracy vs f32")
    ratios = []
    for r in rows:
        ms = r["ms"]
        fastest = min(v for k, v in ms.items() if k != "kn-own int8")
        ratios.append(fastest / ms["kn-own int8"])
        acc = "; ".join(f"{k}: {a['max_rel_err']:.1e} cos {a['cosine']:.4f} top1 {a['top1']:.0%}"
                        for k, a in r["accuracy"].items() if k in INT8)
        print(f"{r['model']:18} " + " ".join(f"{ms.get(c, np.nan):16.2f}" for c in cols)
              + f" {ratios[-1]:10.2f} {max(r['noise'].values()):6.0%}  {acc}")
    print(f"geomean kn-own int8 / fastest peer speed: {float(np.exp(np.mean(np.log(ratios)))):.2f}x")


if __name__ == "__main__":
    main()
