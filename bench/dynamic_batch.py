"""One compile for every batch size (issue 46): a model compiled with ``dynamic=`` next to kernorch
compiled statically for each sampled batch size and onnxruntime running the model with a dynamic
batch, timed interleaved per batch size in one process, outputs checked against onnxruntime.

    PYTHONPATH=. python -m bench.dynamic_batch --model mobilenetv3_large --size 64 --range 1..16

Prints the machine, compile times (the dynamic compile, each static one) and per batch size the
chunks the dynamic model runs, the three medians and the ratios; geomeans last.
"""

from __future__ import annotations

import argparse
import io
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

import kernorch
from bench.models import build_model
from bench.peers import Runner, interleaved, machine_header, ort_runner
from kernorch.runtime.dynamic_model import sample_sizes


def _export(module, inputs: tuple, path: Path) -> list[str]:
    names = [f"input_{k}" for k in range(len(inputs))] if len(inputs) > 1 else ["x"]
    f = io.BytesIO()
    torch.onnx.export(module, inputs, f, dynamo=False, input_names=names,
                      dynamic_axes={n: {0: "batch"} for n in names})
    path.write_bytes(f.getvalue())
    return names


def _feeds(inputs: tuple, names: list[str], n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for name, a in zip(names, inputs):
        shape = (n, *a.shape[1:])
        out[name] = (rng.standard_normal(shape).astype(np.float32) if a.is_floating_point()
                     else np.take(a.numpy(), np.arange(n) % a.shape[0], axis=0))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenetv3_large")
    ap.add_argument("--size", type=int, default=64, help="image side")
    ap.add_argument("--range", default="1..16", help="LO..HI batch sizes")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--db", default=None, help="the dynamic compile's tuning database (default: a fresh one; the "
                                               "static compiles always share a fresh one of their own)")
    ap.add_argument("--budget", type=int, default=None, help="tuning_budget of every compile (default kernorch's)")
    ap.add_argument("--repeats", type=int, default=9)
    a = ap.parse_args(argv)
    lo, hi = (int(x) for x in a.range.split(".."))
    torch.set_num_threads(a.threads)
    print(machine_header(a.threads))
    work = Path(tempfile.mkdtemp(prefix="kn-dyn-"))
    db = a.db or str(work / "dynamic.sqlite")
    module, inputs = build_model(a.model, a.size)
    path = work / "model.onnx"
    names = _export(module, inputs, path)
    kw = dict(threads=a.threads, db=db, progress=False)
    if a.budget is not None:
        kw["tuning_budget"] = a.budget
    static_kw = {**kw, "db": str(work / "static.sqlite")}  # static compiles never see the dynamic one's plans
    shapes_hi = {name: [hi, *x.shape[1:]] for name, x in zip(names, inputs)}
    t0 = time.perf_counter()  # the first static compile, on a fresh database: the compile-time yardstick
    kernorch.compile(str(path), input_shapes=shapes_hi, **static_kw)
    alone_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    dyn = kernorch.compile(str(path), dynamic={n: {0: (lo, hi)} for n in names}, **kw)
    dyn_s = time.perf_counter() - t0
    print(f"\n{a.model} {a.size}x{a.size}, batch {lo}..{hi}: dynamic compile {dyn_s:.0f} s "
          f"(profiles {', '.join(map(str, dyn.profiles))})")
    sizes = sample_sizes(lo, hi, extra=(2, 3, 5, 7, 9, 11, 13))
    rows, static_s = [], {}
    for n in sizes:
        t0 = time.perf_counter()
        shapes = {name: [n, *x.shape[1:]] for name, x in zip(names, inputs)}
        static = kernorch.compile(str(path), input_shapes=shapes, **static_kw)
        static_s[n] = time.perf_counter() - t0
        feeds = _feeds(inputs, names, n, seed=n)
        ort = ort_runner("onnxruntime", path, feeds, a.threads, optimize=True)
        runners = {"dynamic": Runner("dynamic", lambda: dyn.run(feeds), list, 0.0),
                   "static": Runner("static", lambda: static.run(feeds), list, 0.0), "onnxruntime": ort}
        want = ort.call()
        got = [t.numpy() for t in dyn.run(feeds).values()]
        err = max(float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) + 1e-12)) for g, w in zip(got, want))
        med = {k: float(np.median(v)) for k, v in interleaved(runners, a.repeats, 0.05, 0.3).items()}
        rows.append((n, "+".join(map(str, dyn.chunks(n))), med, err))
        print(f"batch {n:>3}: static compile {static_s[n]:.0f} s, dynamic {med['dynamic'] * 1e3:.2f} ms, static "
              f"{med['static'] * 1e3:.2f} ms, onnxruntime {med['onnxruntime'] * 1e3:.2f} ms", flush=True)
    print("\n| batch | runs as | kernorch dynamic ms | kernorch static ms | onnxruntime ms | dynamic / static speed "
          "| dynamic vs onnxruntime | max rel. error vs ORT |")
    print("|---|---|---|---|---|---|---|---|")
    for n, chunks, med, err in rows:
        print(f"| {n} | {chunks} | {med['dynamic'] * 1e3:.2f} | {med['static'] * 1e3:.2f} | "
              f"{med['onnxruntime'] * 1e3:.2f} | {med['static'] / med['dynamic']:.2f}x | "
              f"{med['onnxruntime'] / med['dynamic']:.2f}x | {err:.1e} |")

    def geo(xs):
        return math.exp(sum(math.log(x) for x in xs) / len(xs))

    print(f"\ngeomean over {len(rows)} batch sizes: dynamic / static speed "
          f"{geo([m['static'] / m['dynamic'] for _, _, m, _ in rows]):.2f}x, dynamic vs onnxruntime "
          f"{geo([m['onnxruntime'] / m['dynamic'] for _, _, m, _ in rows]):.2f}x")
    print(f"compile: dynamic {dyn_s:.0f} s; one static compile at batch {hi} on a fresh database {alone_s:.0f} s "
          f"(ratio {dyn_s / alone_s:.2f}x); the static compiles of the other sampled sizes {sum(static_s.values()):.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
