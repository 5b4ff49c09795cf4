"""``kernorch compile`` and ``kernorch run``: the CLI face of compile(), save/load and the runtime."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from kernorch.errors import KernorchError

STRATEGIES = ("optimal", "greedy", "per-operator", "unfused")


def add_commands(sub, add_model_args) -> None:
    q = sub.add_parser("compile", help="tune and compile a model into a directory",
                       description="Import MODEL, orchestrate its kernels on measured (or modelled) costs, "
                                   "build them and save the compiled model to DIR. Measured costs are kept in "
                                   "the tuning database, so compiling the same model again measures nothing.")
    add_model_args(q)
    q.add_argument("-o", "--output", required=True, metavar="DIR", help="directory for the compiled model")
    q.add_argument("--target", choices=("cpu", "cuda"), default="cpu",
                   help="cpu: C/OpenMP + providers (default); cuda: Triton + cuBLAS/cuDNN, replayed as a CUDA graph")
    q.add_argument("--strategy", choices=STRATEGIES, default="optimal", help="kernel orchestration (default optimal)")
    q.add_argument("--cost", choices=("measured", "model"), default="measured",
                   help="measured: build and time candidates (default); model: roofline estimate, fast")
    q.add_argument("--db", metavar="FILE", help="tuning database (default $KERNORCH_DB or ~/.cache/kernorch)")
    q.add_argument("--threads", type=int, help="CPU threads for kernels and timing (default: all)")
    q.add_argument("--rewrites", metavar="RULES", help="comma-separated rewrite rules ('' for none; default set)")
    q.add_argument("--providers", metavar="NAMES",
                   help="comma-separated external kernel providers (ort, openvino, torch, ...; '' for kernorch's "
                        "own kernels only; default ort,openvino,torch)")
    q.add_argument("--no-regions", action="store_true",
                   help="never hand whole runs of segments to OpenVINO/onnxruntime (provider regions)")
    q.add_argument("--quiet", action="store_true", help="no progress bar or kernel table")
    q.set_defaults(func=cmd_compile)

    q = sub.add_parser("run", help="run a compiled model directory",
                       description="Load a model saved by 'kernorch compile' and run it on the given inputs "
                                   "(.npy files) or seeded random ones; print each output's summary and latency.")
    q.add_argument("dir", metavar="DIR")
    q.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input (repeatable)")
    q.add_argument("--repeat", type=int, default=10, help="timed runs after one warm-up (default 10)")
    q.add_argument("--save", metavar="DIR", help="write each output as DIR/NAME.npy")
    q.set_defaults(func=cmd_run)


def cmd_compile(args) -> int:
    import kernorch
    from kernorch.cli import parse_input_shapes

    kw = {}
    if args.rewrites is not None:
        kw["rewrites"] = tuple(r for r in args.rewrites.split(",") if r)
    if args.providers is not None:
        kw["providers"] = tuple(p for p in args.providers.split(",") if p)
    t0 = time.perf_counter()
    model = kernorch.compile(args.model, target=args.target, strategy=args.strategy, cost=args.cost, db=args.db,
                             input_shapes=parse_input_shapes(args.input_shape) or None, threads=args.threads,
                             progress=not args.quiet, regions=not args.no_regions, **kw)
    out = model.save(args.output)
    r = model.report
    if not args.quiet:
        print(model.summary())
    print(f"compiled {args.model} -> {out} in {time.perf_counter() - t0:.1f} s: {len(model.kernels)} kernels, "
          f"{r.measured} kernels measured, {r.cached} from the database")
    return 0


def _feeds(model, specs: list[str]) -> dict[str, np.ndarray]:
    sig = model.executable.sig.graph
    given = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            raise KernorchError(f"--input {spec!r}: expected NAME=FILE.npy")
        if not Path(path).exists():
            raise KernorchError(f"--input {name}: no such file {path}")
        given[name] = np.load(path)
    rng = np.random.default_rng(0)
    feeds = {}
    for v in sig.inputs:
        name, t = sig.name(v), sig.types[v]
        if name in given:
            feeds[name] = given.pop(name)
        elif np.dtype(t.dtype).kind == "f":
            feeds[name] = rng.standard_normal(t.shape).astype(t.dtype)
        else:
            feeds[name] = rng.integers(0, 4, size=t.shape).astype(t.dtype)
    if given:
        raise KernorchError(f"unknown input(s) {sorted(given)}; the model's inputs are {model.input_names}")
    return feeds


def cmd_run(args) -> int:
    import kernorch

    model = kernorch.load(args.dir)
    feeds = _feeds(model, args.input)
    outs = model.run(feeds)
    times = []
    for _ in range(max(args.repeat, 0)):
        t0 = time.perf_counter()
        model.run(feeds)
        times.append(time.perf_counter() - t0)
    for name, t in outs.items():
        a = t.numpy()
        stats = f"min {a.min():.4g} max {a.max():.4g} mean {a.mean():.4g}" if a.size and a.dtype.kind == "f" else ""
        print(f"output {name}: {a.dtype}[{','.join(map(str, a.shape))}] {stats}")
        if args.save:
            Path(args.save).mkdir(parents=True, exist_ok=True)
            np.save(Path(args.save) / f"{name}.npy", a)
    if times:
        print(f"latency: median {np.median(times) * 1e3:.3f} ms over {len(times)} runs "
              f"(min {min(times) * 1e3:.3f} ms)")
    return 0
