"""GPU benchmark: kernorch target="cuda" against PyTorch eager, torch.compile and onnxruntime on one
GPU, float32 everywhere (TF32 off for every runtime), one table per model.

    python -m bench.gpu_bench                                   # candy 224 and segformer_b0 512
    python -m bench.gpu_bench --models candy --size 64 --cost measured
    python -m bench.gpu_bench --export-only --cache .gpu_models # here: ONNX files to carry to a GPU box

Models come from bench.models (random weights) and are exported with bench.export (TorchScript
exporter, cached under --cache or $KERNORCH_MODEL_CACHE). Where a model cannot be built (segformer
needs ``transformers``) a cached ONNX file still lets kernorch and onnxruntime run; the PyTorch
columns are then skipped with a message. Every runtime's output is checked against onnxruntime on
the CPU before it is timed. Latency: median over rounds of CUDA-event-timed batches of calls (the
same input each call; kernorch and torch.compile "reduce-overhead" replay CUDA graphs).
Never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

DEFAULT_MODELS = ("candy", "segformer_b0")
SIZES = {"candy": 224, "segformer_b0": 512}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def gpu_ms(fn, warmup: int = 5, iters: int = 20, rounds: int = 7) -> float:
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / iters)
    return float(statistics.median(times))


def cpu_ms(fn, warmup: int = 2, rounds: int = 5) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(statistics.median(times))


def rel_err(want: np.ndarray, got) -> float:
    got = got.detach().float().cpu().numpy() if hasattr(got, "detach") else np.asarray(got)
    got = got.reshape(want.shape)
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-12))


def strict_fp32() -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


class Row(dict):
    pass


def _run(rows: list, name: str, setup, call, want, timer=gpu_ms, fetch=None) -> None:
    """Set a runtime up, check its output (``fetch`` turns a call's result into it), time it; a
    failure is a row with the reason."""
    row = Row(runtime=name, setup_s=None, ms=None, err=None, note="")
    rows.append(row)
    try:
        t0 = time.perf_counter()
        state = setup()
        out = call(state)  # first call: compilation for lazy runtimes
        row["setup_s"] = time.perf_counter() - t0
        row["err"] = rel_err(want, fetch(out) if fetch else out)
        row["ms"] = timer(lambda: call(state))
        log(f"  {name:<22} {row['ms']:.3f} ms  (setup {row['setup_s']:.1f} s, rel err {row['err']:.2g})")
    except Exception as e:  # noqa: BLE001 - the table says what failed
        row["note"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        log(f"  {name:<22} FAILED {row['note']}")
        if os.environ.get("KERNORCH_BENCH_TRACEBACK"):
            traceback.print_exc()


def bench_model(name: str, size: int, args) -> dict:
    import torch

    from bench.export import export_onnx
    from bench.models import build_model

    strict_fp32()
    rec = {"model": f"{name}-{size}", "rows": [], "notes": []}
    module = inputs = None
    try:
        module, inputs = build_model(name, size=size)
    except ImportError as e:
        rec["notes"].append(f"{name}: PyTorch module unavailable ({e}); PyTorch columns skipped")
    try:
        path = export_onnx(name, "torchscript", size=size, cache_dir=args.cache, verbose=False)
    except Exception as e:  # noqa: BLE001
        rec["notes"].append(f"{name}: no ONNX file ({type(e).__name__}: {e}); carry one with --export-only")
        return rec
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    in_name = sess.get_inputs()[0].name
    shape = [int(d) for d in sess.get_inputs()[0].shape]
    x = inputs[0].numpy() if inputs is not None else np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    want = sess.run(None, {in_name: x})[0]
    xd = torch.from_numpy(x).to(args.device)
    timer = gpu_ms if args.device == "cuda" else cpu_ms
    rows = rec["rows"]
    log(f"{name}-{size}: {path.name}")

    want_torch = want
    if module is not None:
        with torch.inference_mode():  # the module's own CPU output: a carried ONNX file may hold other weights
            want_torch = module.eval()(torch.from_numpy(x)).numpy()
        if rel_err(want, want_torch) > 1e-3:
            rec["notes"].append("the ONNX file's weights differ from this module's: PyTorch columns are checked "
                                "against the module's CPU output")

        def eager_setup():
            return module.to(args.device).eval()

        def eager_call(m):
            with torch.inference_mode():
                return m(xd)

        _run(rows, "pytorch eager", eager_setup, eager_call, want_torch, timer)

    import kernorch
    from kernorch.orchestrate.knobs import Knobs
    from kernorch.targets.cuda_measure import CudaOptions

    knobs = Knobs(solver_backend=args.solver)
    for strategy in args.strategies:
        def kn_setup(strategy=strategy):
            model = kernorch.compile(str(path), target="cuda", strategy=strategy, cost=args.cost, db=args.db,
                                     knobs=knobs, progress=False, cuda_options=CudaOptions(tune=args.tune))
            rec.setdefault("kernorch", {})[strategy] = _describe(model)
            return model

        _run(rows, f"kernorch {strategy}", kn_setup, lambda m: m(xd), want, timer)
    gpu_ort = args.device == "cuda" and "CUDAExecutionProvider" in ort.get_available_providers()
    if gpu_ort:
        def ort_setup():
            s = ort.InferenceSession(str(path), providers=["CUDAExecutionProvider"])
            b = s.io_binding()
            b.bind_input(in_name, "cuda", 0, np.float32, list(xd.shape), xd.data_ptr())
            b.bind_output(s.get_outputs()[0].name, "cuda")
            return s, b

        def ort_call(state):
            s, b = state
            s.run_with_iobinding(b)  # synchronous: returns when the GPU is done
            return b

        _run(rows, "onnxruntime cuda", ort_setup, ort_call, want, fetch=lambda b: b.get_outputs()[0].numpy())
    else:
        rec["notes"].append("onnxruntime has no CUDAExecutionProvider here: its column is the CPU provider")
        _run(rows, "onnxruntime cpu", lambda: sess, lambda s: s.run(None, {in_name: x})[0], want, timer=cpu_ms)

    if module is not None:
        for mode in args.compile_modes:
            def compile_setup(mode=mode):
                torch._dynamo.reset()
                return torch.compile(module.to(args.device).eval(), mode=None if mode == "default" else mode)

            def compile_call(m, mode=mode):
                with torch.inference_mode():
                    out = m(xd)
                return out.clone() if mode == "reduce-overhead" else out

            _run(rows, f"torch.compile {mode}", compile_setup, compile_call, want_torch, timer)

    return rec


def _describe(model) -> dict:
    r = model.report
    provs: dict[str, int] = {}
    for k in model.kernels:
        provs[k.provider] = provs.get(k.provider, 0) + 1
    return {"kernels": provs, "prims": r.prims, "candidates": r.candidates, "measured": r.measured,
            "cached": r.cached, "failed": r.failed, "failures": r.failures[:5], "seconds": r.seconds,
            "graph": getattr(model.executable, "use_graph", None), "plan": r.plan_summary}


def print_table(rec: dict) -> None:
    rows = rec["rows"]
    base = next((r["ms"] for r in rows if r["runtime"] == "pytorch eager" and r["ms"]), None)
    print(f"\n{rec['model']}")
    print(f"  {'runtime':<26}{'setup s':>9}{'ms':>10}{'vs eager':>10}{'rel err':>10}  note")
    for r in rows:
        ms = f"{r['ms']:.3f}" if r["ms"] else "-"
        setup = f"{r['setup_s']:.1f}" if r["setup_s"] is not None else "-"
        speed = f"{base / r['ms']:.2f}x" if base and r["ms"] else "-"
        err = f"{r['err']:.1e}" if r["err"] is not None else "-"
        print(f"  {r['runtime']:<26}{setup:>9}{ms:>10}{speed:>10}{err:>10}  {r['note']}")
    for strategy, d in rec.get("kernorch", {}).items():
        secs = ", ".join(f"{k} {v:.1f}s" for k, v in d["seconds"].items())
        print(f"  kernorch {strategy}: {d['kernels']} kernels, {d['prims']} prims, {d['candidates']} candidates "
              f"({d['measured']} measured, {d['cached']} cached, {d['failed']} failed), graph={d['graph']}; {secs}")
        for f in d["failures"]:
            print(f"    failure: {f}")
    for n in rec["notes"]:
        print(f"  note: {n}")
    sys.stdout.flush()


def export_only(args) -> int:
    from bench.export import export_onnx

    todo = [(name, args.size or SIZES.get(name)) for name in args.models]
    if "candy" in args.models and not args.size:
        todo.append(("candy", 64))  # the size tests/cuda compiles
    for name, size in todo:
        try:
            p = export_onnx(name, "torchscript", size=size, cache_dir=args.cache, verbose=True)
            print(f"{name}: {p} ({p.stat().st_size / 2**20:.1f} MiB)")
        except Exception as e:  # noqa: BLE001
            print(f"{name}: cannot export here ({type(e).__name__}: {e})")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS))
    p.add_argument("--size", type=int, default=None, help="image side for every model (default: per model)")
    p.add_argument("--cost", choices=("model", "measured"), default="model")
    p.add_argument("--strategies", nargs="*", default=["optimal", "greedy"])
    p.add_argument("--compile-modes", nargs="*", default=["default", "reduce-overhead"])
    p.add_argument("--no-tune", dest="tune", action="store_false", help="measured cost: default tile size only")
    p.add_argument("--db", default=None, help="tuning database (default $KERNORCH_DB)")
    p.add_argument("--cache", default=os.environ.get("KERNORCH_MODEL_CACHE"), help="ONNX cache directory")
    p.add_argument("--json", default=None, help="also write the results here")
    p.add_argument("--export-only", action="store_true")
    args = p.parse_args(argv)
    if args.export_only:
        return export_only(args)
    import torch

    args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.device == "cpu":
        if os.environ.get("TRITON_INTERPRET") != "1":
            print("no CUDA GPU here: nothing to benchmark (TRITON_INTERPRET=1 runs a dry run on the CPU)")
            return 0
        args.compile_modes = []  # a dry run of the script's logic: inductor on CPU is not the point
    try:
        import highspy  # noqa: F401

        args.solver = "highs"
    except ImportError:
        args.solver = "scipy"
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else "none (dry run: Triton interpreter, CPU)"
    print(f"GPU: {gpu}; torch {torch.__version__}; solver {args.solver}; "
          f"kernorch cost={args.cost}; float32, TF32 off")
    results = []
    for name in args.models:
        size = args.size or SIZES.get(name, 224)
        try:
            rec = bench_model(name, size, args)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            rec = {"model": f"{name}-{size}", "rows": [], "notes": [f"failed: {type(e).__name__}: {e}"]}
        print_table(rec)
        results.append(rec)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
