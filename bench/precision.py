"""kernorch in bfloat16 against the peers at equal precision, per model, in one process:
onnxruntime f32, OpenVINO f32 and bf16, kn-own (measured plan, no provider regions) f32 and bf16,
timed interleaved; the bf16 runtimes' accuracy against onnxruntime's float32 outputs on the same
input (max error relative to the output's scale, cosine, top-1 agreement over the last axis).

    python -m bench.precision [--models resnet50,mobilenetv3_large,bert_base,efficientvit_b0]
                              [--small] [--repeats 9] [--threads 2] [--db PATH] [--precisions f32,bf16]

Prints the machine header (kernorch doctor's), one JSON line per model, then a table. Each model is
compiled twice (f32 and bf16, measured): run it alone, on a quiet machine.
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

MODELS = ["resnet50", "mobilenetv3_large", "bert_base", "efficientvit_b0"]
BF16 = ("openvino bf16", "kn-own bf16")


def accuracy(ref: list[np.ndarray], got: list[np.ndarray]) -> dict:
    """Worst output's max rel err and cosine, and the first output's top-1 agreement."""
    errs, coss = [], []
    for r, g in zip(ref, got):
        r, g = np.asarray(r, np.float64), np.asarray(g, np.float64).reshape(np.shape(r))
        errs.append(float(np.max(np.abs(g - r)) / max(np.max(np.abs(r)), 1e-30)))
        coss.append(float(np.dot(r.ravel(), g.ravel()) / (np.linalg.norm(r) * np.linalg.norm(g))))
    r0, g0 = np.asarray(ref[0]), np.asarray(got[0]).reshape(np.shape(ref[0]))
    top1 = float(np.mean(r0.reshape(-1, r0.shape[-1]).argmax(-1) == g0.reshape(-1, r0.shape[-1]).argmax(-1)))
    return dict(max_rel_err=max(errs), cosine=min(coss), top1=top1)


def bench_one(name: str, args, db: str, folder: Path) -> dict:
    from bench.run import load_model

    m = load_model(name, args)
    path, feeds = m["path"], m["feeds"]
    runners = {"onnxruntime": peers.ort_runner("ort", path, feeds, args.threads, True)}
    if peers.openvino_available():
        runners["openvino f32"] = peers.openvino_runner(path, feeds, args.threads, "f32")
        runners["openvino bf16"] = peers.openvino_runner(path, feeds, args.threads, "bf16")
    compiles = {}
    for precision in args.precisions.split(","):
        model, wall = peers.kernorch_compile(path, "optimal", None, db, args.threads, regions=False,
                                             precision=precision)
        compiles[precision] = dict(compile_s=round(wall, 1), kernels=len(model.executable.infos),
                                   rounded_to_bf16=model.report.rewrites.get("bf16_storage", 0))
        runners[f"kn-own {precision}"] = peers.kernorch_runner(f"kn-own {precision}", model, feeds, wall)
    return dict(model=name, **timed_with_accuracy(runners, args.repeats), compiles=compiles)


def timed_with_accuracy(runners: dict, repeats: int) -> dict:
    """Each runtime's accuracy against onnxruntime f32 (the "onnxruntime" runner), then median ms
    and noise ((max - min) / median) of ``repeats`` interleaved samples."""
    ref = runners["onnxruntime"].outputs()
    acc = {k: accuracy(ref, runners[k].outputs()) for k in runners if k != "onnxruntime"}
    samples = peers.interleaved(runners, repeats, 0.05, 0.5)
    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    noise = {k: (max(v) - min(v)) / statistics.median(v) for k, v in samples.items()}
    return dict(ms={k: round(v, 3) for k, v in med.items()}, noise={k: round(v, 2) for k, v in noise.items()},
                accuracy=acc)


def run_models(description: str, argv, models: list[str], prefix: str, bench_one, **extra_args) -> tuple:
    """The precision benches' command line and loop: (args, rows), one JSON line printed per model.
    ``extra_args``: more ``--name`` options (name -> (type, default, help))."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--models", default=",".join(models))
    ap.add_argument("--small", action="store_true", help="the bench's small sizes (a smoke run)")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--threads", type=int, default=2)
    for name, (kind, default, text) in extra_args.items():
        ap.add_argument(f"--{name}", type=kind, default=default, help=text)
    ap.add_argument("--db", default=None, help="tuning database (default: a fresh one)")
    args = ap.parse_args(argv)
    args.exporter, args.depth = "torchscript", None
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    db = args.db or str(folder / "tuning.sqlite")
    print(peers.machine_header(args.threads), flush=True)
    t0, rows = time.perf_counter(), []
    for name in [m for m in args.models.split(",") if m]:
        rows.append(bench_one(name, args, db, folder))
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.threads} threads, medians of {args.repeats} interleaved samples, {time.perf_counter() - t0:.0f} s")
    return args, rows


def main(argv=None) -> None:
    args, rows = run_models(__doc__.splitlines()[0], argv, MODELS, "kn-precision-", bench_one,
                            precisions=(str, "f32,bf16", "kernorch's compiles (bf16 alone: half the compile time)"))
    cols = ["onnxruntime", "openvino f32", "kn-own f32", "openvino bf16", "kn-own bf16"]
    print(f"{'model':18} " + " ".join(f"{c:>13}" for c in cols) + f" {'kn/OV bf16':>10} {'noise':>6}  accuracy (bf16 vs f32)")
    ratios = []
    for r in rows:
        ms = r["ms"]
        ratio = ms.get("openvino bf16", np.nan) / ms["kn-own bf16"]
        ratios.append(ratio)
        acc = "; ".join(f"{k}: {a['max_rel_err']:.1e} cos {a['cosine']:.4f} top1 {a['top1']:.0%}"
                        for k, a in r["accuracy"].items() if k in BF16)
        print(f"{r['model']:18} " + " ".join(f"{ms.get(c, np.nan):13.2f}" for c in cols)
              + f" {ratio:10.2f} {max(r['noise'].values()):6.0%}  {acc}")
    good = [x for x in ratios if np.isfinite(x)]
    if good:
        print(f"geomean kn-own bf16 / OpenVINO bf16 speed: {float(np.exp(np.mean(np.log(good)))):.2f}x")


if __name__ == "__main__":
    main()
