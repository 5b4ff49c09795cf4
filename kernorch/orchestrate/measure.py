"""Measured costs: build each candidate kernel, check it against the reference interpreter, time it.

Every distinct kernel (by canonical key) is built, verified and timed once; results go to the
tuning database as soon as they exist, so a second run of the same model measures nothing and a
killed run loses at most the batch in flight. Kernels are built many per compiler call
(``codegen.build_many``); compilation of a batch runs in a thread pool (the compiler is a
subprocess), timing is serial with a fixed thread count.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import numpy as np
import torch

from kernorch import codegen
from kernorch.codegen.build import default_threads
from kernorch.ir import interp
from kernorch.ir.graph import Graph
from kernorch.orchestrate.candidate import Candidate
from kernorch.orchestrate.tuning_db import Record, TuningDB

CODEGEN_VERSION = "c1"
TOLERANCE = 1e-4  # max abs error allowed, relative to max(1, max |reference|)


@dataclass
class MeasureStats:
    measured: int = 0
    cached: int = 0
    failed: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)


def ordered_outputs(g_pos: dict[int, int], cand: Candidate) -> list[int]:
    return sorted(cand.outputs, key=g_pos.__getitem__)


def random_feeds(g: Graph, inputs: Sequence[int], seed: int = 0) -> list[np.ndarray]:
    """Real data for constants, seeded random data for everything else."""
    rng = np.random.default_rng(seed)
    out = []
    for v in inputs:
        if v in g.constants:
            out.append(np.ascontiguousarray(g.constants[v]))
            continue
        t = g.types[v]
        if t.dtype == "bool":
            out.append(rng.random(t.shape) < 0.5)
        elif np.dtype(t.dtype).kind in "iu":
            out.append(rng.integers(0, 4, size=t.shape).astype(t.dtype))
        else:
            out.append(rng.standard_normal(t.shape).astype(t.dtype))
    return out


def verify(g: Graph, kernel, members: set[int], seed: int = 0) -> tuple[bool, str]:
    """Run ``kernel`` and the interpreter on the same random inputs; compare every output."""
    feeds = random_feeds(g, kernel.inputs, seed)
    outs = kernel.run(feeds)
    ref = interp.run(g.subgraph(members, list(kernel.outputs)), dict(zip(kernel.inputs, feeds)))
    for v, got in zip(kernel.outputs, outs):
        ok, detail = close(ref[v], got.numpy())
        if not ok:
            return False, f"output %{v}: {detail}"
    return True, ""


def close(want: np.ndarray, got: np.ndarray) -> tuple[bool, str]:
    """Equal for integers/booleans; within TOLERANCE of the output scale for floats (NaN == NaN)."""
    if want.dtype == np.bool_ or want.dtype.kind in "iu":
        return bool(np.array_equal(want, got)), "integer/bool mismatch"
    w, gt = want.astype(np.float64), got.astype(np.float64)
    same = (np.isnan(w) & np.isnan(gt)) | (np.isinf(w) & (w == gt))
    err = np.where(same, 0.0, np.abs(w - gt))
    err = np.where(np.isnan(err), np.inf, err)
    scale = max(1.0, float(np.max(np.abs(np.where(np.isfinite(w), w, 0.0)), initial=0.0)))
    bad = float(np.max(err, initial=0.0))
    return bad <= TOLERANCE * scale, f"max abs err {bad:.3g} (scale {scale:.3g})"


def time_kernel(kernel, feeds: Sequence[np.ndarray], min_repeats: int = 5, budget_s: float = 0.05) -> float:
    """Median seconds of ``kernel._run`` on preallocated outputs after one warm-up."""
    ins = [torch.from_numpy(np.ascontiguousarray(a)) for a in feeds]
    outs = kernel.run(ins)
    kernel._run(ins, outs)
    times = []
    start = time.perf_counter()
    while len(times) < min_repeats or (time.perf_counter() - start < budget_s and len(times) < 50):
        t0 = time.perf_counter()
        kernel._run(ins, outs)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


class MeasuredCost:
    """``cost(candidate) -> seconds | None``, backed by the tuning database."""

    def __init__(self, g: Graph, db: TuningDB, target: str = "cpu", threads: int | None = None,
                 batch: int = 32, progress: Callable[[int, int], None] | None = None) -> None:
        self.g = g
        self.db = db
        self.threads = threads or default_threads()
        self.target = f"{target}-t{self.threads}"
        self.batch = batch
        self.progress = progress
        self.stats = MeasureStats()
        self._pos = {p.output: i for i, p in enumerate(g.prims)}
        self._memo: dict[str, float | None] = {}
        self.best: dict[str, Record] = {}

    def key(self, cand: Candidate) -> str:
        return self.g.kernel_key(cand.nodes, ordered_outputs(self._pos, cand))

    def can_generate(self, cand: Candidate) -> bool:
        return codegen.can_generate(self.g, cand.nodes, ordered_outputs(self._pos, cand))

    def __call__(self, cand: Candidate) -> float | None:
        k = self.key(cand)
        if k not in self._memo:
            self.prefetch([cand])
        return self._memo.get(k)

    def prefetch(self, cands: Iterable[Candidate]) -> None:
        """Measure every candidate not yet in the database, in batches."""
        todo: dict[str, Candidate] = {}
        for c in cands:
            k = self.key(c)
            if k not in self._memo and k not in todo:
                todo[k] = c
        if not todo:
            return
        known = self.db.get_many(list(todo), self.target, CODEGEN_VERSION)
        for k, recs in known.items():
            self._remember(k, recs)
            self.stats.cached += 1
            del todo[k]
        items = list(todo.items())
        total = len(items)
        done = 0
        batches = [items[i:i + self.batch] for i in range(0, total, self.batch)]
        with ThreadPoolExecutor(max_workers=2) as pool:
            futures = [pool.submit(self._build_batch, b) for b in batches]
            for b, fut in zip(batches, futures):
                kernels = fut.result()
                for (k, cand), kern in zip(b, kernels):
                    self._measure_one(k, cand, kern)
                    done += 1
                    if self.progress:
                        self.progress(done, total)

    def _build_batch(self, batch: list[tuple[str, Candidate]]):
        items = [(self.g, set(c.nodes), ordered_outputs(self._pos, c)) for _, c in batch]
        try:
            kernels = codegen.build_many(items, self.threads)
        except Exception:
            kernels = []
            for it in items:  # isolate the culprit
                try:
                    kernels.append(codegen.build_many([it], self.threads)[0])
                except Exception as e:  # noqa: BLE001 - recorded as a build failure
                    kernels.append(e)
        return kernels

    def _measure_one(self, key: str, cand: Candidate, kern) -> None:
        t0 = time.perf_counter()
        provider = getattr(kern, "provider", "c")
        if isinstance(kern, Exception):
            rec = Record("c", None, "build_failed", str(kern).splitlines()[0][:300] if str(kern) else type(kern).__name__)
        else:
            try:
                ok, detail = verify(self.g, kern, set(cand.nodes))
                if not ok:
                    rec = Record(provider, None, "verify_failed", detail)
                else:
                    rec = Record(provider, time_kernel(kern, random_feeds(self.g, kern.inputs)), "ok")
            except Exception as e:  # noqa: BLE001 - a kernel that crashes is recorded, never chosen
                rec = Record(provider, None, "run_failed", f"{type(e).__name__}: {e}"[:300])
        if not rec.ok:
            self.stats.failed += 1
            self.stats.failures.append(f"{key[:12]} {rec.status}: {rec.detail}")
        self.stats.measured += 1
        self.stats.seconds += time.perf_counter() - t0
        self.db.put(key, self.target, CODEGEN_VERSION, rec)
        self._remember(key, {rec.provider: rec})

    def _remember(self, key: str, recs: dict[str, Record]) -> None:
        good = [r for r in recs.values() if r.ok]
        if good:
            best = min(good, key=lambda r: r.seconds)
            self.best[key] = best
            self._memo[key] = best.seconds
        else:
            self._memo[key] = None
