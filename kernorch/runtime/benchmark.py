"""Latency of a compiled model next to the runtimes users run today, on the same inputs.

``compare`` times kernorch and the baselines (onnxruntime on the original ONNX model; OpenVINO
when installed) interleaved round by round, after warm-up, with the same thread count, and
returns per runtime the median and the p90/p99 of the timed runs (benchmark_app style), plus the
largest difference of each baseline's outputs from kernorch's. Never asserts on time.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from kernorch.codegen.build import default_threads
from kernorch.errors import KernorchError


@dataclass
class Timing:
    name: str
    detail: str
    times: list[float] = field(default_factory=list)
    max_abs_diff: float | None = None  # vs kernorch's outputs

    def pct(self, q: float) -> float:
        return float(np.percentile(self.times, q)) if self.times else float("nan")

    @property
    def median(self) -> float:
        return self.pct(50)


@dataclass
class Comparison:
    rows: list[Timing]
    warmup: int
    threads: int
    skipped: dict[str, str] = field(default_factory=dict)  # baseline -> why it did not run

    def row(self, name: str) -> Timing | None:
        return next((r for r in self.rows if r.name == name), None)

    def speedup(self, baseline: str = "onnxruntime") -> float | None:
        """Baseline median over kernorch's median (> 1: kernorch is faster)."""
        kn, base = self.row("kernorch"), self.row(baseline)
        if kn is None or base is None or not kn.times or not base.times or kn.median <= 0:
            return None
        return base.median / kn.median

    def table(self) -> str:
        """One line per runtime: runs, median, p90, p99, min, mean (ms), the largest difference of its
        outputs from kernorch's, and kernorch's speedup over it (its median / kernorch's)."""
        kn = self.row("kernorch")
        lines = [f"{'runtime':<12} {'runs':>6} {'median ms':>10} {'p90 ms':>9} {'p99 ms':>9} {'min ms':>9} "
                 f"{'mean ms':>9}  {'max|diff|':>9}  {'kn speedup':>10}  details"]
        for r in self.rows:
            ms = [r.median, r.pct(90), r.pct(99), min(r.times), float(np.mean(r.times))]
            diff = "-" if r.max_abs_diff is None else f"{r.max_abs_diff:.1e}"
            rel = "-" if r is kn or kn is None else f"{r.median / kn.median:.2f}x"  # > 1: kernorch is faster
            lines.append(f"{r.name:<12} {len(r.times):>6} " + " ".join(f"{x * 1e3:>{w}.3f}" for x, w in
                                                                         zip(ms, (10, 9, 9, 9, 9)))
                         + f"  {diff:>9}  {rel:>10}  {r.detail}")
        for name, why in self.skipped.items():
            lines.append(f"{name:<12} (not run: {why})")
        return "\n".join(lines)


def baselines(source: Any, threads: int, openvino: bool = True) -> tuple[dict[str, tuple[Callable, str]], dict]:
    """{name: (run(feeds) -> list of arrays, detail)} for onnxruntime (and OpenVINO) on ``source``
    (an ONNX file path or ModelProto), and {name: reason} for those that could not be set up."""
    runs: dict[str, tuple[Callable, str]] = {}
    skipped: dict[str, str] = {}
    data = source.SerializeToString() if hasattr(source, "SerializeToString") else os.fspath(source)
    try:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        sess = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        runs["onnxruntime"] = (lambda feeds: sess.run(None, {n: feeds[n] for n in names}),
                               f"onnxruntime {ort.__version__}, original model")
    except ImportError:
        skipped["onnxruntime"] = "not installed"
    except Exception as e:  # noqa: BLE001 - a baseline that cannot load is reported, not fatal
        skipped["onnxruntime"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    if openvino:
        try:
            import openvino as ov

            core = ov.Core()
            model = core.read_model(data) if isinstance(data, str) else core.read_model(data, b"")
            compiled = core.compile_model(model, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                         "PERFORMANCE_HINT": "LATENCY"})
            req = compiled.create_infer_request()
            names = [p.get_any_name() for p in compiled.inputs]

            def run_ov(feeds, req=req, names=names):
                res = req.infer({n: feeds[n] for n in names})
                return [np.asarray(res[o]) for o in compiled.outputs]

            runs["openvino"] = (run_ov, f"OpenVINO {ov.__version__.split('-')[0]}, original model")
        except ImportError:
            skipped["openvino"] = "not installed (pip install 'kernorch[openvino]')"
        except Exception as e:  # noqa: BLE001
            skipped["openvino"] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    return runs, skipped


# A runtime's turn in a round: untimed calls for LEAD_S first, then timed calls for about TURN_S.
# onnxruntime's threads keep spinning for ~90 ms after its last call (measured on EfficientViT-B0:
# kernorch's calls in that window ran 2x slower; OpenVINO's pool spins too), so a shorter lead
# timed the next runtime in the wake of the previous one's pool. The compile's race of its plan
# against whole-graph regions (in_context.race) takes turns the same way: without them it timed
# MobileNetV3-Large's own plan at 13.8-28.3 ms right after onnxruntime's and OpenVINO's calls
# against 6.0-7.5 ms led in (three races each way, one process), and picked onnxruntime regions on
# EfficientViT and ViT that ran 1.3x slower than the own plan in the bench.
LEAD_S = 0.1
TURN_S = 5e-3


def turn(fn: Callable, feeds, times: list[float], turn_s: float) -> None:
    """One runtime's turn: untimed calls for LEAD_S, then timed calls (at least one) for ``turn_s``."""
    now = time.perf_counter
    lead_end = now() + LEAD_S
    fn(feeds)
    while now() < lead_end:
        fn(feeds)
    turn_end = now() + turn_s
    while True:
        t = now()
        fn(feeds)
        times.append(now() - t)
        if now() >= turn_end:
            break


def compare(model, feeds: Mapping[str, np.ndarray], source: Any = None, *, threads: int | None = None,
            warmup: int = 3, repeat: int | None = None, seconds: float | None = 2.0, min_runs: int = 5,
            openvino: bool = True) -> Comparison:
    """Time ``model`` (a CompiledModel) and the baselines on ``feeds``, interleaved round by round:
    ``warmup`` untimed rounds, then ``repeat`` timed rounds, or rounds until ``seconds`` have
    passed (at least ``min_runs``, at most 10000). In a round each runtime takes a turn: untimed
    calls for ``LEAD_S``, then timed calls for ``TURN_S`` (one per round with ``repeat``), so each
    is timed in its own steady state, as it runs deployed, not in the wake of another runtime's
    thread pool."""
    if repeat is None and seconds is None:
        raise KernorchError("compare needs a repetition count or a time budget")
    threads = threads or default_threads()
    runs: dict[str, tuple[Callable, str]] = {
        "kernorch": (lambda f: [t.numpy() for t in model.run(f).values()],
                     f"{len(model.kernels)} kernel{'s' if len(model.kernels) != 1 else ''}")}
    skipped: dict[str, str] = {}
    if source is not None:
        extra, skipped = baselines(source, threads, openvino)
        runs.update(extra)
    else:
        skipped["onnxruntime"] = "the original ONNX model is not known"
    rows = {name: Timing(name, detail) for name, (_, detail) in runs.items()}
    want = None
    for name, (fn, _) in list(runs.items()):
        try:
            outs = fn(feeds)
        except Exception as e:  # noqa: BLE001 - a baseline that fails is reported, not fatal
            if name == "kernorch":
                raise
            skipped[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
            del runs[name], rows[name]
            continue
        if want is None:
            want = outs
        elif len(outs) == len(want):
            rows[name].max_abs_diff = max((float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                                           for a, b in zip(outs, want) if np.shape(a) == np.shape(b) and np.size(a)),
                                          default=0.0)
    for _ in range(warmup):
        for fn, _ in runs.values():
            fn(feeds)
    t_end = None if seconds is None else time.perf_counter() + seconds
    rounds = 0
    while True:
        for name, (fn, _) in runs.items():
            turn(fn, feeds, rows[name].times, TURN_S if repeat is None else 0.0)
        rounds += 1
        if repeat is not None and rounds >= repeat:
            break
        if t_end is not None and time.perf_counter() >= t_end and rounds >= min_runs or rounds >= 10000:
            break
    return Comparison(list(rows.values()), warmup, threads, skipped)
