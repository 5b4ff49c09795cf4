"""Measured costs for target "cuda": build each candidate (Triton, or torch for a linear prim),
check it against the reference interpreter, time it on the GPU.

Timing is what the compiled model will see: the kernel is captured ``REPS`` times in a CUDA
graph and the graph replayed between CUDA events (no Python launch overhead), after warm-up; the
median over rounds is kept. Triton kernels are timed for each tile size of a small tuning space
(triton.tuning_space) and the best is remembered per kernel (provider ``triton:BLOCK:WARPS``).
Results go to the same tuning database as the CPU target, keyed by ``cuda-<GPU name>``.

Under TRITON_INTERPRET=1 (no GPU) the same path runs on CPU tensors with a wall-clock timer and
the default tile size only: slow and meaningless as a cost, but it exercises the pipeline.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from kernorch.codegen.triton import why_not_triton
from kernorch.codegen.triton_kernel import (CudaLinearKernel, HostKernel, TritonKernel, build_variants, device_name,
                                            precompile_async, wait)
from kernorch.codegen.triton_lower import TritonConfig
from kernorch.ir import oracle
from kernorch.ir.graph import Graph
from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.measure import ordered_outputs
from kernorch.orchestrate.measure_stats import MeasureStats
from kernorch.options import Env
from kernorch.orchestrate.priced import PricedCandidates
from kernorch.orchestrate.tuning_db import Record, TuningDB

CUDA_CODEGEN_VERSION = "t4"  # t2: the linear kernels are provider "linear"; t3: quantize by reciprocal; t4: C99 pow special cases
REPS = 20  # kernel launches per captured graph
BATCH = 48  # candidates built (and compiled in parallel) ahead of timing
ROUNDS = 5  # graph replays timed


@dataclass(frozen=True)
class CudaOptions:
    """Options of target "cuda". ``allow_tf32``: let cuBLAS/cuDNN use TF32 for float32 linear
    prims (faster, ~1e-3 relative error; off by default so results match float32 references);
    ``tune``: time every tile size of the tuning space (GPU only; else the default size);
    ``graph``: replay the whole plan as one CUDA graph; ``device``: a torch device string."""

    allow_tf32: bool = False
    tune: bool = True
    graph: bool = True
    device: str | None = None


class tf32:
    """Context manager setting PyTorch's TF32 switches for matmul and cuDNN, restoring them after."""

    def __init__(self, allow: bool) -> None:
        self.allow = allow

    def __enter__(self):
        self.old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        torch.backends.cuda.matmul.allow_tf32 = self.allow
        torch.backends.cudnn.allow_tf32 = self.allow
        return self

    def __exit__(self, *exc) -> None:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = self.old


def time_on_device(fn: Callable[[], None], device: torch.device, warmup: int = 3, graph: bool = True) -> float:
    """Median seconds per call of ``fn`` (which only launches work on ``device``). On the
    interpreter one timed call: the number only has to exist."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    try:
        if not graph:
            raise RuntimeError("host work cannot be captured")
        cuda_graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream(device).wait_stream(stream)
        with torch.cuda.graph(cuda_graph):
            for _ in range(REPS):
                fn()
        run = cuda_graph.replay
    except Exception:  # noqa: BLE001 - not capturable (host work): time plain launches
        def run():
            for _ in range(REPS):
                fn()
    times = []
    run()
    for _ in range(ROUNDS):
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / REPS)
    return float(statistics.median(times))


def _provider(config: TritonConfig) -> str:
    return f"triton:{config.block}:{config.warps}"


def config_of(provider: str) -> TritonConfig | None:
    """The tile size a ``triton:BLOCK:WARPS`` record was measured with."""
    parts = provider.split(":")
    if len(parts) == 3 and parts[0] == "triton":
        return TritonConfig(int(parts[1]), int(parts[2]))
    return None


def _on(device: torch.device, feeds) -> list[torch.Tensor]:
    return [torch.from_numpy(a).to(device, copy=True) for a in feeds]  # a kernel may not spoil shared feeds


def verify_on_device(g: Graph, kern, members, device: torch.device) -> str | None:
    """None when ``kern`` matches the interpreter on the oracle's random inputs, else why not."""
    try:
        ok, _, detail = oracle.verify(lambda xs: kern.run(_on(device, xs)), kern.inputs, kern.outputs, g, members)
    except Exception as e:  # noqa: BLE001 - reported by the caller
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    return None if ok else detail


class CudaMeasuredCost(PricedCandidates):
    """``cost(candidate) -> seconds | None`` on the GPU, backed by the tuning database (the same
    interface as orchestrate.measure.MeasuredCost; keys, memo and look-ups: orchestrate.priced)."""

    def __init__(self, g: Graph, db: TuningDB, device: torch.device, options: CudaOptions = CudaOptions(),
                 progress: Callable[[int, int], None] | None = None, env: Env | None = None) -> None:
        self.g, self.db, self.device, self.options = g, db, device, options
        self.env = env or Env.read()
        self.target = f"cuda-{device_name(device)}" + ("-tf32" if options.allow_tf32 else "")
        self.progress = progress
        self.stats = MeasureStats()
        self._start_memo()
        self.providers: list = []  # no external kernel provider runs on CUDA here

    def can_generate(self, cand: Candidate) -> bool:
        return why_not_triton(self.g, cand.nodes, ordered_outputs(self._pos, cand)) is None

    def prefetch(self, cands: Iterable[Candidate]) -> None:
        todo = self._unknown(cands, CUDA_CODEGEN_VERSION)
        items = list(todo.items())
        batches = [items[i:i + BATCH] for i in range(0, len(items), BATCH)]
        built = self._build(batches[0]) if batches else []
        pending = precompile_async((k for _, kerns in built for _, k in kerns), self.env.compile_workers)
        done = 0
        for i, batch in enumerate(batches):
            wait(pending)  # this batch compiled; compile the next one while timing this one
            current = built
            if i + 1 < len(batches):
                built = self._build(batches[i + 1])
                pending = precompile_async((k for _, kerns in built for _, k in kerns), self.env.compile_workers)
            for (k, cand), (_, kerns) in zip(batch, current):
                self._measure(k, cand, kerns)
                done += 1
                if self.progress:
                    self.progress(done, len(items))

    def _build(self, batch) -> list[tuple[str, list]]:
        """Per candidate: (provider name, kernel or the exception building it) for each variant
        worth timing (every tile size of the tuning space for a Triton kernel)."""
        out = []
        for key, cand in batch:
            try:
                kerns = build_variants(self.g, set(cand.nodes), ordered_outputs(self._pos, cand), self.device,
                                       self.options.tune, self.env)
            except Exception as e:  # noqa: BLE001 - recorded as a build failure, never chosen
                out.append((key, [("codegen", e)]))
                continue
            out.append((key, [(_provider(k.spec.config) if isinstance(k, TritonKernel) else k.provider, k)
                              for k in kerns]))
        return out

    def _measure(self, key: str, cand: Candidate, kerns: list) -> None:
        t0 = time.perf_counter()
        recs: dict[str, Record] = {}
        ref = None
        for name, kern in kerns:
            if isinstance(kern, Exception):
                recs[name] = Record(name, None, "build_failed", f"{type(kern).__name__}: {kern}"[:300])
            else:
                recs[name], ref = self._measure_kernel(name, kern, set(cand.nodes), ref)
        if not any(r.ok for r in recs.values()) and len(cand.nodes) == 1 and self.device.type == "cuda":
            # a single prim nothing here can run on the GPU: the reference runs it on the host,
            # so that a plan still exists (the failure is reported)
            host = HostKernel(self.g, cand.nodes, ordered_outputs(self._pos, cand), self.device)
            recs["host"], ref = self._measure_kernel("host", host, set(cand.nodes), ref)
        if not any(r.ok for r in recs.values()) or "host" in recs:
            self.stats.failed += 1
            self.stats.failures.append(f"{key[:12]} " + "; ".join(f"{r.provider} {r.status}: {r.detail}"
                                                                  for r in recs.values())[:400])
        self.stats.measured += 1
        self.stats.seconds += time.perf_counter() - t0
        for r in recs.values():
            self.db.put(key, self.target, CUDA_CODEGEN_VERSION, r)
        self._remember(key, recs)

    def _measure_kernel(self, name: str, kern, members: set[int], ref):
        """Verify against the interpreter (computed once per candidate), then time."""
        try:
            if ref is None:
                ref = oracle.reference(self.g, self.g.subgraph(members, list(kern.outputs)))
            with tf32(self.options.allow_tf32):
                ins = _on(self.device, oracle.kernel_feeds(self.g, kern.inputs, ref[0]))
                outs = kern.run(ins)
                ok, _, detail = oracle.check(kern.outputs, outs, ref[1])
                if not ok and not (self.options.allow_tf32 and isinstance(kern, CudaLinearKernel)):
                    return Record(name, None, "verify_failed", detail), ref
                seconds = time_on_device(lambda: kern._run(ins, outs), self.device,
                                         graph=getattr(kern, "capturable", True))
        except Exception as e:  # noqa: BLE001 - a kernel that crashes is recorded, never chosen
            return Record(name, None, "run_failed", f"{type(e).__name__}: {e}"[:300]), ref
        return Record(name, seconds, "ok"), ref

    def _remember(self, key: str, recs: dict[str, Record]) -> None:
        good = [r for r in recs.values() if r.ok]
        if good:
            best = min(good, key=lambda r: r.seconds)
            self.best[key] = best
            self._memo[key] = best.seconds
        else:
            self._memo[key] = None
