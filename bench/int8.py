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

import time
from pathlib import Path

import numpy as np

from bench import peers
from bench.precision import run_models, timed_with_accuracy

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
    return dict(model=name, **timed_with_accuracy(runners, args.repeats), compile_s=round(wall, 1),
                quantize_s=round(quantize_s, 1), kernels=len(model.executable.infos), int8_steps=steps)


def main(argv=None) -> None:
    args, rows = run_models(__doc__.splitlines()[0], argv, MODELS, "kn-int8-", bench_one,
                            calibration=(int, 8, "calibration batches (default 8)"))
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
